package issuer_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lestrrat-go/jwx/v2/jwk"
	"github.com/lestrrat-go/jwx/v2/jws"
	"github.com/stretchr/testify/require"
	"golang.org/x/oauth2"

	"github.com/poppyhost/poppyhost/internal/testkit/peers"
)

// Helpers of the token endpoint tests carry a tok prefix: other test
// files of the package are written at the same time.

const tokAssertionType = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"

// tokPost posts form to the issuer endpoint path (such as /oauth/token).
func (s *stormline) tokPost(t *testing.T, issuer, path string, form url.Values) *peers.Response {
	t.Helper()
	return s.env.Do(t, http.MethodPost, issuer+path, form.Encode(), "Content-Type", "application/x-www-form-urlencoded")
}

// tokAuthed returns form with a fresh ES256 client assertion of the test
// agent for s.issuer.
func (s *stormline) tokAuthed(t *testing.T, form url.Values) url.Values {
	t.Helper()
	return tokWithAssertion(form, s.agent.ClientAssertion(t, s.issuer))
}

func tokWithAssertion(form url.Values, assertion string) url.Values {
	out := url.Values{"client_assertion_type": {tokAssertionType}, "client_assertion": {assertion}}
	for k, v := range form {
		out[k] = v
	}
	return out
}

// tokError checks an OAuth error response (RFC 6749 §5.2).
func tokError(t *testing.T, resp *peers.Response, status int, code string) {
	t.Helper()
	require.Equal(t, status, resp.Status, "%s", resp.Body)
	require.Equal(t, code, resp.JSON(t)["error"], "%s", resp.Body)
}

// tokRows is every row of oauth_tokens, by kind and signature hash.
func (s *stormline) tokRows(t *testing.T) map[string]bool {
	t.Helper()
	rows, err := s.env.Pool.Query(context.Background(), `SELECT kind, signature FROM oauth_tokens`)
	require.NoError(t, err)
	defer rows.Close()
	set := map[string]bool{}
	for rows.Next() {
		var kind string
		var sig []byte
		require.NoError(t, rows.Scan(&kind, &sig))
		set[kind+":"+hex.EncodeToString(sig)] = true
	}
	require.NoError(t, rows.Err())
	return set
}

// tokNothingNew checks that no row was added to oauth_tokens since before
// was taken (rows may have been used up or revoked).
func (s *stormline) tokNothingNew(t *testing.T, before map[string]bool) {
	t.Helper()
	for row := range s.tokRows(t) {
		require.True(t, before[row], "a new oauth_tokens row was stored: %s", row)
	}
}

// tokCode signs ada in through the pages, approving approve of the
// requested scopes, and returns the code and its PKCE verifier.
func (s *stormline) tokCode(t *testing.T, approve []string, opts ...oauth2.AuthCodeOption) (code, verifier string) {
	t.Helper()
	verifier = oauth2.GenerateVerifier()
	b := s.env.Browser(t)
	page := b.Get(s.conf.AuthCodeURL("st", append([]oauth2.AuthCodeOption{oauth2.S256ChallengeOption(verifier)}, opts...)...))
	require.Equal(t, http.StatusOK, page.Status, page.Body)
	page = b.Submit(page, "login", map[string][]string{"username": {testUser}, "password": {testPassword}})
	require.Equal(t, http.StatusOK, page.Status, page.Body)
	page = b.Submit(page, "approve", map[string][]string{"scope": approve})
	require.Equal(t, http.StatusSeeOther, page.Status, page.Body)
	back, err := url.Parse(page.Location())
	require.NoError(t, err)
	code = back.Query().Get("code")
	require.NotEmpty(t, code, "%s", back)
	return code, verifier
}

// tokCodeForm is the token request that exchanges code, without client
// authentication.
func (s *stormline) tokCodeForm(code, verifier string) url.Values {
	return url.Values{"grant_type": {"authorization_code"}, "code": {code}, "code_verifier": {verifier},
		"redirect_uri": {s.conf.RedirectURL}, "client_id": {s.agent.ClientID}}
}

// tokSignIn signs in with the configured scopes, all approved, and
// returns the token response.
func (s *stormline) tokSignIn(t *testing.T) map[string]any {
	t.Helper()
	code, verifier := s.tokCode(t, s.conf.Scopes)
	resp := s.tokPost(t, s.issuer, "/oauth/token", s.tokAuthed(t, s.tokCodeForm(code, verifier)))
	require.Equal(t, http.StatusOK, resp.Status, "%s", resp.Body)
	return resp.JSON(t)
}

