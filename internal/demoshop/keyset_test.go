package demoshop_test

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
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
	"github.com/poppyhost/poppyhost/internal/verified"
)

// TestKeySetVerify: the exported verifier the demo Company Agent uses
// accepts a Poppy-Verified the Company signed for the issuer and audience,
// refuses for good (verified.ErrInvalid) anything else, and refetches the
// set for an unknown key at most once per backoff, answering "not yet"
// (not verified.ErrInvalid) in between.
func TestKeySetVerify(t *testing.T) {
	t.Parallel()
	ca, err := devca.New()
	require.NoError(t, err)
	key := newKey(t)
	pub, err := jwk.PublicKeyOf(key.key)
	require.NoError(t, err)
	require.NoError(t, pub.Set(jwk.KeyIDKey, key.kid))
	set := jwk.NewSet()
	require.NoError(t, set.AddKey(pub))
	raw, err := json.Marshal(set)
	require.NoError(t, err)
	var hits atomic.Int32
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		hits.Add(1)
		w.Header().Set("Content-Type", "application/jwk-set+json")
		_, _ = w.Write(raw)
	}))
	srv.TLS = ca.ServerTLSConfig()
	srv.StartTLS()
	t.Cleanup(srv.Close)
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: ca.Pool(), MinVersion: tls.VersionTLS12}}}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	keys, err := demoshop.NewKeySet(ctx, strings.Replace(srv.URL, "127.0.0.1", "localhost", 1)+"/oauth/jwks.json",
		client, time.Now)
	require.NoError(t, err)

	const aud = "https://agent.stormline.test/poppy/webhook"
	sign := func(k verified.Signer, iss, aud string) string {
		tok, err := verified.Sign(ctx, k, 1, verified.Claims{Issuer: iss, Audience: aud,
			ConversationID: "cnv_1", EventID: "evt_1"}, time.Now())
		require.NoError(t, err)
		return tok
	}
	c, err := keys.Verify(ctx, sign(key, issuer, aud), issuer, aud)
	require.NoError(t, err)
	require.Equal(t, "cnv_1", c.ConversationID)
	require.Equal(t, "evt_1", c.EventID)

	for name, tok := range map[string]string{
		"empty":        "",
		"garbage":      "a.b.c",
		"other issuer": sign(key, "https://other.test", aud),
		"other aud":    sign(key, issuer, "https://agent.stormline.test/other"),
	} {
		_, err := keys.Verify(ctx, tok, issuer, aud)
		require.ErrorIs(t, err, verified.ErrInvalid, name)
	}
	require.EqualValues(t, 1, hits.Load(), "the set was fetched once")

	_, err = keys.Verify(ctx, sign(newKey(t), issuer, aud), issuer, aud)
	require.ErrorIs(t, err, verified.ErrInvalid, "fetched again, and the key is not in the set")
	require.EqualValues(t, 2, hits.Load())
	_, err = keys.Verify(ctx, sign(newKey(t), issuer, aud), issuer, aud)
	require.Error(t, err)
	require.False(t, errors.Is(err, verified.ErrInvalid), "within the backoff the key may be new: %v", err)
	require.EqualValues(t, 2, hits.Load(), "not fetched again within the backoff")
}
