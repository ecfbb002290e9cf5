package agentid

import (
	"encoding/json"
	"errors"
	"maps"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// This file tests the document rules without a server; resolver_test.go
// fetches them over HTTPS. It cannot use testkit, which imports this
// package through platform.

const testClientID = "https://agent.test/agent.json"

// validDoc is a client metadata document parseMetadata accepts from
// testClientID.
func validDoc() map[string]any {
	return map[string]any{
		"client_id":                  testClientID,
		"client_name":                "Test Agent",
		"logo_uri":                   "https://agent.test/logo.png",
		"jwks_uri":                   "https://agent.test/jwks.json",
		"redirect_uris":              []any{"https://agent.test/callback"},
		"token_endpoint_auth_method": "private_key_jwt",
	}
}

// with returns validDoc with name set to v, or removed when v is del.
func with(name string, v any) []byte {
	d := validDoc()
	if v == del {
		delete(d, name)
	} else {
		d[name] = v
	}
	raw, err := json.Marshal(d)
	if err != nil {
		panic(err)
	}
	return raw
}

var del = &struct{}{}

func validBody() []byte {
	raw, err := json.Marshal(validDoc())
	if err != nil {
		panic(err)
	}
	return raw
}

func TestParseMetadata(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		body []byte
		// ok says the document is accepted; otherwise want is a piece of
		// the InvalidError's reason.
		ok   bool
		want string
		// check runs on an accepted document's Client.
		check func(t *testing.T, c *Client)
	}{
		{name: "valid", body: validBody(), ok: true, check: func(t *testing.T, c *Client) {
			require.Equal(t, &Client{
				ClientID:     testClientID,
				Name:         "Test Agent",
				LogoURI:      "https://agent.test/logo.png",
				JWKSURI:      "https://agent.test/jwks.json",
				RedirectURIs: []string{"https://agent.test/callback"},
				Extensions:   map[string]string{},
			}, c)
		}},

		// client_id MUST equal the URL the document was fetched from (4.1).
		{name: "client_id other path", body: with("client_id", "https://agent.test/other.json"), want: "client_id"},
		{name: "client_id trailing slash", body: with("client_id", testClientID+"/"), want: "client_id"},
		{name: "client_id other case", body: with("client_id", "https://Agent.test/agent.json"), want: "client_id"},
		{name: "client_id other scheme", body: with("client_id", "http://agent.test/agent.json"), want: "client_id"},
		{name: "client_id with port", body: with("client_id", "https://agent.test:443/agent.json"), want: "client_id"},
		{name: "client_id missing", body: with("client_id", del), want: "client_id"},
		{name: "client_id empty", body: with("client_id", ""), want: "client_id"},
		{name: "client_id not a string", body: with("client_id", 1), want: "JSON object"},

		// jwks_uri MUST be https on the same domain as client_id (4.1).
		{name: "jwks_uri missing", body: with("jwks_uri", del), want: "jwks_uri"},
		{name: "jwks_uri null", body: with("jwks_uri", nil), want: "jwks_uri"},
		{name: "jwks_uri empty", body: with("jwks_uri", ""), want: "jwks_uri"},
		{name: "jwks_uri http", body: with("jwks_uri", "http://agent.test/jwks.json"), want: "https"},
		{name: "jwks_uri relative", body: with("jwks_uri", "/jwks.json"), want: "https"},
		{name: "jwks_uri user info", body: with("jwks_uri", "https://u:p@agent.test/jwks.json"), want: "https"},
		{name: "jwks_uri other domain", body: with("jwks_uri", "https://agent.example/jwks.json"), want: "same domain"},
		{name: "jwks_uri other domain sharing the suffix", body: with("jwks_uri", "https://evilagent.test/jwks.json"), want: "same domain"},
		{name: "jwks_uri on the public suffix", body: with("jwks_uri", "https://test/jwks.json"), want: "same domain"},
		{name: "jwks_uri IP address", body: with("jwks_uri", "https://127.0.0.1/jwks.json"), want: "same domain"},
		{name: "jwks_uri subdomain", body: with("jwks_uri", "https://keys.agent.test/jwks.json"), ok: true, check: func(t *testing.T, c *Client) {
			// publicsuffix treats "test" as an unknown TLD, so the
			// registrable domain of keys.agent.test is agent.test.
			require.Equal(t, "https://keys.agent.test/jwks.json", c.JWKSURI)
		}},
		{name: "jwks_uri deeper subdomain other case and port", body: with("jwks_uri", "https://A.Keys.AGENT.test:8443/jwks.json"), ok: true},

		// redirect_uris: https on the same domain, or loopback (4.1, RFC 8252 §7.3).
		{name: "redirect https same domain", body: with("redirect_uris", []string{"https://agent.test/cb", "https://app.agent.test/cb?x=1"}), ok: true, check: func(t *testing.T, c *Client) {
			require.Equal(t, []string{"https://agent.test/cb", "https://app.agent.test/cb?x=1"}, c.RedirectURIs)
		}},
		{name: "redirect https other domain", body: with("redirect_uris", []string{"https://agent.test/cb", "https://agent.example/cb"}), want: "redirect_uri"},
		{name: "redirect loopback IPv4 with port", body: with("redirect_uris", []string{"http://127.0.0.1:49152/cb"}), ok: true, check: func(t *testing.T, c *Client) {
			require.Equal(t, []string{"http://127.0.0.1:49152/cb"}, c.RedirectURIs)
		}},
		{name: "redirect loopback IPv6", body: with("redirect_uris", []string{"http://[::1]/cb"}), ok: true},
		{name: "redirect localhost", body: with("redirect_uris", []string{"http://localhost/cb"}), want: "redirect_uri"},
		{name: "redirect localhost with port", body: with("redirect_uris", []string{"http://localhost:8080/cb"}), want: "redirect_uri"},
		{name: "redirect http same domain", body: with("redirect_uris", []string{"http://agent.test/cb"}), want: "redirect_uri"},
		{name: "redirect http private address", body: with("redirect_uris", []string{"http://10.0.0.1/cb"}), want: "redirect_uri"},
		{name: "redirect custom scheme", body: with("redirect_uris", []string{"com.agent.app:/cb"}), want: "redirect_uri"},
		{name: "redirect with fragment", body: with("redirect_uris", []string{"https://agent.test/cb#frag"}), want: "malformed"},
		{name: "redirect with empty fragment", body: with("redirect_uris", []string{"https://agent.test/cb#"}), want: "malformed"},
		{name: "redirect loopback with fragment", body: with("redirect_uris", []string{"http://127.0.0.1/cb#frag"}), want: "malformed"},
		{name: "redirect with user info", body: with("redirect_uris", []string{"https://u@agent.test/cb"}), want: "malformed"},
		{name: "redirect not a URL", body: with("redirect_uris", []string{"https://agent.test/%zz"}), want: "malformed"},
		{name: "redirect_uris absent", body: with("redirect_uris", del), ok: true, check: func(t *testing.T, c *Client) {
			require.Empty(t, c.RedirectURIs)
		}},
		{name: "redirect_uris not an array", body: with("redirect_uris", "https://agent.test/cb"), want: "JSON object"},

		// extensions: name to version (3.3).
		{name: "extensions", body: with("extensions", map[string]any{
			"example.com/gift-wrap": map[string]any{"version": "1", "endpoint": "https://agent.test/x"},
			"mediated-sign-in":      map[string]any{"version": "2"},
		}), ok: true, check: func(t *testing.T, c *Client) {
			require.Equal(t, map[string]string{"example.com/gift-wrap": "1", "mediated-sign-in": "2"}, c.Extensions)
		}},
		{name: "extensions entries without a usable version ignored", body: with("extensions", map[string]any{
			"a.test/none":   map[string]any{},
			"a.test/empty":  map[string]any{"version": ""},
			"a.test/number": map[string]any{"version": 1},
			"a.test/string": "1",
			"a.test/null":   nil,
			"a.test/ok":     map[string]any{"version": "3"},
		}), ok: true, check: func(t *testing.T, c *Client) {
			require.Equal(t, map[string]string{"a.test/ok": "3"}, c.Extensions)
		}},
		{name: "extensions null", body: with("extensions", nil), ok: true, check: func(t *testing.T, c *Client) {
			require.Equal(t, map[string]string{}, c.Extensions)
		}},
		{name: "extensions array", body: with("extensions", []any{"a.test/x"}), want: "extensions"},
		{name: "extensions string", body: with("extensions", "a.test/x"), want: "extensions"},
		{name: "extensions number", body: with("extensions", 1), want: "extensions"},

		// Unknown members are ignored (3.3); an unusable logo_uri is dropped.
		{name: "unknown members", body: func() []byte {
			d := validDoc()
			maps.Copy(d, map[string]any{"software_id": "x", "contacts": []any{1, 2}, "nested": map[string]any{"a": nil}})
			raw, _ := json.Marshal(d)
			return raw
		}(), ok: true},
		{name: "logo_uri http dropped", body: with("logo_uri", "http://agent.test/logo.png"), ok: true, check: func(t *testing.T, c *Client) {
			require.Empty(t, c.LogoURI)
		}},

		// Not a JSON object.
		{name: "array", body: []byte(`[]`), want: "JSON object"},
		{name: "string", body: []byte(`"https://agent.test/agent.json"`), want: "JSON object"},
		{name: "null", body: []byte(`null`), want: "client_id"},
		{name: "empty", body: []byte(``), want: "JSON object"},
		{name: "truncated", body: validBody()[:20], want: "JSON object"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c, err := parseMetadata(testClientID, tt.body)
			if tt.ok {
				require.NoError(t, err)
				require.Equal(t, testClientID, c.ClientID)
				if tt.check != nil {
					tt.check(t, c)
				}
				return
			}
			require.Nil(t, c)
			var inv *InvalidError
			require.ErrorAs(t, err, &inv)
			require.Contains(t, inv.Reason, tt.want)
		})
	}
}

