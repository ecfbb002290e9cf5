package sessions_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/httpx"
	"github.com/poppyhost/poppyhost/internal/sessions"
)

// requireInvalidSession checks that err is an invalid_session *httpx.Error
// whose description contains desc.
func requireInvalidSession(t testing.TB, err error, desc string) {
	t.Helper()
	var he *httpx.Error
	require.True(t, errors.As(err, &he), "error %v is not an *httpx.Error", err)
	require.Equal(t, httpx.CodeInvalidSession, he.Code, "%v", err)
	require.Contains(t, he.Description, desc)
}

// TestVerifyBoundaries checks the edges of every time rule (spec 5.2, 5.3
// step 2) exactly, on a fixed clock, and the claims of a valid token.
func TestVerifyBoundaries(t *testing.T) {
	t.Parallel()
	now := unitNow
	for _, tc := range []struct {
		name   string
		spec   tokenSpec
		req    func(*sessions.Request)
		err    string // "" for success
		verify func(t *testing.T, c *sessions.Claims)
	}{
		{name: "valid", verify: func(t *testing.T, c *sessions.Claims) {
			require.Equal(t, &sessions.Claims{ClientID: unitClientID, UserID: "usr_Q7c1vK", SID: "Yx2b7Qd_Kp8mR3vT1nWc4A",
				JTI: c.JTI, IssuedAt: now, Extensions: map[string]string{}}, c)
			require.NotEmpty(t, c.JTI)
		}},
		{name: "iat exactly 60s old", spec: tokenSpec{iat: now.Add(-60 * time.Second)}},
		{name: "iat 61s old", spec: tokenSpec{iat: now.Add(-61 * time.Second)}, err: "too old"},
		{name: "iat exactly 5s ahead", spec: tokenSpec{iat: now.Add(5 * time.Second)}},
		{name: "iat 6s ahead", spec: tokenSpec{iat: now.Add(6 * time.Second)}, err: "in the future"},
		{name: "iat with a fraction", spec: tokenSpec{mutateClaims: func(c map[string]any) { c["iat"] = float64(now.Unix()) + 0.5 }}},
		{name: "iat in exponent form", spec: tokenSpec{mutateClaims: func(c map[string]any) { c["iat"] = json.Number("1.7909e9") }}},
		{name: "iat negative", spec: tokenSpec{mutateClaims: func(c map[string]any) { c["iat"] = -1 }}, err: "iat must be a number"},
		{name: "iat huge", spec: tokenSpec{mutateClaims: func(c map[string]any) { c["iat"] = 1e20 }}, err: "iat must be a number"},
		{name: "iat a numeric string", spec: tokenSpec{mutateClaims: func(c map[string]any) { c["iat"] = "1790900000" }}, err: "iat must be a number"},
		{name: "iat null", spec: tokenSpec{mutateClaims: func(c map[string]any) { c["iat"] = nil }}, err: "iat must be a number"},
		{name: "iat true", spec: tokenSpec{mutateClaims: func(c map[string]any) { c["iat"] = true }}, err: "iat must be a number"},
		{name: "delegation expires now", spec: tokenSpec{dlgIAT: now.Add(-time.Hour)}, err: "delegation has expired"},
		{name: "delegation expires in 1s", spec: tokenSpec{dlgIAT: now.Add(-time.Hour + time.Second)}},
		{name: "delegation of exactly 24h", spec: tokenSpec{dlgIAT: now.Add(-time.Hour), dlgLifetime: 24 * time.Hour}},
		{name: "delegation of 24h and 1s", spec: tokenSpec{dlgIAT: now.Add(-time.Hour), dlgLifetime: 24*time.Hour + time.Second}, err: "at most 24 hours"},
		{name: "delegation iat 5s ahead", spec: tokenSpec{dlgIAT: now.Add(5 * time.Second)}},
		{name: "delegation iat 6s ahead", spec: tokenSpec{dlgIAT: now.Add(6 * time.Second)}, err: "delegation's iat is in the future"},
		{name: "delegation for ten years, iat after exp", spec: tokenSpec{mutateDlgClaims: func(c map[string]any) {
			c["iat"], c["exp"] = now.AddDate(11, 0, 0).Unix(), now.AddDate(10, 0, 0).Unix()
		}}, err: "delegation's iat is in the future"},
		{name: "Session JWT signed at the delegation's exp", spec: tokenSpec{dlgIAT: now.Add(-time.Hour + 5*time.Second), iat: now.Add(5 * time.Second)}},
		{name: "Session JWT signed 1s after the delegation's exp", spec: tokenSpec{dlgIAT: now.Add(-time.Hour + 4*time.Second), iat: now.Add(5 * time.Second)},
			err: "signed after its delegation expired"},
		{name: "htu with the default port", spec: tokenSpec{mutateClaims: func(c map[string]any) { c["htu"] = "https://poppyhost.test:443/t/shop/poppy/feedback" }}},
		{name: "request on the default port", req: func(r *sessions.Request) { r.URL = mustURL("https://poppyhost.test:443/t/shop/poppy/feedback") }},
		{name: "htu in upper case", spec: tokenSpec{mutateClaims: func(c map[string]any) { c["htu"] = "HTTPS://POPPYHOST.TEST/t/shop/poppy/feedback" }}},
		{name: "htu path in upper case", spec: tokenSpec{mutateClaims: func(c map[string]any) { c["htu"] = "https://poppyhost.test/T/shop/poppy/feedback" }}, err: "htu must be"},
		{name: "htu on another port", spec: tokenSpec{mutateClaims: func(c map[string]any) { c["htu"] = "https://poppyhost.test:8443/t/shop/poppy/feedback" }}, err: "htu must be"},
		{name: "htu not a URL", spec: tokenSpec{mutateClaims: func(c map[string]any) { c["htu"] = "%zz" }}, err: "htu must be"},
		{name: "ath of the access token", spec: tokenSpec{accessToken: "tok"}, req: func(r *sessions.Request) { r.AccessToken = "tok" }},
		{name: "ath null is no ath", spec: tokenSpec{mutateClaims: func(c map[string]any) { c["ath"] = nil }}},
		{name: "agent_id", spec: tokenSpec{mutateClaims: func(c map[string]any) { c["agent_id"] = "agt_1" }},
			verify: func(t *testing.T, c *sessions.Claims) { require.Equal(t, "agt_1", c.AgentID) }},
		{name: "unknown client", spec: tokenSpec{mutateClaims: func(c map[string]any) { c["iss"] = "https://other.example/agent.json" }},
			err: "metadata is not acceptable: unknown client"},
		{name: "sid not a string", spec: tokenSpec{mutateClaims: func(c map[string]any) { c["sid"] = 12 }}, err: "claims are malformed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			v, _, _ := newUnitVerifier(t)
			req := unitRequest
			if tc.req != nil {
				tc.req(&req)
			}
			claims, err := v.Verify(context.Background(), unitToken(t, tc.spec), req)
			if tc.err != "" {
				requireInvalidSession(t, err, tc.err)
				require.Nil(t, claims)
				return
			}
			require.NoError(t, err)
			if tc.verify != nil {
				tc.verify(t, claims)
			}
		})
	}
}

