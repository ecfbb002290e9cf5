package agentid

import (
	"encoding/json"
	"errors"
	"net/url"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/poppyhost/poppyhost/internal/httpx"
	"github.com/poppyhost/poppyhost/internal/jose"
)

// The fuzz targets of what Personal Agents and MCP clients publish or send
// about themselves: client metadata documents, JWK Sets and Dynamic
// Client Registration bodies. testdata/fuzz holds more seeds and every
// finding.

// requireInvalid fails unless err is an *InvalidError that says why.
// fitName reports whether a kept client_name is fit for the consent
// page: valid UTF-8, at most maxClientName bytes, no control character
// (C0, DEL, C1), nothing httpx.Disguising finds.
func fitName(name string) bool {
	if !utf8.ValidString(name) || len(name) > maxClientName {
		return false
	}
	for _, r := range name {
		if r < 0x20 || r >= 0x7f && r <= 0x9f {
			return false
		}
	}
	_, disguised := httpx.Disguising(name)
	return !disguised
}

func requireInvalid(t *testing.T, err error) {
	t.Helper()
	var inv *InvalidError
	if !errors.As(err, &inv) || inv.Reason == "" {
		t.Fatalf("error %T %v is not an InvalidError with a reason", err, err)
	}
}

// requireHTTPSOrEmpty fails unless raw is "" or an https URL with a host.
func requireHTTPSOrEmpty(t *testing.T, field, raw string) {
	t.Helper()
	if raw != "" && httpsOnly(raw) != raw {
		t.Fatalf("kept %s %q", field, raw)
	}
}

// FuzzParseMetadata feeds client metadata documents, fetched from a
// client_id CheckClientID accepts, to parseMetadata: a refusal is an
// InvalidError; a Client is the document's, with its keys and redirect
// URIs where spec 4.1 puts them.
func FuzzParseMetadata(f *testing.F) {
	pub := validDoc()
	pub["token_endpoint_auth_method"] = "none"
	pub["redirect_uris"] = []any{"http://localhost:6274/cb", "com.agent.app:/cb", "https://app.agent.test/cb"}
	pubBody, _ := json.Marshal(pub)
	for _, body := range [][]byte{
		validBody(),
		pubBody,
		with("client_id", "https://agent.test/other.json"),
		with("jwks_uri", "https://keys.agent.test/jwks.json"),
		with("jwks_uri", "https://evilagent.test/jwks.json"),
		with("jwks_uri", "https://127.0.0.1/jwks.json"),
		with("redirect_uris", []string{"http://127.0.0.1:49152/cb", "http://[::1]/cb"}),
		with("redirect_uris", []string{"https://agent.test/cb#x"}),
		with("redirect_uris", []string{"https://u@agent.test/cb"}),
		with("extensions", map[string]any{"operations": map[string]any{"version": "3"}, "x": 1, "y": map[string]any{"version": 2}}),
		with("extensions", []any{1}),
		with("logo_uri", "javascript:alert(1)"),
		with("client_name", "Agent\u202e"),
		with("client_name", strings.Repeat("a", maxClientName+1)),
		with("client_name", "Agent\u0085Smith"),
		with("client_name", "Agent\nSmith"),
		[]byte(`[]`),
		[]byte(`{"client_id": "https://agent.test/agent.json", "client_id": "https://agent.test/agent.json"}`),
	} {
		f.Add(testClientID, body)
	}
	f.Add("https://127.0.0.1/a.json", []byte(`{"client_id": "https://127.0.0.1/a.json", "jwks_uri": "https://127.0.0.1/k"}`))
	f.Add("https://agent.test/a.json?x=1", []byte(`{"client_id": "https://agent.test/a.json?x=1", "jwks_uri": "https://AGENT.test:8443/k"}`))
	f.Fuzz(func(t *testing.T, clientID string, body []byte) {
		if CheckClientID(clientID) != nil {
			return
		}
		c, err := parseMetadata(clientID, body)
		if err != nil {
			if c != nil {
				t.Fatalf("client %+v with error %v", c, err)
			}
			requireInvalid(t, err)
			return
		}
		base, _ := url.Parse(clientID)
		switch {
		case c.ClientID != clientID:
			t.Fatalf("client_id %q from %q", c.ClientID, clientID)
		case c.Extensions == nil:
			t.Fatal("no extensions map")
		case !fitName(c.Name):
			t.Fatalf("kept client_name %q", c.Name)
		}
		requireHTTPSOrEmpty(t, "logo_uri", c.LogoURI)
		requireHTTPSOrEmpty(t, "client_uri", c.ClientURI)
		if c.Public {
			if c.JWKSURI != "" || len(c.RedirectURIs) == 0 || len(c.RedirectURIs) > maxRedirectURIs {
				t.Fatalf("public client %+v", c)
			}
			for _, r := range c.RedirectURIs {
				if err := publicRedirect(base, r); err != nil {
					t.Fatalf("kept redirect_uri %q: %v", r, err)
				}
			}
			return
		}
		ju, err := url.Parse(c.JWKSURI)
		if err != nil || ju.Scheme != "https" || ju.User != nil || !sameDomain(base.Hostname(), ju.Hostname()) {
			t.Fatalf("kept jwks_uri %q for %q", c.JWKSURI, clientID)
		}
		for _, r := range c.RedirectURIs {
			ru, err := url.Parse(r)
			if err != nil || strings.Contains(r, "#") || ru.User != nil ||
				!(loopbackRedirect(ru) || ru.Scheme == "https" && sameDomain(base.Hostname(), ru.Hostname())) {
				t.Fatalf("kept redirect_uri %q for %q", r, clientID)
			}
		}
	})
}

