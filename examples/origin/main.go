// Command origin is a small Company origin behind the poppyhost gateway
// (docs/gateway.md). It trusts nothing about a request but the
// Poppy-Verified JWT the platform adds to it: signed ES256 by a key of the
// Company's {issuer}/oauth/jwks.json, typ poppy-verified+jwt, iss the
// Company's identifier, aud this origin's own base URL, not expired.
//
// It serves GET /v1/orders, which needs the orders:read scope:
//
//	go run ./examples/origin -issuer https://poppyhost.example/t/acme \
//	  -audience https://orders.acme.example -tls-cert cert.pem -tls-key key.pem
//
// Against the dev platform, trust its CA for the key set with
// SSL_CERT_FILE=.data/dev-ca.pem.
package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"log"
	"net/http"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/lestrrat-go/jwx/v2/jwa"
	"github.com/lestrrat-go/jwx/v2/jwk"
	"github.com/lestrrat-go/jwx/v2/jws"
	"github.com/lestrrat-go/jwx/v2/jwt"
)

func main() {
	issuer := flag.String("issuer", os.Getenv("ORIGIN_ISSUER"), "the Company's identifier: its issuer, {PUBLIC_URL}/t/{slug}, or https://{domain} without one")
	audience := flag.String("audience", os.Getenv("ORIGIN_AUDIENCE"), "this origin's base URL, exactly as registered with the API")
	addr := flag.String("addr", cmp.Or(os.Getenv("ORIGIN_ADDR"), ":8444"), "address to listen on")
	cert := flag.String("tls-cert", os.Getenv("ORIGIN_TLS_CERT"), "TLS certificate file")
	key := flag.String("tls-key", os.Getenv("ORIGIN_TLS_KEY"), "TLS key file")
	jwks := flag.String("jwks", os.Getenv("ORIGIN_JWKS"), "the Company's key set, {PUBLIC_URL}/t/{slug}/oauth/jwks.json [{issuer}/oauth/jwks.json]")
	flag.Parse()
	if *issuer == "" || *audience == "" || *cert == "" || *key == "" {
		log.Fatal("origin: -issuer, -audience, -tls-cert and -tls-key are required")
	}
	keys, err := newKeys(context.Background(), cmp.Or(*jwks, *issuer+"/oauth/jwks.json"), &http.Client{Timeout: 10 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	v := &verifier{keys: keys, issuer: *issuer, audience: *audience}

	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/orders", func(w http.ResponseWriter, r *http.Request) {
		c, err := v.verify(r.Context(), r.Header.Get("Poppy-Verified"))
		if err != nil {
			log.Printf("origin: refused: %v", err)
			writeJSON(w, http.StatusUnauthorized, map[string]string{"error": "unverified"})
			return
		}
		if c.Account == "" || !slices.Contains(c.Scopes, "orders:read") {
			writeJSON(w, http.StatusForbidden, map[string]string{"error": "needs orders:read"})
			return
		}
		// A real origin looks the account's orders up here.
		writeJSON(w, http.StatusOK, map[string]any{"account": c.Account, "orders": []string{"ord_1042"}})
	})
	log.Printf("origin: listening on %s for %s", *addr, *audience)
	log.Fatal(http.ListenAndServeTLS(*addr, *cert, *key, mux))
}

// claims are the Poppy-Verified claims this origin uses.
type claims struct {
	Account string   // the account's ID, "" signed out
	Scopes  []string // the access token's scopes
}

type verifier struct {
	keys             *keys
	issuer, audience string
}

func (v *verifier) verify(ctx context.Context, raw string) (*claims, error) {
	msg, err := jws.Parse([]byte(raw))
	if err != nil || len(msg.Signatures()) != 1 {
		return nil, errors.New("not a compact JWS")
	}
	h := msg.Signatures()[0].ProtectedHeaders()
	if h.Type() != "poppy-verified+jwt" || h.Algorithm() != jwa.ES256 {
		return nil, errors.New("not a Poppy-Verified JWT")
	}
	key, err := v.keys.lookup(ctx, h.KeyID())
	if err != nil {
		return nil, err
	}
	tok, err := jwt.Parse([]byte(raw), jwt.WithKey(jwa.ES256, key), jwt.WithValidate(true),
		jwt.WithIssuer(v.issuer), jwt.WithAudience(v.audience), jwt.WithAcceptableSkew(30*time.Second),
		jwt.WithRequiredClaim(jwt.ExpirationKey), jwt.WithRequiredClaim(jwt.IssuedAtKey),
		jwt.WithTypedClaim("account", ""), jwt.WithTypedClaim("scopes", []string{}))
	if err != nil {
		return nil, err
	}
	var c claims
	account, _ := tok.Get("account")
	scopes, _ := tok.Get("scopes")
	c.Account, _ = account.(string)
	c.Scopes, _ = scopes.([]string)
	return &c, nil
}

// keys is the Company's key set, fetched again as its Cache-Control says
// (five minutes), and when a token names a key it does not have (the
// Company rotated its key), at most every ten seconds so that made-up
// kids cannot make it fetch on every request.
type keys struct {
	cache *jwk.Cache
	url   string

	mu      sync.Mutex
	fetched time.Time
}

func newKeys(ctx context.Context, url string, client *http.Client) (*keys, error) {
	cache := jwk.NewCache(ctx)
	if err := cache.Register(url, jwk.WithHTTPClient(client), jwk.WithMinRefreshInterval(time.Minute)); err != nil {
		return nil, err
	}
	return &keys{cache: cache, url: url}, nil
}

func (k *keys) lookup(ctx context.Context, kid string) (jwk.Key, error) {
	set, err := k.cache.Get(ctx, k.url)
	if err != nil {
		return nil, err
	}
	if key, ok := set.LookupKeyID(kid); ok {
		return key, nil
	}
	k.mu.Lock()
	stale := time.Since(k.fetched) > 10*time.Second
	if stale {
		k.fetched = time.Now()
	}
	k.mu.Unlock()
	if stale {
		if set, err = k.cache.Refresh(ctx, k.url); err != nil {
			return nil, err
		}
		if key, ok := set.LookupKeyID(kid); ok {
			return key, nil
		}
	}
	return nil, errors.New("unknown kid")
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
