package demoshop_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lestrrat-go/jwx/v2/jwk"
	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/demoshop"
	"github.com/poppyhost/poppyhost/internal/devca"
	"github.com/poppyhost/poppyhost/internal/testkit/peers"
	"github.com/poppyhost/poppyhost/internal/verified"
)

const issuer = "https://poppyhost.test/t/stormline"

// companyKey signs Poppy-Verified as the platform does for the Company.
type companyKey struct {
	t   testing.TB
	key *ecdsa.PrivateKey
	kid string
}

func (k companyKey) Sign(_ context.Context, _ int64, typ string, payload []byte) (string, error) {
	var claims map[string]any
	if err := json.Unmarshal(payload, &claims); err != nil {
		return "", err
	}
	return peers.SignJWT(k.t, "ES256", k.key, map[string]any{"alg": "ES256", "typ": typ, "kid": k.kid}, claims), nil
}

func newKey(t testing.TB) companyKey {
	priv, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	return companyKey{t: t, key: priv, kid: peers.JWKThumbprint(t, priv.Public())}
}

// rig is a shop served over HTTPS as shop.test, with the Company's key set
// served over HTTPS too, both on a fresh CA.
type rig struct {
	t      *testing.T
	shop   *demoshop.Shop
	key    companyKey
	client *http.Client
	base   string
	// jwks is the key set the Company serves; skew is added to the
	// shop's clock.
	jwks atomic.Pointer[[]byte]
	skew atomic.Int64
	set  jwk.Set
}

func setup(t *testing.T) *rig {
	t.Helper()
	ca, err := devca.New()
	require.NoError(t, err)
	key := newKey(t)
	r := &rig{t: t, key: key, set: jwk.NewSet()}
	r.publish(key)
	jwks := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/jwk-set+json")
		_, _ = w.Write(*r.jwks.Load())
	}))
	jwks.TLS = ca.ServerTLSConfig()
	jwks.StartTLS()
	t.Cleanup(jwks.Close)

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	base := "https://shop.test:" + port
	fetch := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: ca.Pool(), MinVersion: tls.VersionTLS12}}}
	shop, err := demoshop.New(demoshop.Options{BaseURL: base, SiteURL: "https://stormline.test/", Issuer: issuer, Client: fetch,
		JWKSURL: strings.Replace(jwks.URL, "127.0.0.1", "localhost", 1) + "/oauth/jwks.json",
		Now:     func() time.Time { return time.Now().Add(time.Duration(r.skew.Load())) }})
	require.NoError(t, err)
	t.Cleanup(shop.Close)
	shop.Seed("42")

	srv := httptest.NewUnstartedServer(shop)
	srv.Listener.Close()
	srv.Listener = ln
	srv.TLS = ca.ServerTLSConfig()
	srv.StartTLS()
	t.Cleanup(srv.Close)
	addr := ln.Addr().String()
	tr := &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: ca.Pool(), MinVersion: tls.VersionTLS12},
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, addr)
		},
	}
	t.Cleanup(tr.CloseIdleConnections)
	client := &http.Client{Transport: tr, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	r.shop, r.client, r.base = shop, client, base
	return r
}

// publish adds k's public key to the key set the Company serves.
func (r *rig) publish(k companyKey) {
	pub, err := jwk.PublicKeyOf(k.key)
	require.NoError(r.t, err)
	require.NoError(r.t, pub.Set(jwk.KeyIDKey, k.kid))
	require.NoError(r.t, r.set.AddKey(pub))
	raw, err := json.Marshal(r.set)
	require.NoError(r.t, err)
	r.jwks.Store(&raw)
}

// ada is what the platform verified for the seeded account 42, signed in
// with both scopes by a Personal Agent that declares operations.
func ada() verified.Claims {
	return verified.Claims{Facts: verified.Facts{ClientID: "https://agent.test/agent.json", SID: "ses_1", UserID: "usr_a",
		Account: "42", Scopes: []string{"orders:read", "orders:write"}, Extensions: map[string]string{"operations": "3"}}}
}

// approved is c with the approval of operation op, revision rev, of the
// jacket exchange's terms, as the shop proposes them.
func approved(c verified.Claims, op, rev, approver string) verified.Claims {
	c.OperationID, c.Revision, c.Approver = op, rev, approver
	c.Terms = json.RawMessage(jacketTerms)
	return c
}

// jacketTerms are the terms of the jacket exchange, as the platform states
// them in Poppy-Verified: member order and spacing of PostgreSQL's jsonb.
const jacketTerms = `{"item_id": "itm_4Qa", "order_id": "ord_7Hk2", "replacement_sku": "stormline-insulated-m",
	"price_difference": {"amount": "70.00", "currency": "USD"}}`

// returnTerms are the terms of the return of an item priced amount.
func returnTerms(orderID, itemID, amount string) json.RawMessage {
	return json.RawMessage(fmt.Sprintf(`{"order_id": %q, "item_id": %q, "refund": {"amount": %q, "currency": "USD"},
		"refund_to": "the card used for the order"}`, orderID, itemID, amount))
}

// token signs c for aud with the Company's key.
func (r *rig) token(aud string, c verified.Claims) string {
	return r.tokenWith(r.key, aud, c, time.Now())
}

func (r *rig) tokenWith(k companyKey, aud string, c verified.Claims, now time.Time) string {
	c.Issuer, c.Audience = issuer, aud
	tok, err := verified.Sign(context.Background(), k, 1, c, now)
	require.NoError(r.t, err)
	return tok
}

// do sends a request to path on the shop; headers are name, value pairs.
func (r *rig) do(method, path string, body any, headers ...string) *peers.Response {
	r.t.Helper()
	req := peers.NewRequest(r.t, method, r.base+path, body)
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	return peers.Send(r.t, r.client, req)
}