// tokRefresh refreshes with extra parameters (scope, resource).
func (s *stormline) tokRefresh(t *testing.T, refresh string, extra url.Values) *peers.Response {
	t.Helper()
	form := url.Values{"grant_type": {"refresh_token"}, "refresh_token": {refresh}}
	for k, v := range extra {
		form[k] = v
	}
	return s.tokPost(t, s.issuer, "/oauth/token", s.tokAuthed(t, form))
}

// tokPatch changes the Company's settings (a JSON merge patch).
func (s *stormline) tokPatch(t *testing.T, slug string, body map[string]any) {
	t.Helper()
	resp := s.env.Admin(t, http.MethodPatch, "/admin/v1/companies/"+slug, body)
	require.Equal(t, http.StatusOK, resp.Status, "%s", resp.Body)
}

// tokClaims decodes a JWT's header and claims without verifying it.
func tokClaims(t *testing.T, token string) (header, claims map[string]any) {
	t.Helper()
	parts := strings.Split(token, ".")
	require.Len(t, parts, 3, token)
	for i, dst := range []*map[string]any{&header, &claims} {
		raw, err := base64.RawURLEncoding.DecodeString(parts[i])
		require.NoError(t, err)
		require.NoError(t, json.Unmarshal(raw, dst))
	}
	return header, claims
}

// tokRefreshExpiry is the stored expires_at of a refresh token's row.
func (s *stormline) tokRefreshExpiry(t *testing.T, refresh string) time.Time {
	t.Helper()
	_, sig, ok := strings.Cut(refresh, ".")
	require.True(t, ok, refresh)
	sum := sha256.Sum256([]byte(sig))
	var exp time.Time
	require.NoError(t, s.env.Pool.QueryRow(context.Background(),
		`SELECT expires_at FROM oauth_tokens WHERE kind = 'refresh' AND signature = $1`, sum[:]).Scan(&exp))
	return exp
}

// tokIntrospect introspects token with a new API key of the Company.
func (s *stormline) tokIntrospect(t *testing.T, key, token string) map[string]any {
	t.Helper()
	resp := s.env.Do(t, http.MethodPost, s.issuer+"/oauth/introspect", url.Values{"token": {token}}.Encode(),
		"Content-Type", "application/x-www-form-urlencoded", "Authorization", "Bearer "+key)
	require.Equal(t, http.StatusOK, resp.Status, "%s", resp.Body)
	return resp.JSON(t)
}

func (s *stormline) tokAPIKey(t *testing.T) string {
	t.Helper()
	resp := s.env.Admin(t, http.MethodPost, "/admin/v1/companies/stormline/api-keys", map[string]any{"name": "introspection"})
	require.Equal(t, http.StatusCreated, resp.Status, "%s", resp.Body)
	return resp.JSON(t)["key"].(string)
}

// tokOtherCompany creates a second Company, gale, and returns its issuer.
func (s *stormline) tokOtherCompany(t *testing.T) string {
	t.Helper()
	s.env.CreateCompany(t, map[string]any{
		"slug":         "gale",
		"organization": map[string]any{"name": "Gale Supply", "domain": "gale.test"},
		"auth":         map[string]any{"scopes": map[string]any{"orders:read": "See your orders"}},
	})
	return s.env.PublicURL("/t/gale")
}

// tokHandMade signs claims by hand with alg HS256 (key "secret") or none.
func tokHandMade(alg string, claims map[string]any) string {
	enc := base64.RawURLEncoding
	h, _ := json.Marshal(map[string]any{"alg": alg, "typ": "JWT"})
	c, _ := json.Marshal(claims)
	input := enc.EncodeToString(h) + "." + enc.EncodeToString(c)
	if alg == "none" {
		return input + "."
	}
	m := hmac.New(sha256.New, []byte("secret"))
	m.Write([]byte(input))
	return input + "." + enc.EncodeToString(m.Sum(nil))
}

