package botauth

import (
	"context"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rsa"
	"errors"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/poppyhost/poppyhost/internal/httpsig"
)

// FuzzVerify feeds Web Bot Auth fields (Signature-Input, Signature and
// Signature-Agent) to Verify: a refusal is ErrInvalid; an Operator is the
// one whose directory holds the signing key, for a signature tagged
// web-bot-auth that covers @authority and signature-agent. The seeds are
// valid signatures and the refusals of the tests; testdata/fuzz holds
// more, and every finding.
func FuzzVerify(f *testing.F) {
	// A fixed key: fuzzing workers run this setup again, and must
	// accept the seeds signed here.
	fx := newFixture(f)
	fx.key = ed25519.NewKeyFromSeed(make([]byte, ed25519.SeedSize))
	pub := fx.key.Public().(ed25519.PublicKey)
	fx.keyID, _ = Thumbprint(pub)
	fx.f.docs[agentOrigin+DirectoryPath] = directory(f, pub)
	add := func(o signOpts) {
		r := fx.request(f, o)
		f.Add(r.Header.Get("Signature-Input"), r.Header.Get("Signature"), r.Header.Get("Signature-Agent"))
	}
	add(signOpts{})
	add(signOpts{nonce: "n-1"})
	add(signOpts{components: []string{"@authority", "@method", "@path", "@query", "signature-agent"}})
	add(signOpts{components: []string{"@method", "signature-agent"}})
	add(signOpts{components: []string{"@authority"}})
	add(signOpts{tag: "other"})
	add(signOpts{expires: fx.now.Add(time.Hour)})
	add(signOpts{created: fx.now.Add(time.Hour)})
	add(signOpts{keyID: "unknown"})
	f.Add(`sig1=("@authority" "signature-agent");created=1800000000;expires=1800000060;keyid="k";tag="web-bot-auth"`, `sig1=:AAAA:`,
		`sig1="https://agent.example/.well-known/http-message-signatures-directory", sig2="https://u@x"`)
	f.Add(`a=();tag="web-bot-auth", b=();tag="web-bot-auth"`, `a=:AAAA:, b=:AAAA:`, `"https://agent.example"`)
	f.Add(``, ``, ``)
	f.Fuzz(func(t *testing.T, input, signature, agent string) {
		r := httptest.NewRequest("GET", "https://shop.example/t/acme/api/items?x=1", nil)
		r.Header.Set("Signature-Input", input)
		r.Header.Set("Signature", signature)
		r.Header.Set("Signature-Agent", agent)
		v := NewVerifier(fx.f, Options{Now: func() time.Time { return fx.now }})
		op, err := v.Verify(context.Background(), r)
		if err != nil {
			if op != nil || !errors.Is(err, ErrInvalid) {
				t.Fatalf("operator %+v, error %v", op, err)
			}
			return
		}
		if op == nil {
			if sigs, _ := httpsig.Parse(r.Header); len(sigs) > 0 {
				t.Fatalf("signatures %q %q passed as none", input, signature)
			}
			return
		}
		if op.Host != "agent.example" || op.KeyID != fx.keyID || op.Directory != agentOrigin+DirectoryPath {
			t.Fatalf("verified as %+v", op)
		}
	})
}

// FuzzParseDirectory feeds key directories to parseDirectory: a refusal is
// ErrInvalid; a directory holds at most maxKeys keys, each a public key
// of a type Web Bot Auth signatures are verified with (RFC 9421 §3.3),
// under its own thumbprint.
func FuzzParseDirectory(f *testing.F) {
	pub, _, _ := ed25519.GenerateKey(nil)
	for _, seed := range []string{
		string(directory(f, pub)),
		`{"keys":[{"kty":"OKP","crv":"Ed25519","x":"11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"}]}`,
		`{"keys":[{"kty":"EC","crv":"P-256","x":"f83OJ3D2xF1Bg8vub9tLe1gHMzV76e8Tus9uPHvRVEU","y":"x_FEzRu9m36HLN_tue659LNpXW6pCyStikYjKIWI5a0"}]}`,
		`{"keys":[{"kty":"RSA","n":"sXch","e":"AQAB"}]}`,
		`{"keys":[{"kty":"OKP","crv":"Ed25519","x":"11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo","d":"nWGxne_9WmC6hEr0kuwsxERJxWl7MmkZcDusAxyuf2A"}]}`,
		`{"keys":[{"kty":"oct","k":"c2VjcmV0"}]}`,
		`{"keys":[{"kty":"oct"}]}`,
		`{"keys":[{"kty":"OKP","crv":"X25519","x":"hSDwCYkwp1R0i33ctD73Wg2_Og0mOBr066SpjqqbTmo"}]}`,
		`{"keys":[]}`,
		`{"keys":{}}`,
		`[]`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		keys, err := parseDirectory(body)
		if err != nil {
			if keys != nil || !errors.Is(err, ErrInvalid) {
				t.Fatalf("keys %v, error %v", keys, err)
			}
			return
		}
		if len(keys) > maxKeys {
			t.Fatalf("%d keys", len(keys))
		}
		for id, k := range keys {
			switch k := k.(type) {
			case ed25519.PublicKey, *rsa.PublicKey:
			case *ecdsa.PublicKey:
				if k.Curve != elliptic.P256() {
					t.Fatalf("key %s is on %s", id, k.Curve.Params().Name)
				}
			default:
				t.Fatalf("key %s is a %T", id, k)
			}
			if tp, err := Thumbprint(k); err != nil || tp != id {
				t.Fatalf("key under %s has thumbprint %s, %v", id, tp, err)
			}
		}
	})
}
