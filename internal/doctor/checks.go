package doctor

import (
	"context"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/lestrrat-go/jwx/v2/jwk"
	"go.yaml.in/yaml/v4"

	"github.com/poppyhost/poppyhost/internal/safehttp"
)

// checks run in this order; later ones use what earlier ones found.
var checks = []check{
	{"tls", "3", "serve the domain over HTTPS with a certificate for its name from a CA Personal Agents trust", checkTLS},
	{"poppy.json", "3.1", "route /.well-known/poppy.json on the domain to poppyhost", checkPoppyJSON},
	{"protected-resource", "3.2", "route /.well-known/oauth-protected-resource on the domain to poppyhost", checkProtectedResource},
	{"authorization-server", "3.2", "route the issuer's /.well-known/oauth-authorization-server to poppyhost and list the domain in the Company's domains", checkAuthorizationServer},
	{"jwks", "3.2, 4.5", "publish only public signing keys at jwks_uri, with certificates (x5c) that have not expired", checkJWKS},
	{"conversations", "8.2, 5.3", "route the conversation endpoint's path to poppyhost", endpointCheck(conversationEndpoint)},
	{"feedback", "9.3, 5.3", "route the feedback endpoint's path to poppyhost", endpointCheck(feedbackEndpoint)},
	{"mcp", "7, 5.3", "route the MCP server's path to poppyhost", checkMCP},
	{"openapi", "7", "publish each OpenAPI description at its URL as JSON or YAML with an openapi version 3.x", checkOpenAPI},
}

// poppyJSON holds the members of poppy.json the checks read.
type poppyJSON struct {
	ProtocolVersion string `json:"protocol_version"`
	Organization    struct {
		Name   string `json:"name"`
		Domain string `json:"domain"`
	} `json:"organization"`
	Auth *struct {
		Issuer string `json:"issuer"`
	} `json:"auth"`
	Agent *struct {
		Protocols []struct {
			Type     string `json:"type"`
			Endpoint string `json:"endpoint"`
		} `json:"protocols"`
	} `json:"agent"`
	Feedback *struct {
		Endpoint string `json:"endpoint"`
	} `json:"feedback"`
	APIs []struct {
		Type string `json:"type"`
		URL  string `json:"url"`
	} `json:"apis"`
}

// asMetadata holds the members of the issuer's RFC 8414 metadata the
// checks read.
type asMetadata struct {
	Issuer              string   `json:"issuer"`
	TokenEndpoint       string   `json:"token_endpoint"`
	RevocationEndpoint  string   `json:"revocation_endpoint"`
	JWKSURI             string   `json:"jwks_uri"`
	GrantTypesSupported []string `json:"grant_types_supported"`
	ProtectedResources  []string `json:"protected_resources"`
}

// checkTLS passes when an HTTPS connection to the domain is made and
// verified, whatever the status of the answer. The answer is poppy.json's,
// kept for checkPoppyJSON, so the document is fetched once.
func checkTLS(ctx context.Context, s *state) (bool, error) {
	resp, err := s.client.Get(ctx, safehttp.Request{URL: s.origin + "/.well-known/poppy.json",
		Accept: []string{"application/json"}, FollowRedirects: true})
	s.poppy, s.poppyErr = resp, err
	for _, answered := range []error{safehttp.ErrStatus, safehttp.ErrContentType, safehttp.ErrTooLarge, safehttp.ErrRedirect} {
		if errors.Is(err, answered) {
			return false, nil
		}
	}
	return false, err
}

// checkPoppyJSON reads poppy.json, as checkTLS fetched it the way spec 3
// says, and checks its required members, that every URL in it is HTTPS,
// and that organization.domain is the host that served it.
func checkPoppyJSON(_ context.Context, s *state) (bool, error) {
	resp, err := s.poppy, s.poppyErr
	if err != nil {
		return false, err
	}
	final, err := url.Parse(resp.URL)
	if err != nil {
		return false, err
	}
	if final.Path != "/.well-known/poppy.json" || final.RawQuery != "" {
		return false, fmt.Errorf("redirected to %s: the last URL must be /.well-known/poppy.json without a query", final.Redacted())
	}
	var doc poppyJSON
	if err := json.Unmarshal(resp.Body, &doc); err != nil {
		return false, fmt.Errorf("not a JSON object: %w", err)
	}
	for _, m := range []struct{ name, value string }{{"protocol_version", doc.ProtocolVersion},
		{"organization.name", doc.Organization.Name}, {"organization.domain", doc.Organization.Domain}} {
		if m.value == "" {
			return false, fmt.Errorf("%s is missing", m.name)
		}
	}
	if !strings.EqualFold(doc.Organization.Domain, final.Hostname()) {
		return false, &hinted{fmt.Errorf("organization.domain is %q but %q served the document", doc.Organization.Domain, final.Hostname()),
			"add the host that serves poppy.json to the Company's domains; each domain's document names that domain"}
	}
	var raw any
	if err := json.Unmarshal(resp.Body, &raw); err != nil {
		return false, err
	}
	if bad := nonHTTPS(raw, ""); bad != "" {
		return false, fmt.Errorf("%s is not an https URL", bad)
	}
	s.doc = &doc
	return false, nil
}