// TestTokenClientAssertion breaks each rule of spec 4.1 for client
// assertions at the token endpoint, against a live code: each is
// invalid_client, stores nothing and leaves the code usable, which a
// PS384-signed assertion then exchanges.
func TestTokenClientAssertion(t *testing.T) {
	t.Parallel()
	s := setup(t)
	gale := s.tokOtherCompany(t)
	code, verifier := s.tokCode(t, s.conf.Scopes)
	form := s.tokCodeForm(code, verifier)
	mutated := func(m func(map[string]any)) func() string {
		return func() string { return s.agent.ClientAssertion(t, s.issuer, m) }
	}
	replayed := s.agent.ClientAssertion(t, s.issuer)
	// The first use spends the jti (on a refresh token that does not exist).
	first := s.tokPost(t, s.issuer, "/oauth/token", tokWithAssertion(url.Values{
		"grant_type": {"refresh_token"}, "refresh_token": {"nope.nope"}}, replayed))
	tokError(t, first, http.StatusBadRequest, "invalid_grant")

	before := s.tokRows(t)
	for _, tc := range []struct {
		name string
		form func() url.Values
		at   string
	}{
		{name: "aud is the token endpoint", form: func() url.Values {
			return tokWithAssertion(form, mutated(func(c map[string]any) { c["aud"] = s.issuer + "/oauth/token" })())
		}},
		{name: "aud is an array with the issuer", form: func() url.Values {
			return tokWithAssertion(form, mutated(func(c map[string]any) { c["aud"] = []string{s.issuer} })())
		}},
		{name: "HS256", form: func() url.Values {
			return tokWithAssertion(form, tokHandMade("HS256", s.agent.AssertionClaims(s.issuer)))
		}},
		{name: "alg none", form: func() url.Values {
			return tokWithAssertion(form, tokHandMade("none", s.agent.AssertionClaims(s.issuer)))
		}},
		{name: "replayed jti", form: func() url.Values { return tokWithAssertion(form, replayed) }},
		{name: "iat missing", form: func() url.Values {
			return tokWithAssertion(form, mutated(func(c map[string]any) { delete(c, "iat") })())
		}},
		{name: "lives longer than 5 minutes", form: func() url.Values {
			return tokWithAssertion(form, mutated(func(c map[string]any) {
				c["exp"] = c["iat"].(int64) + 301
			})())
		}},
		{name: "client_secret_post", form: func() url.Values {
			f := url.Values{"client_secret": {"hunter2"}}
			for k, v := range form {
				f[k] = v
			}
			return f
		}},
		{name: "no assertion", form: func() url.Values { return form }},
		{name: "assertion for another Company", at: gale, form: func() url.Values {
			return s.tokAuthed(t, form)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			at := s.issuer
			if tc.at != "" {
				at = tc.at
			}
			tokError(t, s.tokPost(t, at, "/oauth/token", tc.form()), http.StatusUnauthorized, "invalid_client")
			s.tokNothingNew(t, before)
		})
	}

	// spec 4.1: Companies SHOULD accept PS384.
	key, kid := s.agent.Key("PS384")
	ps384 := peers.SignJWT(t, "PS384", key, map[string]any{"alg": "PS384", "kid": kid, "typ": "JWT"},
		s.agent.AssertionClaims(s.issuer))
	resp := s.tokPost(t, s.issuer, "/oauth/token", tokWithAssertion(form, ps384))
	require.Equal(t, http.StatusOK, resp.Status, "%s", resp.Body)
	require.NotEmpty(t, resp.JSON(t)["access_token"])
}

// TestTokenAgentNotAccepted: a Personal Agent the Company does not accept
// is invalid_client at the token endpoint (spec 4.1).
func TestTokenAgentNotAccepted(t *testing.T) {
	t.Parallel()
	s := setup(t)
	code, verifier := s.tokCode(t, s.conf.Scopes)
	s.tokPatch(t, "stormline", map[string]any{"agents": map[string]any{
		"accept": "unlisted", "client_ids": []string{s.agent.ClientID}}})
	before := s.tokRows(t)
	resp := s.tokPost(t, s.issuer, "/oauth/token", s.tokAuthed(t, s.tokCodeForm(code, verifier)))
	tokError(t, resp, http.StatusUnauthorized, "invalid_client")
	s.tokNothingNew(t, before)
}

