package dpop_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/lestrrat-go/jwx/v2/jwk"

	"github.com/poppyhost/poppyhost/internal/dpop"
	"github.com/poppyhost/poppyhost/internal/dpop/dpoptest"
)

// FuzzVerify feeds DPoP headers, with or without an access token, to
// Verify: a refusal is a *dpop.Error that says why; a proof it accepts is
// the test key's, and is refused when it comes again. The seeds are valid
// proofs and ones breaking each rule of RFC 9449 §4.3; testdata/fuzz
// holds more, and every finding.
func FuzzVerify(f *testing.F) {
	// The P-256 key of RFC 7517 Appendix A.2: fuzzing workers run this
	// setup again, and must accept the seeds signed here.
	priv, err := jwk.ParseKey([]byte(`{"kty":"EC","crv":"P-256","x":"MKBCTNIcKUSDii11ySs3526iDZ8AiTo7Tu6KPAqv7D4",` +
		`"y":"4Etl6SRW2YiLUrN5vfvVHuhp7x8PxltmWWlbbM4IFyM","d":"870MB6gfuTJ4HtUnUvYMyJpr5eUZNP4Bk43bVdj3eAE"}`))
	if err != nil {
		f.Fatal(err)
	}
	k, other := dpoptest.FromPrivate(priv), dpoptest.NewKey()
	mutated := func(mutate func(p *dpoptest.Proof)) string {
		p := k.For("GET", htu, token, now)
		mutate(p)
		return k.Make(p)
	}
	for _, proof := range []string{
		k.Valid("GET", htu, token, now),
		k.Valid("GET", "HTTPS://API.acme.test:443/orders", token, now),
		mutated(func(p *dpoptest.Proof) { p.Typ = "JWT" }),
		mutated(func(p *dpoptest.Proof) { p.Alg = "none" }),
		mutated(func(p *dpoptest.Proof) { p.Alg = "PS256" }),
		mutated(func(p *dpoptest.Proof) { p.JWK = other.Public }),
		mutated(func(p *dpoptest.Proof) { p.JWK = map[string]any{"kty": "oct", "k": "c2VjcmV0"} }),
		mutated(func(p *dpoptest.Proof) { p.JWK = withMember(k.Public, "x", "AAAA") }),
		mutated(func(p *dpoptest.Proof) { p.JWK = withMember(k.Public, "crv", "P-384") }),
		mutated(func(p *dpoptest.Proof) { p.Claims["htu"] = htu + "?a=1" }),
		mutated(func(p *dpoptest.Proof) { p.Claims["iat"] = "1800000000" }),
		mutated(func(p *dpoptest.Proof) { p.Claims["iat"] = 1e300 }),
		mutated(func(p *dpoptest.Proof) { p.Claims["jti"] = []any{"a"} }),
		mutated(func(p *dpoptest.Proof) { delete(p.Claims, "ath") }),
		"abc",
		"a.b.c.d.e",
		strings.Repeat("A", 9000),
	} {
		f.Add(proof, token)
		f.Add(proof, "")
	}
	f.Fuzz(func(t *testing.T, proof, accessToken string) {
		v := dpop.New(&dpoptest.Replays{}, dpop.Options{Now: func() time.Time { return now }})
		p, err := v.Verify(context.Background(), proof, req(accessToken))
		if err != nil {
			var de *dpop.Error
			if p != nil || !errors.As(err, &de) || de.Description == "" {
				t.Fatalf("proof %+v, error %T %v", p, err, err)
			}
			return
		}
		if p == nil || p.JKT != k.JKT {
			t.Fatalf("accepted proof %+v", p)
		}
		var de *dpop.Error
		if _, err := v.Verify(context.Background(), proof, req(accessToken)); !errors.As(err, &de) {
			t.Fatalf("accepted proof %q again: %v", proof, err)
		}
	})
}