// nonHTTPS returns the path of the first member that names a URL (its
// name ends in endpoint, url, uri or issuer) and is not HTTPS.
func nonHTTPS(v any, path string) string {
	switch v := v.(type) {
	case map[string]any:
		// In the members' order by name, so that of several bad members
		// every run names the same one.
		for _, k := range slices.Sorted(maps.Keys(v)) {
			m := v[k]
			p := strings.TrimPrefix(path+"."+k, ".")
			if str, ok := m.(string); ok {
				lk := strings.ToLower(k)
				for _, suffix := range []string{"endpoint", "url", "uri", "issuer"} {
					if strings.HasSuffix(lk, suffix) && !isHTTPS(str) {
						return p
					}
				}
			}
			if bad := nonHTTPS(m, p); bad != "" {
				return bad
			}
		}
	case []any:
		for i, m := range v {
			if bad := nonHTTPS(m, fmt.Sprintf("%s[%d]", path, i)); bad != "" {
				return bad
			}
		}
	}
	return ""
}

// resourceOf reports whether r is the resource identifier
// https://{domain} (RFC 9728 §3.3), the port of a local deployment
// allowed.
func resourceOf(r, domain string) bool {
	u, err := url.Parse(r)
	return err == nil && u.Scheme == "https" && strings.EqualFold(u.Hostname(), domain) &&
		strings.TrimSuffix(u.Path, "/") == "" && u.RawQuery == ""
}

// checkProtectedResource reads the domain's protected resource metadata
// and finds the issuer as a Personal Agent does.
func checkProtectedResource(ctx context.Context, s *state) (bool, error) {
	if s.doc == nil {
		return true, errors.New("needs a valid poppy.json")
	}
	var want string
	if s.doc.Auth != nil {
		want = s.doc.Auth.Issuer
	}
	resp, err := s.client.Get(ctx, safehttp.Request{URL: s.origin + "/.well-known/oauth-protected-resource",
		Accept: []string{"application/json"}})
	if errors.Is(err, safehttp.ErrStatus) && strings.HasSuffix(err.Error(), ": 404") && want == "" {
		s.resourceChecked = true
		return false, nil // no issuer: signed-out Sessions only
	}
	if err != nil {
		return false, err
	}
	var prm struct {
		Resource             string   `json:"resource"`
		AuthorizationServers []string `json:"authorization_servers"`
	}
	if err := json.Unmarshal(resp.Body, &prm); err != nil {
		return false, fmt.Errorf("not a JSON object: %w", err)
	}
	if !resourceOf(prm.Resource, s.doc.Organization.Domain) {
		return false, fmt.Errorf("resource is %q, want https://%s", prm.Resource, s.doc.Organization.Domain)
	}
	for _, as := range prm.AuthorizationServers {
		if !isHTTPS(as) {
			return false, fmt.Errorf("authorization server %q is not an https URL", as)
		}
	}
	switch {
	case want != "" && !slices.Contains(prm.AuthorizationServers, want):
		return false, fmt.Errorf("auth.issuer %q is not among authorization_servers %v", want, prm.AuthorizationServers)
	case want != "":
		s.issuer = want
	case len(prm.AuthorizationServers) == 1:
		s.issuer = prm.AuthorizationServers[0]
	case len(prm.AuthorizationServers) > 1:
		return false, errors.New("several authorization_servers and no auth.issuer in poppy.json")
	}
	s.resourceChecked = true
	return false, nil
}