// TestTokenCodeExchangeErrors: a wrong code_verifier or redirect_uri is
// invalid_grant (RFC 7636 §4.6, RFC 6749 §4.1.3), and a sign-in refused
// after the code was issued is unauthorized_client (spec 4.1).
func TestTokenCodeExchangeErrors(t *testing.T) {
	t.Parallel()
	s := setup(t)

	t.Run("wrong code_verifier", func(t *testing.T) {
		code, _ := s.tokCode(t, s.conf.Scopes)
		before := s.tokRows(t)
		resp := s.tokPost(t, s.issuer, "/oauth/token", s.tokAuthed(t, s.tokCodeForm(code, oauth2.GenerateVerifier())))
		tokError(t, resp, http.StatusBadRequest, "invalid_grant")
		s.tokNothingNew(t, before)
	})
	t.Run("redirect_uri differs", func(t *testing.T) {
		code, verifier := s.tokCode(t, s.conf.Scopes)
		form := s.tokCodeForm(code, verifier)
		before := s.tokRows(t)
		for _, redirect := range []string{s.agent.URL("/other"), ""} {
			form.Set("redirect_uri", redirect)
			resp := s.tokPost(t, s.issuer, "/oauth/token", s.tokAuthed(t, form))
			tokError(t, resp, http.StatusBadRequest, "invalid_grant")
		}
		s.tokNothingNew(t, before)
	})
	t.Run("sign-in refused after the code", func(t *testing.T) {
		code, verifier := s.tokCode(t, s.conf.Scopes)
		s.tokPatch(t, "stormline", map[string]any{"agents": map[string]any{
			"sign_in_refused": map[string]any{s.agent.ClientID: []string{"authorization_code"}}}})
		defer s.tokPatch(t, "stormline", map[string]any{"agents": map[string]any{"sign_in_refused": nil}})
		before := s.tokRows(t)
		resp := s.tokPost(t, s.issuer, "/oauth/token", s.tokAuthed(t, s.tokCodeForm(code, verifier)))
		tokError(t, resp, http.StatusBadRequest, "unauthorized_client")
		s.tokNothingNew(t, before)
	})
}

// TestTokenCodeConcurrentExchange: of two concurrent exchanges of one
// code, exactly one gets tokens and the other invalid_grant, never a
// server error.
func TestTokenCodeConcurrentExchange(t *testing.T) {
	t.Parallel()
	s := setup(t)
	for range 20 {
		code, verifier := s.tokCode(t, s.conf.Scopes)
		forms := []url.Values{s.tokAuthed(t, s.tokCodeForm(code, verifier)), s.tokAuthed(t, s.tokCodeForm(code, verifier))}
		resps := make([]*peers.Response, 2)
		var wg sync.WaitGroup
		for i := range forms {
			wg.Go(func() { resps[i] = s.tokPost(t, s.issuer, "/oauth/token", forms[i]) })
		}
		wg.Wait()
		ok := 0
		for _, r := range resps {
			if r.Status == http.StatusOK {
				ok++
				continue
			}
			tokError(t, r, http.StatusBadRequest, "invalid_grant")
		}
		require.Equal(t, 1, ok, "%s\n%s", resps[0].Body, resps[1].Body)
	}
}

// TestTokenRefreshKeepsAbsoluteExpiry: using a refresh token never extends
// its lifetime (spec 4.4): every rotated refresh token keeps the expiry
// of the sign-in, in storage and in introspection.
func TestTokenRefreshKeepsAbsoluteExpiry(t *testing.T) {
	t.Parallel()
	s := setup(t)
	s.tokPatch(t, "stormline", map[string]any{"auth": map[string]any{"token_lifetimes": map[string]any{"refresh_seconds": 3600}}})
	key := s.tokAPIKey(t)
	start := time.Now()
	tok := s.tokSignIn(t)
	refresh := tok["refresh_token"].(string)
	first := s.tokRefreshExpiry(t, refresh)
	require.WithinDuration(t, start.Add(time.Hour), first, 5*time.Second)
	in := s.tokIntrospect(t, key, refresh)
	require.Equal(t, true, in["active"], "%v", in)
	firstExp := in["exp"]
	require.EqualValues(t, first.Unix(), firstExp)

	for range 3 {
		// Each refresh happens at least a second later, so a lifetime
		// counted from the refresh would show.
		time.Sleep(1100 * time.Millisecond)
		resp := s.tokRefresh(t, refresh, nil)
		require.Equal(t, http.StatusOK, resp.Status, "%s", resp.Body)
		next := resp.JSON(t)["refresh_token"].(string)
		require.NotEqual(t, refresh, next)
		refresh = next
		require.True(t, first.Equal(s.tokRefreshExpiry(t, refresh)), "stored expiry moved from %s to %s", first, s.tokRefreshExpiry(t, refresh))
		in := s.tokIntrospect(t, key, refresh)
		require.Equal(t, true, in["active"], "%v", in)
		require.Equal(t, firstExp, in["exp"])
	}
}

