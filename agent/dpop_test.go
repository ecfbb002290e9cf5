package agent

import (
	"crypto"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/lestrrat-go/jwx/v2/jwa"
	"github.com/lestrrat-go/jwx/v2/jwk"
	"github.com/lestrrat-go/jwx/v2/jws"
	"github.com/stretchr/testify/require"
)

// checkProof verifies a DPoP proof as RFC 9449 §4.3 asks and returns its
// key's thumbprint and claims.
func checkProof(t *testing.T, proof string) (string, map[string]any) {
	t.Helper()
	msg, err := jws.Parse([]byte(proof))
	require.NoError(t, err)
	h := msg.Signatures()[0].ProtectedHeaders()
	require.Equal(t, "dpop+jwt", h.Type())
	require.Equal(t, jwa.ES256, h.Algorithm())
	key := h.JWK()
	require.NotNil(t, key)
	if _, ok := key.(jwk.ECDSAPrivateKey); ok {
		t.Fatal("the proof's jwk holds the private key")
	}
	payload, err := jws.Verify([]byte(proof), jws.WithKey(jwa.ES256, key))
	require.NoError(t, err)
	var claims map[string]any
	require.NoError(t, json.Unmarshal(payload, &claims))
	tp, err := key.Thumbprint(crypto.SHA256)
	require.NoError(t, err)
	return base64.RawURLEncoding.EncodeToString(tp), claims
}

// TestDPoP: at an issuer that lists ES256 in
// dpop_signing_alg_values_supported, the agent sends a proof with its
// token requests, and with every call using the DPoP token it gets back,
// whose ath covers the token; the proof key is its own, neither the client
// key nor a Session key (spec 5.2). Elsewhere, it sends no proof.
func TestDPoP(t *testing.T) {
	t.Parallel()
	f := newFake(t, func(_, _, as map[string]any) {
		as["dpop_signing_alg_values_supported"] = []any{"ES256", "PS256"}
	})
	var (
		mu   sync.Mutex
		jkts []string
	)
	keep := func(jkt string) {
		mu.Lock()
		defer mu.Unlock()
		jkts = append(jkts, jkt)
	}
	f.mux.HandleFunc("POST /t/shop/oauth/token", func(w http.ResponseWriter, r *http.Request) {
		jkt, claims := checkProof(t, r.Header.Get("DPoP"))
		require.Equal(t, http.MethodPost, claims["htm"])
		require.Equal(t, f.url("/t/shop/oauth/token"), claims["htu"])
		require.NotContains(t, claims, "ath")
		keep(jkt)
		writeJSON(w, map[string]any{"access_token": "at-0", "refresh_token": "rt-0", "token_type": "DPoP", "expires_in": 60})
	})
	f.mux.HandleFunc("GET /orders", func(w http.ResponseWriter, r *http.Request) {
		require.Equal(t, "DPoP at-0", r.Header.Get("Authorization"))
		jkt, claims := checkProof(t, r.Header.Get("DPoP"))
		require.Equal(t, http.MethodGet, claims["htm"])
		require.Equal(t, f.url("/orders"), claims["htu"], "without the query")
		require.Equal(t, tokenHash("at-0"), claims["ath"])
		keep(jkt)
		w.WriteHeader(http.StatusNoContent)
	})
	c, err := f.agent.Discover(f.ctx, f.domain())
	require.NoError(t, err)
	require.NoError(t, c.token(f.ctx, url.Values{"grant_type": {"authorization_code"}, "code": {"c"}}, []string{"orders:read"}))
	s := c.NewSession()
	for range 2 {
		resp, err := s.Do(f.ctx, Request{Method: http.MethodGet, URL: f.url("/orders") + "?page=2"})
		require.NoError(t, err)
		require.Equal(t, http.StatusNoContent, resp.Status)
	}
	require.NoError(t, c.Refresh(f.ctx))
	require.Len(t, jkts, 4)
	for _, j := range jkts {
		require.Equal(t, thumbprint(&f.agent.dpopKey.PublicKey), j, "one DPoP key")
	}
	require.NotEqual(t, f.agent.kid, jkts[0], "not the client key")
	dk, err := f.agent.delegated(s.UserID)
	require.NoError(t, err)
	require.NotEqual(t, dk.kid, jkts[0], "not the Session key")
}