func TestParseMetadataIPClientID(t *testing.T) {
	t.Parallel()
	// A client_id on an IP address has no registrable domain: only the same
	// host serves its keys.
	const id = "https://192.0.2.10/agent.json"
	for _, tt := range []struct {
		jwks string
		ok   bool
	}{
		{"https://192.0.2.10/jwks.json", true},
		{"https://192.0.2.11/jwks.json", false},
		{"https://agent.test/jwks.json", false},
	} {
		raw, err := json.Marshal(map[string]any{"client_id": id, "jwks_uri": tt.jwks})
		require.NoError(t, err)
		_, err = parseMetadata(id, raw)
		if tt.ok {
			require.NoError(t, err, tt.jwks)
		} else {
			require.Error(t, err, tt.jwks)
		}
	}
}

func TestCheckClientID(t *testing.T) {
	t.Parallel()
	long := "https://agent.test/" + strings.Repeat("a", MaxClientID-len("https://agent.test/"))
	tests := []struct {
		name string
		id   string
		ok   bool
	}{
		{"valid", testClientID, true},
		{"port", "https://agent.test:8443/agent.json", true},
		{"root path", "https://agent.test/", true},
		{"query", "https://agent.test/agent.json?v=1", true}, // CIMD §3: MAY
		{"at the length limit", long, true},

		{"too long", long + "a", false},
		{"http", "http://agent.test/agent.json", false},
		{"no scheme", "agent.test/agent.json", false},
		{"other scheme", "ftp://agent.test/agent.json", false},
		{"no host", "https:///agent.json", false},
		{"opaque", "https:agent.test/agent.json", false},
		{"port only", "https://:443/agent.json", false},
		{"fragment", "https://agent.test/agent.json#x", false},
		{"empty fragment", "https://agent.test/agent.json#", false},
		{"user info", "https://user@agent.test/agent.json", false},
		{"user and password", "https://user:pw@agent.test/agent.json", false},
		{"not a URL", "https://agent.test/%zz", false},
		{"empty", "", false},
		// CIMD §3: a path component, without dot segments.
		{"no path", "https://agent.test", false},
		{"dot segment", "https://agent.test/./agent.json", false},
		{"dot-dot segment", "https://agent.test/a/../agent.json", false},
		{"trailing dot-dot", "https://agent.test/a/..", false},
		{"encoded dot-dot segment", "https://agent.test/a/%2E%2e/agent.json", false},
		// The one path rule (safehttp.ValidPath): these were accepted.
		{"path-parameter dot-dot segment", "https://agent.test/a/..;x/agent.json", false},
		{"encoded slash", "https://agent.test/a%2Fagent.json", false},
		{"encoded backslash", "https://agent.test/a/..%5Cagent.json", false},
		{"encoded NUL", "https://agent.test/agent.json%00", false},
		{"network-path path", "https://agent.test//evil.example/agent.json", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := CheckClientID(tt.id)
			if tt.ok {
				require.NoError(t, err)
				return
			}
			var inv *InvalidError
			require.ErrorAs(t, err, &inv)
			require.NotEmpty(t, inv.Reason)
		})
	}
}

