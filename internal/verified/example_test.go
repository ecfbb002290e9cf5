package verified_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"fmt"
	"time"

	"github.com/lestrrat-go/jwx/v2/jwa"
	"github.com/lestrrat-go/jwx/v2/jwk"
	"github.com/lestrrat-go/jwx/v2/jws"

	"github.com/poppyhost/poppyhost/internal/verified"
)

// exampleSigner stands for the Company's platform key (signing.Keys): it
// signs ES256 with the kid and typ the receiver checks.
type exampleSigner struct {
	priv *ecdsa.PrivateKey
	kid  string
}

func (s exampleSigner) Sign(_ context.Context, _ int64, typ string, payload []byte) (string, error) {
	hdr := jws.NewHeaders()
	_ = hdr.Set(jws.KeyIDKey, s.kid)
	_ = hdr.Set(jws.TypeKey, typ)
	tok, err := jws.Sign(payload, jws.WithKey(jwa.ES256, s.priv, jws.WithProtectedHeaders(hdr)))
	return string(tok), err
}

// An origin checks the Poppy-Verified header of each request against the
// Company's key set ({issuer}/oauth/jwks.json), its identifier and its
// own base URL, then acts only within the claims.
func ExampleVerify() {
	const (
		issuer   = "https://poppyhost.example/t/stormline" // the Company's identifier
		audience = "https://shop.example/api"              // the origin, as registered
	)
	priv, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	signer := exampleSigner{priv: priv, kid: "key-1"}

	// The key set the Company publishes.
	pub, _ := jwk.PublicKeyOf(priv)
	_ = pub.Set(jwk.KeyIDKey, signer.kid)
	set := jwk.NewSet()
	_ = set.AddKey(pub)

	// What the platform sends with a signed-in request.
	sent := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	token, _ := verified.Sign(context.Background(), signer, 7, verified.Claims{
		Issuer: issuer, Audience: audience, Method: "GET", Path: "/api/v1/orders",
		Facts: verified.Facts{ClientID: "https://agent.example", SID: "3f2a9c", Account: "42",
			Scopes: []string{"orders:read"}},
	}, sent)

	// What the origin does with the header it received a second later.
	claims, err := verified.Verify(token, set, issuer, audience, sent.Add(time.Second))
	if err != nil {
		fmt.Println("401:", err)
		return
	}
	fmt.Println("account:", claims.Account)
	fmt.Println("may read orders:", claims.Has("orders:read"))
	fmt.Println("may change orders:", claims.Has("orders:write"))
	fmt.Println("expires:", time.Unix(claims.Expires, 0).UTC())

	// The same JWT at another origin, or once expired, is refused.
	_, err = verified.Verify(token, set, issuer, "https://other.example", sent.Add(time.Second))
	fmt.Println(err)
	_, err = verified.Verify(token, set, issuer, audience, sent.Add(time.Hour))
	fmt.Println(err)
	// Output:
	// account: 42
	// may read orders: true
	// may change orders: false
	// expires: 2026-03-01 12:05:00 +0000 UTC
	// verified: invalid Poppy-Verified: aud "https://shop.example/api"
	// verified: invalid Poppy-Verified: expired
}