// checkAuthorizationServer reads the issuer's RFC 8414 metadata and checks
// the members spec 3.2 requires.
func checkAuthorizationServer(ctx context.Context, s *state) (bool, error) {
	if !s.resourceChecked {
		return true, errors.New("needs the protected resource metadata")
	}
	if s.issuer == "" {
		return true, errors.New("no issuer: the domain offers signed-out Sessions only")
	}
	u, err := url.Parse(s.issuer)
	if err != nil {
		return false, err
	}
	metaURL := "https://" + u.Host + "/.well-known/oauth-authorization-server" + strings.TrimSuffix(u.Path, "/")
	resp, err := s.client.Get(ctx, safehttp.Request{URL: metaURL, Accept: []string{"application/json"}})
	if err != nil {
		return false, err
	}
	var as asMetadata
	if err := json.Unmarshal(resp.Body, &as); err != nil {
		return false, fmt.Errorf("not a JSON object: %w", err)
	}
	switch {
	case as.Issuer != s.issuer:
		return false, fmt.Errorf("issuer is %q, want %q", as.Issuer, s.issuer)
	case !isHTTPS(as.TokenEndpoint), !isHTTPS(as.RevocationEndpoint), !isHTTPS(as.JWKSURI):
		return false, errors.New("token_endpoint, revocation_endpoint and jwks_uri must be https URLs")
	case !slices.Contains(as.GrantTypesSupported, "refresh_token"):
		return false, errors.New("grant_types_supported lacks refresh_token")
	case !slices.ContainsFunc(as.ProtectedResources, func(r string) bool { return resourceOf(r, s.doc.Organization.Domain) }):
		return false, fmt.Errorf("protected_resources %v does not list https://%s", as.ProtectedResources, s.doc.Organization.Domain)
	}
	s.as = &as
	return false, nil
}

// checkJWKS fetches the issuer's key set: it must parse, hold only public
// keys, at least one of them a signing key, and no expired certificate.
func checkJWKS(ctx context.Context, s *state) (bool, error) {
	if s.as == nil {
		return true, errors.New("needs the authorization server metadata")
	}
	resp, err := s.client.Get(ctx, safehttp.Request{URL: s.as.JWKSURI,
		Accept: []string{"application/json", "application/jwk-set+json"}})
	if err != nil {
		return false, err
	}
	set, err := jwk.Parse(resp.Body)
	if err != nil {
		return false, fmt.Errorf("not a JWK set: %w", err)
	}
	usable := 0
	for i := range set.Len() {
		key, _ := set.Key(i)
		if key.KeyType() == "oct" {
			return false, fmt.Errorf("key %q is a symmetric key", key.KeyID())
		}
		if private, err := jwk.IsPrivateKey(key); err != nil || private {
			return false, fmt.Errorf("key %q is a private key", key.KeyID())
		}
		if chain := key.X509CertChain(); chain != nil && chain.Len() > 0 {
			b64, _ := chain.Get(0)
			der, err := base64.StdEncoding.DecodeString(string(b64))
			if err != nil {
				return false, fmt.Errorf("key %q: x5c: %w", key.KeyID(), err)
			}
			cert, err := x509.ParseCertificate(der)
			if err != nil {
				return false, fmt.Errorf("key %q: x5c: %w", key.KeyID(), err)
			}
			if time.Now().After(cert.NotAfter) {
				return false, fmt.Errorf("key %q: its certificate expired at %s", key.KeyID(), cert.NotAfter.UTC().Format(time.RFC3339))
			}
		}
		if key.KeyUsage() == "" || key.KeyUsage() == "sig" {
			usable++
		}
	}
	if usable == 0 {
		return false, errors.New("no signing key")
	}
	return false, nil
}

func conversationEndpoint(d *poppyJSON) string {
	if d.Agent != nil {
		for _, p := range d.Agent.Protocols {
			if p.Type == "poppy" {
				return p.Endpoint
			}
		}
	}
	return ""
}

func feedbackEndpoint(d *poppyJSON) string {
	if d.Feedback != nil {
		return d.Feedback.Endpoint
	}
	return ""
}

// endpointCheck checks that the endpoint poppy.json names answers a POST
// without a Session header with 400 invalid_session (spec 5.3), which
// only a Poppy server answers.
func endpointCheck(endpoint func(*poppyJSON) string) func(context.Context, *state) (bool, error) {
	return func(ctx context.Context, s *state) (bool, error) {
		if s.doc == nil {
			return true, errors.New("needs a valid poppy.json")
		}
		u := endpoint(s.doc)
		if u == "" {
			return true, errors.New("poppy.json offers none")
		}
		return false, wantInvalidSession(ctx, s, u, http.Header{"Content-Type": {"application/json"}}, []byte(`{}`))
	}
}

