package peers

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/lestrrat-go/jwx/v2/jwa"
	"github.com/lestrrat-go/jwx/v2/jwk"
	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/devca"
	"github.com/poppyhost/poppyhost/internal/verified"
)

const originIssuer = "https://poppyhost.test/t/stormline"

// companyKey signs Poppy-Verified as the platform does for one Company.
type companyKey struct {
	key crypto.Signer
	kid string
}

func (k companyKey) Sign(_ context.Context, _ int64, typ string, payload []byte) (string, error) {
	var claims map[string]any
	if err := json.Unmarshal(payload, &claims); err != nil {
		return "", err
	}
	return signCompact(jwa.ES256, k.key, map[string]any{"alg": "ES256", "typ": typ, "kid": k.kid}, claims)
}

// startOriginRig starts an origin and a JWKS server holding one ES256 key,
// both on a fresh CA.
func startOriginRig(t *testing.T) (*Origin, companyKey) {
	t.Helper()
	ca, err := devca.New()
	require.NoError(t, err)
	priv, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	pub, err := jwk.PublicKeyOf(priv)
	require.NoError(t, err)
	kid := JWKThumbprint(t, priv.Public())
	require.NoError(t, pub.Set(jwk.KeyIDKey, kid))
	set := jwk.NewSet()
	require.NoError(t, set.AddKey(pub))
	raw, err := json.Marshal(set)
	require.NoError(t, err)

	jwks := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/jwk-set+json")
		_, _ = w.Write(raw)
	}))
	jwks.TLS = ca.ServerTLSConfig()
	jwks.StartTLS()
	t.Cleanup(jwks.Close)

	// By name: without SNI httptest serves its own certificate.
	jwksURL := strings.Replace(jwks.URL, "127.0.0.1", "localhost", 1) + "/oauth/jwks.json"
	o := StartOrigin(t, ca, OriginOptions{Issuer: originIssuer, JWKSURL: jwksURL})
	return o, companyKey{key: priv, kid: kid}
}

func (k companyKey) token(t *testing.T, aud string) string {
	t.Helper()
	tok, err := verified.Sign(context.Background(), k, 1, verified.Claims{
		Issuer: originIssuer, Audience: aud,
		Facts: verified.Facts{UserID: "usr_a", Account: "42", Scopes: []string{"orders:read"}},
	}, time.Now())
	require.NoError(t, err)
	return tok
}

func originDo(t *testing.T, o *Origin, method, path, body, token string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, o.URL(path), strings.NewReader(body))
	require.NoError(t, err)
	if token != "" {
		req.Header.Set(verified.Header, token)
	}
	resp, err := o.Client().Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp, raw
}

func TestOriginVerifies(t *testing.T) {
	t.Parallel()
	o, k := startOriginRig(t)
	require.Regexp(t, `^https://origin\.test:\d+$`, o.BaseURL())
	require.Equal(t, o.BaseURL()+"/x", o.URL("/x"))
	require.Equal(t, o.BaseURL(), o.Audience())
	require.Equal(t, Received{}, o.Last())

	resp, body := originDo(t, o, http.MethodPost, "/orders/a%2Fb?page=2", `{"n":1}`, k.token(t, o.BaseURL()))
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", body)
	require.JSONEq(t, `{"method":"POST","path":"/orders/a%2Fb","query":"page=2","body":"{\"n\":1}",
		"account":"42","scopes":["orders:read"]}`, string(body))
	last := o.Last()
	require.NoError(t, last.VerifyErr)
	require.Equal(t, "usr_a", last.Claims.UserID)
	require.Equal(t, "/orders/a%2Fb", last.Path)
	require.Equal(t, "page=2", last.RawQuery)
	require.Equal(t, `{"n":1}`, string(last.Body))
	require.NotEmpty(t, last.Header.Get(verified.Header))

	other, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	for name, tok := range map[string]string{
		"missing":   "",
		"garbage":   "not-a-jwt",
		"forged":    companyKey{key: other, kid: k.kid}.token(t, o.BaseURL()),
		"wrong aud": k.token(t, "https://elsewhere.test"),
	} {
		resp, body := originDo(t, o, http.MethodGet, "/orders", "", tok)
		require.Equal(t, http.StatusUnauthorized, resp.StatusCode, name)
		require.JSONEq(t, `{"error":"unverified"}`, string(body), name)
		last := o.Last()
		require.ErrorIs(t, last.VerifyErr, verified.ErrInvalid, name)
		require.Nil(t, last.Claims, name)
	}
	require.Equal(t, 4, o.Calls(http.MethodGet, "/orders"))
	require.Equal(t, 1, o.Calls("", "/orders/a%2Fb"))
	require.Len(t, o.Received(), 5)
	o.Reset()
	require.Empty(t, o.Received())
}

func TestOriginHandlers(t *testing.T) {
	t.Parallel()
	o, k := startOriginRig(t)
	tok := k.token(t, o.BaseURL())

	o.Handle(http.MethodGet, "/teapot", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusTeapot)
		_, _ = io.WriteString(w, OriginClaims(r).UserID)
	})
	resp, body := originDo(t, o, http.MethodGet, "/teapot?q=1", "", tok)
	require.Equal(t, http.StatusTeapot, resp.StatusCode)
	require.Equal(t, "usr_a", string(body))
	resp, _ = originDo(t, o, http.MethodPost, "/teapot", "", tok)
	require.Equal(t, http.StatusOK, resp.StatusCode, "other methods echo")
	o.Handle(http.MethodGet, "/teapot", nil)
	resp, _ = originDo(t, o, http.MethodGet, "/teapot", "", tok)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, 2, o.Calls(http.MethodGet, "/teapot"))

	o.Handle(http.MethodGet, "/big", o.Big(100_000))
	resp, body = originDo(t, o, http.MethodGet, "/big", "", tok)
	require.Equal(t, int64(100_000), resp.ContentLength)
	require.Equal(t, strings.Repeat("x", 100_000), string(body))
	o.Handle(http.MethodGet, "/chunked", o.BigChunked(10))
	resp, body = originDo(t, o, http.MethodGet, "/chunked", "", tok)
	require.Equal(t, int64(-1), resp.ContentLength)
	require.Equal(t, "xxxxxxxxxx", string(body))

	// Slow stops waiting when the client gives up.
	o.Handle(http.MethodGet, "/slow", o.Slow(time.Minute))
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, o.URL("/slow"), nil)
	require.NoError(t, err)
	req.Header.Set(verified.Header, tok)
	start := time.Now()
	_, err = o.Client().Do(req)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Less(t, time.Since(start), 10*time.Second)

	// Closed, the origin is down; Close waits for no slow handler.
	o.Handle(http.MethodGet, "/slow", o.Slow(time.Minute))
	go func() { _, _ = o.Client().Do(req.Clone(context.Background())) }()
	require.Eventually(t, func() bool { return o.Calls(http.MethodGet, "/slow") == 2 }, 5*time.Second, 10*time.Millisecond)
	o.Close()
	_, err = o.Client().Get(o.URL("/"))
	require.Error(t, err)
}