// TestVerifyDelegationCache checks that a verified delegation is reused
// without verifying it again, never past its exp, and only while its
// jwks_uri key is current.
func TestVerifyDelegationCache(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("reused while its key is in jwks_uri", func(t *testing.T) {
		t.Parallel()
		v, r, clk := newUnitVerifier(t)
		dlg := delegationFor(t, tokenSpec{})
		at := func(d time.Duration) error {
			clk.set(unitNow.Add(d))
			_, err := v.Verify(ctx, unitToken(t, tokenSpec{delegation: dlg, iat: unitNow.Add(d)}), unitRequest)
			return err
		}
		require.NoError(t, at(0))
		require.NoError(t, at(time.Second))

		// Spec 10.7: "Removing a key from jwks_uri revokes every delegation
		// it signed, once Companies' caches of the key set expire." Once
		// the resolver's key set lacks the key, the cached delegation stops
		// vouching at once, not minutes later.
		r.removeKeys()
		requireInvalidSession(t, at(2*time.Second), "kid names no signing key")
	})

	t.Run("not past its exp", func(t *testing.T) {
		t.Parallel()
		v, _, clk := newUnitVerifier(t)
		// exp is unitNow + 2 minutes.
		dlg := delegationFor(t, tokenSpec{dlgIAT: unitNow.Add(-58 * time.Minute)})
		_, err := v.Verify(ctx, unitToken(t, tokenSpec{delegation: dlg}), unitRequest)
		require.NoError(t, err)
		clk.add(2 * time.Minute)
		_, err = v.Verify(ctx, unitToken(t, tokenSpec{delegation: dlg, iat: unitNow.Add(2 * time.Minute)}), unitRequest)
		requireInvalidSession(t, err, "delegation has expired")
	})

	t.Run("a new delegated key mid-Session", func(t *testing.T) {
		t.Parallel()
		v, r, _ := newUnitVerifier(t)
		_, err := v.Verify(ctx, unitToken(t, tokenSpec{}), unitRequest)
		require.NoError(t, err)
		c, err := v.Verify(ctx, unitToken(t, tokenSpec{delegatedKey: otherKey}), unitRequest)
		require.NoError(t, err)
		require.Equal(t, "Yx2b7Qd_Kp8mR3vT1nWc4A", c.SID)
		require.EqualValues(t, 2, r.keyCalls.Load())
	})

	t.Run("a failed delegation is not cached", func(t *testing.T) {
		t.Parallel()
		v, r, _ := newUnitVerifier(t)
		dlg := delegationFor(t, tokenSpec{mutateDlgHeader: func(h map[string]any) { h["typ"] = "JWT" }})
		for range 2 {
			_, err := v.Verify(ctx, unitToken(t, tokenSpec{delegation: dlg}), unitRequest)
			requireInvalidSession(t, err, "delegation's typ")
		}
		require.EqualValues(t, 2, r.keyCalls.Load())
	})
}