// TestTokenRefreshRotation: reusing a rotated refresh token is
// invalid_grant and revokes the newest refresh token of its grant too.
func TestTokenRefreshRotation(t *testing.T) {
	t.Parallel()
	s := setup(t)
	old := s.tokSignIn(t)["refresh_token"].(string)
	resp := s.tokRefresh(t, old, nil)
	require.Equal(t, http.StatusOK, resp.Status, "%s", resp.Body)
	newest := resp.JSON(t)["refresh_token"].(string)

	before := s.tokRows(t)
	tokError(t, s.tokRefresh(t, old, nil), http.StatusBadRequest, "invalid_grant")
	tokError(t, s.tokRefresh(t, newest, nil), http.StatusBadRequest, "invalid_grant")
	s.tokNothingNew(t, before)
	var active int
	require.NoError(t, s.env.Pool.QueryRow(context.Background(),
		`SELECT count(*) FROM oauth_tokens WHERE kind IN ('refresh', 'access') AND active`).Scan(&active))
	require.Zero(t, active, "the grant's tokens are all revoked")
}

// TestTokenRefreshNarrowerScope: a refresh may ask for fewer scopes (spec
// 4.4): the access token carries only them and the response says so; the
// refresh token keeps the whole grant.
func TestTokenRefreshNarrowerScope(t *testing.T) {
	t.Parallel()
	s := setup(t)
	refresh := s.tokSignIn(t)["refresh_token"].(string)

	resp := s.tokRefresh(t, refresh, url.Values{"scope": {"orders:read"}})
	require.Equal(t, http.StatusOK, resp.Status, "%s", resp.Body)
	body := resp.JSON(t)
	require.Equal(t, "orders:read", body["scope"], "%s", resp.Body)
	_, claims := tokClaims(t, body["access_token"].(string))
	require.Equal(t, "orders:read", claims["scope"])

	resp = s.tokRefresh(t, body["refresh_token"].(string), nil)
	require.Equal(t, http.StatusOK, resp.Status, "%s", resp.Body)
	body = resp.JSON(t)
	require.NotContains(t, body, "scope", "the whole grant again: scope is left out (spec 4.7)")
	_, claims = tokClaims(t, body["access_token"].(string))
	require.ElementsMatch(t, []string{"orders:read", "orders:write"}, strings.Fields(claims["scope"].(string)))
}

// TestTokenRefreshScopeOutsideGrant: a refresh cannot widen the grant:
// invalid_scope, nothing stored, and the refresh token still works.
func TestTokenRefreshScopeOutsideGrant(t *testing.T) {
	t.Parallel()
	s := setup(t)
	code, verifier := s.tokCode(t, []string{"orders:read"})
	resp := s.tokPost(t, s.issuer, "/oauth/token", s.tokAuthed(t, s.tokCodeForm(code, verifier)))
	require.Equal(t, http.StatusOK, resp.Status, "%s", resp.Body)
	refresh := resp.JSON(t)["refresh_token"].(string)

	before := s.tokRows(t)
	for _, scope := range []string{"orders:write", "orders:read orders:write", "addresses", "unknown"} {
		tokError(t, s.tokRefresh(t, refresh, url.Values{"scope": {scope}}), http.StatusBadRequest, "invalid_scope")
	}
	s.tokNothingNew(t, before)
	resp = s.tokRefresh(t, refresh, nil)
	require.Equal(t, http.StatusOK, resp.Status, "%s", resp.Body)
}