func TestParseKeySet(t *testing.T) {
	t.Parallel()
	const ecPub = `"kty":"EC","crv":"P-256","x":"f83OJ3D2xF1Bg8vub9tLe1gHMzV76e8Tus9uPHvRVEU","y":"x_FEzRu9m36HLN_tue659LNpXW6pCyStikYjKIWI5a0"`
	tests := []struct {
		name string
		body string
		ok   bool
	}{
		{"public EC key", `{"keys":[{` + ecPub + `,"kid":"a"}]}`, true},
		{"empty set", `{"keys":[]}`, true},
		{"EC private key", `{"keys":[{` + ecPub + `,"d":"jpsQnnGQmL-YBIffH1136cspYG6-0iY7X1fCE9-E9LI"}]}`, false},
		{"oct key", `{"keys":[{"kty":"oct","k":"AyM1SysPpbyDfgZld3umj1qzKObwVMkoqQ-EstJQLr_T-1qS0gZH75aKtMN3Yj0iPS4hcgUuTwjAzZr1Z9CAow"}]}`, false},
		{"RSA private member", `{"keys":[{"kty":"RSA","n":"sXch","e":"AQAB","p":"2rnS"}]}`, false},
		{"no keys member", `{}`, false},
		{"keys not an array", `{"keys":{}}`, false},
		{"not JSON", `keys`, false},
		{"malformed key", `{"keys":[{"kty":"EC","crv":"P-256","x":"!"}]}`, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			set, err := parseKeySet([]byte(tt.body))
			if tt.ok {
				require.NoError(t, err)
				require.NotNil(t, set)
				return
			}
			var inv *InvalidError
			require.True(t, errors.As(err, &inv), "want an InvalidError, got %v", err)
		})
	}
}
