package issuer_test

import (
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/oauth2"
)

// Hostile input on the issuer's endpoints and pages: NUL bytes and
// invalid UTF-8, which PostgreSQL text refuses, are a 4xx, never a 500.

func TestHostileIssuerInput(t *testing.T) {
	t.Parallel()
	s := setup(t)
	client := s.ctx.Value(oauth2.HTTPClient).(*http.Client)
	post := func(t *testing.T, c *http.Client, path string, form url.Values, header ...string) (int, string) {
		t.Helper()
		req, err := http.NewRequest(http.MethodPost, s.issuer+path, strings.NewReader(form.Encode()))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		for i := 0; i+1 < len(header); i += 2 {
			req.Header.Set(header[i], header[i+1])
		}
		resp, err := c.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(raw)
	}
	forms := map[string]struct {
		path string
		form url.Values
	}{
		"token device_code NUL":  {"/oauth/token", url.Values{"grant_type": {"urn:ietf:params:oauth:grant-type:device_code"}, "device_code": {"a\x00b"}}},
		"token device_code UTF8": {"/oauth/token", url.Values{"grant_type": {"urn:ietf:params:oauth:grant-type:device_code"}, "device_code": {"\xff\xfe"}}},
		"token code NUL":         {"/oauth/token", url.Values{"grant_type": {"authorization_code"}, "code": {"a\x00b"}, "code_verifier": {strings.Repeat("a", 43)}, "redirect_uri": {s.conf.RedirectURL}}},
		"token refresh NUL":      {"/oauth/token", url.Values{"grant_type": {"refresh_token"}, "refresh_token": {"a\x00.b"}}},
		"token scope NUL":        {"/oauth/token", url.Values{"grant_type": {"refresh_token"}, "refresh_token": {"a.b"}, "scope": {"orders:read\x00"}}},
		"token resource NUL":     {"/oauth/token", url.Values{"grant_type": {"refresh_token"}, "refresh_token": {"a.b"}, "resource": {"https://x\x00"}}},
		"device scope NUL":       {"/oauth/device_authorization", url.Values{"scope": {"orders:read\x00"}}},
		"device resource NUL":    {"/oauth/device_authorization", url.Values{"scope": {"orders:read"}, "resource": {"https://x\x00"}}},
		"device resource UTF8":   {"/oauth/device_authorization", url.Values{"scope": {"orders:read"}, "resource": {"\xff"}}},
	}
	for name, c := range forms {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			status, body := post(t, client, c.path, c.form)
			require.True(t, status >= 400 && status < 500, "%d %s", status, body)
		})
	}
	t.Run("revoke NUL", func(t *testing.T) {
		t.Parallel()
		// An unknown token is revoked with 200 (RFC 7009 §2.2).
		for _, tok := range []string{"a\x00.b", "\xff.\xfe"} {
			status, body := post(t, client, "/oauth/revoke", url.Values{"token": {tok}})
			require.Equal(t, http.StatusOK, status, "%s", body)
		}
	})
	t.Run("introspect NUL", func(t *testing.T) {
		t.Parallel()
		resp := s.env.Admin(t, http.MethodPost, "/admin/v1/companies/stormline/api-keys", map[string]any{"name": "hostile"})
		require.Equal(t, http.StatusCreated, resp.Status, "%s", resp.Body)
		key := resp.JSON(t)["key"].(string)
		for _, tok := range []string{"a\x00b", "\xff\xfe", "a.b\x00.c"} {
			status, body := post(t, s.env.Client, "/oauth/introspect", url.Values{"token": {tok}}, "Authorization", "Bearer "+key)
			require.Less(t, status, 500, "%d %s", status, body)
		}
	})
	pages := []string{
		"/oauth/authorize?client_id=%00&redirect_uri=x",
		"/oauth/authorize?client_id=" + url.QueryEscape(s.conf.ClientID) + "%00&redirect_uri=x",
		"/oauth/authorize?client_id=%ff%fe&redirect_uri=x",
		"/device?user_code=AB%00CD",
		"/device?user_code=%ff%fe",
	}
	authURL, err := url.Parse(s.conf.AuthCodeURL("st4te", oauth2.S256ChallengeOption(oauth2.GenerateVerifier())))
	require.NoError(t, err)
	for _, p := range []string{"state", "scope", "redirect_uri", "code_challenge", "resource"} {
		for _, bad := range []string{"\x00", "\xff"} {
			u := *authURL
			q := u.Query()
			q.Set(p, q.Get(p)+bad)
			u.RawQuery = q.Encode()
			pages = append(pages, strings.TrimPrefix(u.String(), s.issuer))
		}
	}
	for _, p := range pages {
		t.Run("page "+p, func(t *testing.T) {
			t.Parallel()
			b := s.env.Browser(t)
			page := b.Get(s.issuer + p)
			require.Less(t, page.Status, 500, page.Body)
		})
	}
	for _, user := range []string{"ada\x00", "\xff\xfe", "a\x00"} {
		t.Run("login "+user, func(t *testing.T) {
			t.Parallel()
			b := s.env.Browser(t)
			page := b.Get(s.conf.AuthCodeURL("st4te", oauth2.S256ChallengeOption(oauth2.GenerateVerifier())))
			require.Equal(t, http.StatusOK, page.Status, page.Body)
			page = b.Submit(page, "login", map[string][]string{"username": {user}, "password": {testPassword + "\x00"}})
			require.True(t, page.Status >= 400 && page.Status < 500, "%d %s", page.Status, page.Body)
			require.Contains(t, page.Body, "The username or password is not right.")
		})
	}
}