// TestTokenRefreshAtOtherCompany: a refresh token is valid only at the
// Company that issued it (spec 3.2).
func TestTokenRefreshAtOtherCompany(t *testing.T) {
	t.Parallel()
	s := setup(t)
	gale := s.tokOtherCompany(t)
	refresh := s.tokSignIn(t)["refresh_token"].(string)
	before := s.tokRows(t)
	form := tokWithAssertion(url.Values{"grant_type": {"refresh_token"}, "refresh_token": {refresh}},
		s.agent.ClientAssertion(t, gale))
	tokError(t, s.tokPost(t, gale, "/oauth/token", form), http.StatusBadRequest, "invalid_grant")
	s.tokNothingNew(t, before)
	resp := s.tokRefresh(t, refresh, nil)
	require.Equal(t, http.StatusOK, resp.Status, "%s", resp.Body)
}

// TestTokenAuthDisabledAfterSignIn: auth.disabled ends sign-in, not the
// refresh tokens issued before (spec 3.2).
func TestTokenAuthDisabledAfterSignIn(t *testing.T) {
	t.Parallel()
	s := setup(t)
	refresh := s.tokSignIn(t)["refresh_token"].(string)
	s.tokPatch(t, "stormline", map[string]any{"auth": map[string]any{"disabled": true}})

	resp := s.tokRefresh(t, refresh, nil)
	require.Equal(t, http.StatusOK, resp.Status, "%s", resp.Body)
	// That the sign-in endpoints are then absent is the platform's wiring
	// (internal/platform TestIssuerWiring).
}

// TestTokenResponse: token_type Bearer, expires_in the Company's access
// lifetime, and scope only when the User left a scope out (spec 4.7).
func TestTokenResponse(t *testing.T) {
	t.Parallel()
	s := setup(t)
	s.tokPatch(t, "stormline", map[string]any{"auth": map[string]any{"token_lifetimes": map[string]any{"access_seconds": 120}}})

	body := s.tokSignIn(t)
	require.Equal(t, "Bearer", body["token_type"])
	require.EqualValues(t, 120, body["expires_in"])
	require.NotContains(t, body, "scope")
	require.NotEmpty(t, body["refresh_token"])

	code, verifier := s.tokCode(t, []string{"orders:write"})
	resp := s.tokPost(t, s.issuer, "/oauth/token", s.tokAuthed(t, s.tokCodeForm(code, verifier)))
	require.Equal(t, http.StatusOK, resp.Status, "%s", resp.Body)
	body = resp.JSON(t)
	require.Equal(t, "orders:write", body["scope"])
	require.Equal(t, "Bearer", body["token_type"])
	require.EqualValues(t, 120, body["expires_in"])

	resp = s.tokRefresh(t, body["refresh_token"].(string), nil)
	require.Equal(t, http.StatusOK, resp.Status, "%s", resp.Body)
	body = resp.JSON(t)
	require.Equal(t, "Bearer", body["token_type"])
	require.EqualValues(t, 120, body["expires_in"])
}

// TestTokenResource: resource (RFC 8707) picks the access token's aud:
// the MCP server alone, or every domain of the Company; anything else is
// invalid_target (spec 4.5).
func TestTokenResource(t *testing.T) {
	t.Parallel()
	s := setup(t)
	s.tokPatch(t, "stormline", map[string]any{"domains": []string{"stormline.example"}})
	mcp := s.issuer + "/mcp"
	domains := []any{"https://stormline.test", "https://stormline.example"}

	code, verifier := s.tokCode(t, s.conf.Scopes)
	form := s.tokCodeForm(code, verifier)
	form.Set("resource", mcp)
	resp := s.tokPost(t, s.issuer, "/oauth/token", s.tokAuthed(t, form))
	require.Equal(t, http.StatusOK, resp.Status, "%s", resp.Body)
	body := resp.JSON(t)
	_, claims := tokClaims(t, body["access_token"].(string))
	require.Equal(t, []any{mcp}, claims["aud"])
	refresh := body["refresh_token"].(string)

	for _, tc := range []struct {
		resource string
		aud      []any
	}{
		{"", domains},
		{mcp, []any{mcp}},
		{"https://stormline.test", domains},
		{"https://stormline.example", domains},
	} {
		resp := s.tokRefresh(t, refresh, url.Values{"resource": {tc.resource}})
		require.Equal(t, http.StatusOK, resp.Status, "%s", resp.Body)
		body := resp.JSON(t)
		refresh = body["refresh_token"].(string)
		_, claims := tokClaims(t, body["access_token"].(string))
		require.Equal(t, tc.aud, claims["aud"], "resource %q", tc.resource)
	}

	before := s.tokRows(t)
	for _, resource := range []string{"https://evil.test", "https://stormline.test/", s.issuer, mcp + "/x", "https://gale.test"} {
		resp := s.tokRefresh(t, refresh, url.Values{"resource": {resource}})
		tokError(t, resp, http.StatusBadRequest, "invalid_target")
	}
	s.tokNothingNew(t, before)
}