// wantInvalidSession POSTs body to u without a Session header and wants
// the spec's answer: 400 with {"error": "invalid_session"}.
func wantInvalidSession(ctx context.Context, s *state, u string, h http.Header, body []byte) error {
	resp, err := s.client.Post(ctx, safehttp.PostRequest{URL: u, Header: h, Body: body, AnyStatus: true})
	if err != nil {
		return err
	}
	return invalidSession(u, resp)
}

// invalidSession says whether resp is the spec's answer to a request
// without a Session: 400 with {"error": "invalid_session"}.
func invalidSession(u string, resp *safehttp.Response) error {
	var e struct {
		Error string `json:"error"`
	}
	_ = json.Unmarshal(resp.Body, &e)
	if resp.Status != http.StatusBadRequest || e.Error != "invalid_session" {
		return fmt.Errorf("POST %s without a Session answered %d %q, want 400 invalid_session", u, resp.Status, e.Error)
	}
	return nil
}

// checkMCP sends MCP initialize to each MCP server poppy.json lists. A
// Session needs the agent's own hosted client metadata and keys, which
// the doctor does not have, so it checks the spec's answer to a request
// without credentials, which shows the path reaches poppyhost: 400
// invalid_session, or, where the server wants an access token, 401 with a
// challenge naming the server's resource metadata (spec 7, RFC 9728 §5.1).
// It names the first server that answers otherwise.
func checkMCP(ctx context.Context, s *state) (bool, error) {
	if s.doc == nil {
		return true, errors.New("needs a valid poppy.json")
	}
	n := 0
	for _, api := range s.doc.APIs {
		if api.Type != "mcp" {
			continue
		}
		n++
		if err := mcpReached(ctx, s, api.URL); err != nil {
			return false, err
		}
	}
	if n == 0 {
		return true, errors.New("poppy.json lists no MCP server")
	}
	return false, nil
}

// mcpReached checks that an MCP initialize without credentials at u gets
// poppyhost's answer.
func mcpReached(ctx context.Context, s *state, u string) error {
	body := []byte(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18",` +
		`"capabilities":{},"clientInfo":{"name":"poppyhost-doctor","version":"1"}}}`)
	resp, err := s.client.Post(ctx, safehttp.PostRequest{URL: u, AnyStatus: true, Body: body, Header: http.Header{
		"Content-Type": {"application/json"}, "Accept": {"application/json, text/event-stream"}}})
	if err != nil {
		return err
	}
	if resp.Status == http.StatusUnauthorized {
		m := resourceMetadataParam.FindStringSubmatch(resp.Header.Get("WWW-Authenticate"))
		if m == nil || !isHTTPS(m[1]) {
			return fmt.Errorf("POST %s answered 401 without a resource_metadata https URL in WWW-Authenticate", u)
		}
		return nil
	}
	return invalidSession(u, resp)
}

// resourceMetadataParam finds a challenge's resource_metadata parameter.
var resourceMetadataParam = regexp.MustCompile(`resource_metadata="([^"]*)"`)

// checkOpenAPI fetches every OpenAPI description poppy.json lists and
// parses it.
func checkOpenAPI(ctx context.Context, s *state) (bool, error) {
	if s.doc == nil {
		return true, errors.New("needs a valid poppy.json")
	}
	n := 0
	for _, api := range s.doc.APIs {
		if api.Type != "openapi" {
			continue
		}
		n++
		resp, err := s.client.Get(ctx, safehttp.Request{URL: api.URL, FollowRedirects: true, MaxBytes: 8 << 20})
		if err != nil {
			return false, err
		}
		var d struct {
			OpenAPI string         `yaml:"openapi"`
			Paths   map[string]any `yaml:"paths"`
		}
		if err := yaml.Unmarshal(resp.Body, &d); err != nil {
			return false, fmt.Errorf("%s: not JSON or YAML: %w", api.URL, err)
		}
		if !strings.HasPrefix(d.OpenAPI, "3.") || d.Paths == nil {
			return false, fmt.Errorf("%s: want an OpenAPI 3.x description with paths", api.URL)
		}
	}
	if n == 0 {
		return true, errors.New("poppy.json lists no OpenAPI description")
	}
	return false, nil
}