// TestValidID checks the 8.2 ID alphabet that sid uses.
func TestValidID(t *testing.T) {
	t.Parallel()
	for id, want := range map[string]bool{
		"Yx2b7Qd_Kp8mR3vT1nWc4A": true, "a": true, "-_": true,
		"": false, "a.b": false, "a b": false, "a+b": false, "a/b": false, "a=": false, "é": false,
		string(make([]byte, 256)): false,
	} {
		require.Equal(t, want, sessions.ValidID(id), "%q", id)
	}
	long := make([]byte, 257)
	for i := range long {
		long[i] = 'a'
	}
	require.True(t, sessions.ValidID(string(long[:256])))
	require.False(t, sessions.ValidID(string(long)))
}

// TestVerifyHeaderDecodedOnce: a Personal Agent's Session JWTs share one
// header until its next delegation, and a header seen before is not
// decoded again: verifying a JWT under it allocates well below one under
// a header never seen (the same delegation, warm in its cache, with one
// more member). A header that changes is decoded afresh: one whose kid
// no longer names the delegated key is refused even after the good one
// was cached.
func TestVerifyHeaderDecodedOnce(t *testing.T) {
	v, _, _ := newUnitVerifier(t)
	ctx := context.Background()
	dlg := delegationFor(t, tokenSpec{})
	seen := unitToken(t, tokenSpec{delegation: dlg})
	_, err := v.Verify(ctx, seen, unitRequest)
	require.NoError(t, err)

	const runs = 50
	fresh := make([]string, runs+1)
	for i := range fresh {
		fresh[i] = unitToken(t, tokenSpec{delegation: dlg, mutateHeader: func(h map[string]any) { h["n"] = i }})
	}
	next := 0
	freshAllocs := testing.AllocsPerRun(runs, func() {
		_, err := v.Verify(ctx, fresh[next], unitRequest)
		next++
		require.NoError(t, err)
	})
	seenAllocs := testing.AllocsPerRun(runs, func() {
		_, err := v.Verify(ctx, seen, unitRequest)
		require.NoError(t, err)
	})
	require.Less(t, seenAllocs, freshAllocs-5, "a header seen before is decoded again (%v allocations, %v for a new one)",
		seenAllocs, freshAllocs)

	bad := unitToken(t, tokenSpec{delegation: dlg, mutateHeader: func(h map[string]any) { h["kid"] = "another" }})
	_, err = v.Verify(ctx, bad, unitRequest)
	requireInvalidSession(t, err, "kid must be the RFC 7638 thumbprint")
	_, err = v.Verify(ctx, seen, unitRequest)
	require.NoError(t, err)
}

// TestVerifyUnsignedHeadersNotCached: anyone can send a Session header,
// so only a header whose JWT's signature verified is kept; headers of
// JWTs refused are decoded and forgotten, and cannot fill the cache.
func TestVerifyUnsignedHeadersNotCached(t *testing.T) {
	v, _, _ := newUnitVerifier(t)
	ctx := context.Background()
	for i := range 20 {
		hdr := base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"ES256","n":` + strconv.Itoa(i) + `}`))
		_, err := v.Verify(ctx, hdr+".e30.c2ln", unitRequest)
		require.Error(t, err)
	}
	// Headers that decode, refused later for their signature.
	dlg := delegationFor(t, tokenSpec{})
	good := unitToken(t, tokenSpec{delegation: dlg})
	for i := range 20 {
		tok := unitToken(t, tokenSpec{delegation: dlg, mutateHeader: func(h map[string]any) { h["n"] = i }})
		forged := tok[:strings.LastIndexByte(tok, '.')] + good[strings.LastIndexByte(good, '.'):]
		_, err := v.Verify(ctx, forged, unitRequest)
		requireInvalidSession(t, err, "signature does not verify")
	}
	require.Zero(t, v.CachedHeaders())
	_, err := v.Verify(ctx, good, unitRequest)
	require.NoError(t, err)
	require.Equal(t, 1, v.CachedHeaders())
}