// TestNoDPoPWithoutMetadata: an issuer that does not list ES256 in
// dpop_signing_alg_values_supported gets no proof.
func TestNoDPoPWithoutMetadata(t *testing.T) {
	t.Parallel()
	for name, algs := range map[string][]any{"absent": nil, "no ES256": {"PS256"}} {
		t.Run(name, func(t *testing.T) {
			f := newFake(t, func(_, _, as map[string]any) {
				if algs != nil {
					as["dpop_signing_alg_values_supported"] = algs
				}
			})
			f.mux.HandleFunc("POST /t/shop/oauth/token", func(w http.ResponseWriter, r *http.Request) {
				require.Empty(t, r.Header.Get("DPoP"))
				writeJSON(w, map[string]any{"access_token": "at-0", "refresh_token": "rt-0", "token_type": "Bearer", "expires_in": 60})
			})
			f.mux.HandleFunc("GET /orders", func(w http.ResponseWriter, r *http.Request) {
				require.True(t, strings.HasPrefix(r.Header.Get("Authorization"), "Bearer "))
				require.Empty(t, r.Header.Get("DPoP"))
				w.WriteHeader(http.StatusNoContent)
			})
			c, err := f.agent.Discover(f.ctx, f.domain())
			require.NoError(t, err)
			require.NoError(t, c.token(f.ctx, url.Values{"grant_type": {"authorization_code"}, "code": {"c"}}, nil))
			resp, err := c.NewSession().Do(f.ctx, Request{Method: http.MethodGet, URL: f.url("/orders")})
			require.NoError(t, err)
			require.Equal(t, http.StatusNoContent, resp.Status)
		})
	}
}

// TestDPoPNonce: the agent answers use_dpop_nonce (RFC 9449 §8, §9) by
// sending the request once more with the server nonce of the DPoP-Nonce
// header, keeps the latest nonce for later proofs, and does not loop when
// the server keeps refusing.
func TestDPoPNonce(t *testing.T) {
	t.Parallel()
	f := newFake(t, func(_, _, as map[string]any) {
		as["dpop_signing_alg_values_supported"] = []any{"ES256"}
	})
	var (
		mu    sync.Mutex
		calls = map[string][]any{} // path -> the nonce claim of each proof
	)
	seen := func(r *http.Request) any {
		_, claims := checkProof(t, r.Header.Get("DPoP"))
		mu.Lock()
		defer mu.Unlock()
		calls[r.URL.Path] = append(calls[r.URL.Path], claims["nonce"])
		return claims["nonce"]
	}
	refuse := func(w http.ResponseWriter, status int, nonce string) {
		w.Header().Set("DPoP-Nonce", nonce)
		if status == http.StatusUnauthorized {
			w.Header().Set("WWW-Authenticate", `Bearer realm="shop", DPoP realm="shop", error="use_dpop_nonce", algs="ES256"`)
		}
		w.WriteHeader(status)
		writeJSON(w, map[string]any{"error": "use_dpop_nonce"})
	}
	f.mux.HandleFunc("POST /t/shop/oauth/token", func(w http.ResponseWriter, r *http.Request) {
		if seen(r) != "n1" {
			refuse(w, http.StatusBadRequest, "n1")
			return
		}
		writeJSON(w, map[string]any{"access_token": "at-0", "refresh_token": "rt-0", "token_type": "DPoP", "expires_in": 60})
	})
	f.mux.HandleFunc("GET /orders", func(w http.ResponseWriter, r *http.Request) {
		if seen(r) != "n2" {
			refuse(w, http.StatusUnauthorized, "n2")
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	f.mux.HandleFunc("GET /never", func(w http.ResponseWriter, r *http.Request) {
		seen(r)
		refuse(w, http.StatusUnauthorized, "n3")
	})
	c, err := f.agent.Discover(f.ctx, f.domain())
	require.NoError(t, err)
	require.NoError(t, c.token(f.ctx, url.Values{"grant_type": {"authorization_code"}, "code": {"c"}}, []string{"orders:read"}))
	s := c.NewSession()
	for range 2 {
		resp, err := s.Do(f.ctx, Request{Method: http.MethodGet, URL: f.url("/orders")})
		require.NoError(t, err)
		require.Equal(t, http.StatusNoContent, resp.Status)
	}
	resp, err := s.Do(f.ctx, Request{Method: http.MethodGet, URL: f.url("/never")})
	require.NoError(t, err)
	require.Equal(t, http.StatusUnauthorized, resp.Status)

	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, []any{nil, "n1"}, calls["/t/shop/oauth/token"])
	require.Equal(t, []any{"n1", "n2", "n2"}, calls["/orders"], "the nonce is kept for later proofs")
	require.Equal(t, []any{"n2", "n3"}, calls["/never"], "one retry, no loop")
}