// TestTokenAccessTokenFormat: access tokens are RFC 9068 JWTs signed with
// a key in the Company's JWKS, and stay valid across a key rotation.
func TestTokenAccessTokenFormat(t *testing.T) {
	t.Parallel()
	s := setup(t)
	start := time.Now()
	access := s.tokSignIn(t)["access_token"].(string)
	header, claims := tokClaims(t, access)
	require.Equal(t, "at+jwt", header["typ"])
	require.Equal(t, "ES256", header["alg"])
	kid, _ := header["kid"].(string)
	require.NotEmpty(t, kid)

	var account int64
	require.NoError(t, s.env.Pool.QueryRow(context.Background(),
		`SELECT id FROM accounts WHERE username = $1`, testUser).Scan(&account))
	require.Equal(t, s.issuer, claims["iss"])
	require.Equal(t, strconv.FormatInt(account, 10), claims["sub"])
	require.Equal(t, []any{"https://stormline.test"}, claims["aud"])
	require.Equal(t, s.agent.ClientID, claims["client_id"])
	require.ElementsMatch(t, []string{"orders:read", "orders:write"}, strings.Fields(claims["scope"].(string)))
	require.NotEmpty(t, claims["jti"])
	iat := time.Unix(int64(claims["iat"].(float64)), 0)
	require.WithinDuration(t, start, iat, 10*time.Second)
	require.InDelta(t, 15*60, claims["exp"].(float64)-claims["iat"].(float64), 1, "the default lifetime")

	jwks := func() jwk.Set {
		resp := s.env.Do(t, http.MethodGet, s.issuer+"/oauth/jwks.json", nil)
		require.Equal(t, http.StatusOK, resp.Status, "%s", resp.Body)
		set, err := jwk.Parse(resp.Body)
		require.NoError(t, err)
		return set
	}
	set := jwks()
	_, ok := set.LookupKeyID(kid)
	require.True(t, ok, "kid %s is in the JWKS", kid)
	_, err := jws.Verify([]byte(access), jws.WithKeySet(set))
	require.NoError(t, err)

	resp := s.env.Admin(t, http.MethodPost, "/admin/v1/companies/stormline/keys/rotate", nil)
	require.Equal(t, http.StatusNoContent, resp.Status, "%s", resp.Body)
	set = jwks()
	_, err = jws.Verify([]byte(access), jws.WithKeySet(set))
	require.NoError(t, err, "a token signed before the rotation still verifies")

	fresh := s.tokSignIn(t)["access_token"].(string)
	header, _ = tokClaims(t, fresh)
	require.NotEqual(t, kid, header["kid"], "new tokens use the new key")
	_, err = jws.Verify([]byte(fresh), jws.WithKeySet(set))
	require.NoError(t, err)
}

// TestTokenRefreshConcurrent: of two concurrent refreshes with one refresh
// token, exactly one gets tokens; the other is invalid_grant, never a
// server error.
func TestTokenRefreshConcurrent(t *testing.T) {
	t.Parallel()
	s := setup(t)
	for range 10 {
		refresh := s.tokSignIn(t)["refresh_token"].(string)
		form := url.Values{"grant_type": {"refresh_token"}, "refresh_token": {refresh}}
		forms := []url.Values{s.tokAuthed(t, form), s.tokAuthed(t, form)}
		resps := make([]*peers.Response, 2)
		var wg sync.WaitGroup
		for i := range forms {
			wg.Go(func() { resps[i] = s.tokPost(t, s.issuer, "/oauth/token", forms[i]) })
		}
		wg.Wait()
		ok := 0
		for _, r := range resps {
			if r.Status == http.StatusOK {
				ok++
				continue
			}
			tokError(t, r, http.StatusBadRequest, "invalid_grant")
		}
		require.Equal(t, 1, ok, "%s\n%s", resps[0].Body, resps[1].Body)
	}
}