// FuzzParseRegistration feeds Dynamic Client Registration bodies to
// ParseRegistration: a refusal carries one of RFC 7591's two error codes;
// a Client is public, without a client_id, with a name fit for the
// consent page and redirect URIs a public client may have.
func FuzzParseRegistration(f *testing.F) {
	for _, seed := range []string{
		`{"redirect_uris":["http://localhost:6274/oauth/callback","https://app.example/cb"],"client_name":"Inspector","client_uri":"https://app.example/","token_endpoint_auth_method":"none","grant_types":["authorization_code","refresh_token"],"response_types":["code"],"software_id":"ignored"}`,
		`{"redirect_uris":["com.example.app:/cb"],"logo_uri":"https://app.example/l.png"}`,
		`{"redirect_uris":["http://127.0.0.1/cb"],"token_endpoint_auth_method":"client_secret_basic"}`,
		`{"redirect_uris":["http://127.0.0.1/cb"],"grant_types":["refresh_token"]}`,
		`{"redirect_uris":["http://127.0.0.1/cb"],"response_types":["token"]}`,
		`{"redirect_uris":["http://127.0.0.1/cb"],"client_name":"a\nb"}`,
		`{"redirect_uris":["http://127.0.0.1/cb"],"client_name":"\u202eevil"}`,
		`{"redirect_uris":["javascript:alert(1)"]}`,
		`{"redirect_uris":["/cb"]}`,
		`{"redirect_uris":null,"token_endpoint_auth_method":null}`,
		`[`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		c, err := ParseRegistration(body)
		if err != nil {
			var re *RegistrationError
			if c != nil || !errors.As(err, &re) || re.Description == "" ||
				(re.Code != "invalid_client_metadata" && re.Code != "invalid_redirect_uri") {
				t.Fatalf("client %+v, error %v", c, err)
			}
			return
		}
		switch {
		case !c.Public || c.ClientID != "" || c.JWKSURI != "" || c.Extensions == nil:
			t.Fatalf("registered %+v", c)
		case !fitName(c.Name):
			t.Fatalf("kept client_name %q", c.Name)
		case len(c.RedirectURIs) == 0 || len(c.RedirectURIs) > maxRedirectURIs:
			t.Fatalf("kept %d redirect_uris", len(c.RedirectURIs))
		}
		requireHTTPSOrEmpty(t, "logo_uri", c.LogoURI)
		requireHTTPSOrEmpty(t, "client_uri", c.ClientURI)
		for _, r := range c.RedirectURIs {
			if err := publicRedirect(nil, r); err != nil {
				t.Fatalf("kept redirect_uri %q: %v", r, err)
			}
		}
	})
}

// FuzzParseKeySet feeds JWK Sets from jwks_uri to parseKeySet: a refusal
// is an InvalidError; a set holds at most maxKeys keys, none of them with
// a private member, and looking a key up in it answers.
func FuzzParseKeySet(f *testing.F) {
	const ecPub = `"kty":"EC","crv":"P-256","x":"f83OJ3D2xF1Bg8vub9tLe1gHMzV76e8Tus9uPHvRVEU","y":"x_FEzRu9m36HLN_tue659LNpXW6pCyStikYjKIWI5a0"`
	for _, seed := range []string{
		`{"keys":[{` + ecPub + `,"kid":"a"}]}`,
		`{"keys":[{` + ecPub + `,"kid":"a","use":"enc"},{` + ecPub + `,"kid":"a"}]}`,
		`{"keys":[{"kty":"OKP","crv":"Ed25519","x":"11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo","kid":"e"}]}`,
		`{"keys":[{"kty":"RSA","n":"sXch","e":"AQAB","kid":"r"}]}`,
		`{"keys":[]}`,
		`{"keys":[{` + ecPub + `,"d":"jpsQnnGQmL-YBIffH1136cspYG6-0iY7X1fCE9-E9LI"}]}`,
		`{"keys":[{` + ecPub + `,"\u0064":"jpsQnnGQmL-YBIffH1136cspYG6-0iY7X1fCE9-E9LI"}]}`,
		`{"keys":[{"kty":"oct","k":"AyM1SysPpbyDfgZld3umj1qzKObwVMkoqQ"}]}`,
		`{"keys":[{"kty":"RSA","n":"sXch","e":"AQAB","p":"2rnS"}]}`,
		`{"keys":[{"kty":"EC","crv":"P-256","x":"!"}]}`,
		`{"keys":{}}`,
		`{}`,
		`keys`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		set, err := parseKeySet(body)
		if err != nil {
			if set != nil {
				t.Fatalf("set with error %v", err)
			}
			requireInvalid(t, err)
			return
		}
		if set.Len() > maxKeys {
			t.Fatalf("kept %d keys", set.Len())
		}
		for i := range set.Len() {
			k, ok := set.Key(i)
			if !ok {
				t.Fatalf("no key %d of %d", i, set.Len())
			}
			raw, err := json.Marshal(k)
			if err != nil {
				t.Fatalf("key %d does not serialize: %v", i, err)
			}
			var members map[string]json.RawMessage
			if err := json.Unmarshal(raw, &members); err != nil || jose.HasPrivateMembers(members) {
				t.Fatalf("kept key %s", raw)
			}
			signingKey(set, k.KeyID())
		}
	})
}
