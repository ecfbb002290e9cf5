package agentid

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// publicDoc is a public client's metadata document (MCP authorization's
// CIMD) with redirect_uris set to redirects.
func publicDoc(redirects ...any) []byte {
	raw, err := json.Marshal(map[string]any{
		"client_id":                  testClientID,
		"client_name":                "Desk Assistant",
		"client_uri":                 "https://agent.test/",
		"logo_uri":                   "https://agent.test/logo.png",
		"redirect_uris":              redirects,
		"grant_types":                []any{"authorization_code", "refresh_token"},
		"token_endpoint_auth_method": "none",
	})
	if err != nil {
		panic(err)
	}
	return raw
}

func TestParsePublicMetadata(t *testing.T) {
	t.Parallel()
	for _, ok := range [][]any{
		{"http://127.0.0.1/callback"},
		{"http://[::1]:8080/cb"},
		{"http://localhost:6274/oauth/callback"},
		{"https://app.agent.test/oauth/callback"},
		{"com.agent.desk:/oauth"},
	} {
		c, err := parseMetadata(testClientID, publicDoc(ok...))
		require.NoError(t, err, "%v", ok)
		require.True(t, c.Public)
		require.Equal(t, "Desk Assistant", c.Name)
		require.Equal(t, "https://agent.test/", c.ClientURI)
		require.Empty(t, c.JWKSURI)
		require.Equal(t, []string{ok[0].(string)}, c.RedirectURIs)
	}
	for name, bad := range map[string][]any{
		"none":             {},
		"other domain":     {"https://evil.test/cb"},
		"plain http":       {"http://agent.test/cb"},
		"scheme no period": {"myapp:/cb"},
		"javascript":       {"javascript:alert(1)"},
		"fragment":         {"http://127.0.0.1/cb#x"},
		"user info":        {"http://u@127.0.0.1/cb"},
		"too many": func() []any {
			var r []any
			for range maxRedirectURIs + 1 {
				r = append(r, "http://127.0.0.1/cb")
			}
			return r
		}(),
	} {
		c, err := parseMetadata(testClientID, publicDoc(bad...))
		require.Nil(t, c, name)
		var inv *InvalidError
		require.ErrorAs(t, err, &inv, name)
	}
	// The client_id rule is the same as a Personal Agent's.
	_, err := parseMetadata("https://agent.test/other.json", publicDoc("http://127.0.0.1/cb"))
	require.ErrorContains(t, err, "client_id must equal")
	// client_uri other than https is dropped.
	var doc map[string]any
	require.NoError(t, json.Unmarshal(publicDoc("http://127.0.0.1/cb"), &doc))
	doc["client_uri"] = "javascript:alert(1)"
	raw, _ := json.Marshal(doc)
	c, err := parseMetadata(testClientID, raw)
	require.NoError(t, err)
	require.Empty(t, c.ClientURI)
}

func TestParseRegistration(t *testing.T) {
	t.Parallel()
	c, err := ParseRegistration([]byte(`{"redirect_uris":["http://localhost:6274/oauth/callback","https://app.example/cb"],
		"client_name":"Inspector","client_uri":"https://app.example/","token_endpoint_auth_method":"none",
		"grant_types":["authorization_code","refresh_token"],"response_types":["code"],"software_id":"ignored"}`))
	require.NoError(t, err)
	require.True(t, c.Public)
	require.Empty(t, c.ClientID)
	require.Equal(t, "Inspector", c.Name)
	require.Equal(t, []string{"http://localhost:6274/oauth/callback", "https://app.example/cb"}, c.RedirectURIs)

	for name, tt := range map[string]struct{ body, code string }{
		"not json":       {`[`, "invalid_client_metadata"},
		"secret client":  {`{"redirect_uris":["http://127.0.0.1/cb"],"token_endpoint_auth_method":"client_secret_basic"}`, "invalid_client_metadata"},
		"client creds":   {`{"redirect_uris":["http://127.0.0.1/cb"],"grant_types":["client_credentials"]}`, "invalid_client_metadata"},
		"refresh only":   {`{"redirect_uris":["http://127.0.0.1/cb"],"grant_types":["refresh_token"]}`, "invalid_client_metadata"},
		"implicit":       {`{"redirect_uris":["http://127.0.0.1/cb"],"response_types":["token"]}`, "invalid_client_metadata"},
		"name too long":  {`{"redirect_uris":["http://127.0.0.1/cb"],"client_name":"` + strings.Repeat("x", 201) + `"}`, "invalid_client_metadata"},
		"name two lines": {`{"redirect_uris":["http://127.0.0.1/cb"],"client_name":"a\nb"}`, "invalid_client_metadata"},
		"no redirect":    {`{"client_name":"x"}`, "invalid_redirect_uri"},
		"plain http":     {`{"redirect_uris":["http://app.example/cb"]}`, "invalid_redirect_uri"},
		"relative":       {`{"redirect_uris":["/cb"]}`, "invalid_redirect_uri"},
		"javascript":     {`{"redirect_uris":["javascript:alert(1)"]}`, "invalid_redirect_uri"},
		"too big":        {`{"client_name":"` + strings.Repeat("x", MaxRegistrationBytes) + `"}`, "invalid_client_metadata"},
	} {
		c, err := ParseRegistration([]byte(tt.body))
		require.Nil(t, c, name)
		var re *RegistrationError
		require.ErrorAs(t, err, &re, name)
		require.Equal(t, tt.code, re.Code, name)
	}
}
