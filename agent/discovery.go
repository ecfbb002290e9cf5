package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
)

// The checks of spec 3 a discovery can fail; a *DiscoveryError wraps one,
// so errors.Is(err, ErrDomainMismatch) tells which.
var (
	ErrFetch               = errors.New("poppy.json could not be fetched")
	ErrNotHTTPS            = errors.New("a URL is not HTTPS")
	ErrRedirectPath        = errors.New("the last URL is not /.well-known/poppy.json without a query")
	ErrDocument            = errors.New("poppy.json is not a valid document")
	ErrDomainMismatch      = errors.New("organization.domain is not the host that served poppy.json")
	ErrResourceMetadata    = errors.New("the protected resource metadata is not valid")
	ErrAuthIssuer          = errors.New("auth.issuer does not name an authorization server of the domain")
	ErrIssuerMetadata      = errors.New("the issuer's metadata is not valid")
	ErrIssuerMismatch      = errors.New("the issuer metadata's issuer is not the issuer found")
	ErrProtectedResources  = errors.New("the issuer's protected_resources does not list the domain")
	ErrNoIssuerButSignIn   = errors.New("the domain has no issuer but poppy.json offers sign-in")
	errTooManyRedirections = errors.New("too many redirects")
)

// DiscoveryError names the check of spec 3 that failed and why.
type DiscoveryError struct {
	Check  error
	Detail string
}

func (e *DiscoveryError) Error() string {
	return "discovery: " + e.Check.Error() + ": " + e.Detail
}

// Unwrap returns the failed check.
func (e *DiscoveryError) Unwrap() error { return e.Check }

func fail(check error, format string, args ...any) error {
	return &DiscoveryError{Check: check, Detail: fmt.Sprintf(format, args...)}
}

// PoppyJSON holds the members of poppy.json the agent uses (spec 3.1);
// Raw keeps the whole document.
type PoppyJSON struct {
	ProtocolVersion string `json:"protocol_version"`
	Organization    struct {
		Name    string `json:"name"`
		Domain  string `json:"domain"`
		LogoURI string `json:"logo_uri"`
	} `json:"organization"`
	Auth *struct {
		Issuer   string            `json:"issuer"`
		Disabled bool              `json:"disabled"`
		Scopes   map[string]string `json:"scopes"`
	} `json:"auth"`
	Agent *struct {
		Protocols []struct {
			Type     string `json:"type"`
			Endpoint string `json:"endpoint"`
			Access   string `json:"access"`
		} `json:"protocols"`
	} `json:"agent"`
	Web *struct {
		BrowserSessionEndpoint string `json:"browser_session_endpoint"`
	} `json:"web"`
	APIs []struct {
		Type        string `json:"type"`
		URL         string `json:"url"`
		Description string `json:"description"`
	} `json:"apis"`
	Extensions map[string]json.RawMessage `json:"extensions"`
	Raw        json.RawMessage            `json:"-"`
}

// ASMetadata holds the members of the issuer's RFC 8414 metadata the agent
// uses (spec 3.2).
type ASMetadata struct {
	Issuer                      string   `json:"issuer"`
	AuthorizationEndpoint       string   `json:"authorization_endpoint"`
	TokenEndpoint               string   `json:"token_endpoint"`
	RevocationEndpoint          string   `json:"revocation_endpoint"`
	DeviceAuthorizationEndpoint string   `json:"device_authorization_endpoint"`
	GrantTypesSupported         []string `json:"grant_types_supported"`
	ScopesSupported             []string `json:"scopes_supported"`
	ProtectedResources          []string `json:"protected_resources"`
	// DPoPSigningAlgValuesSupported lists the algorithms of DPoP proofs
	// when the issuer binds tokens (RFC 9449 §5.1).
	DPoPSigningAlgValuesSupported []string `json:"dpop_signing_alg_values_supported"`
}

// Company is a discovered Company: its poppy.json, identifier and issuer.
type Company struct {
	// Domain is organization.domain, checked against the serving host.
	Domain string
	// Origin is https://{host[:port]} that served poppy.json.
	Origin string
	// Identifier is the issuer, or https://{Domain} without one (spec 3.2).
	Identifier string
	// Issuer is empty when the Company has no issuer.
	Issuer string
	Doc    PoppyJSON
	AS     *ASMetadata

	agent     *Agent
	mu        sync.Mutex // guards grant and its members
	refreshMu sync.Mutex // one refresh at a time: refresh tokens rotate
	grant     *Grant     // the User's sign-in here, if any
}

// Name is organization.name.
func (c *Company) Name() string { return c.Doc.Organization.Name }

// ConversationEndpoint is the endpoint of the poppy conversation protocol,
// or "" when the Company lists none.
func (c *Company) ConversationEndpoint() string {
	if c.Doc.Agent == nil {
		return ""
	}
	for _, p := range c.Doc.Agent.Protocols {
		if p.Type == "poppy" {
			return p.Endpoint
		}
	}
	return ""
}

// BrowserSessionEndpoint is web.browser_session_endpoint, or "".
func (c *Company) BrowserSessionEndpoint() string {
	if c.Doc.Web == nil {
		return ""
	}
	return c.Doc.Web.BrowserSessionEndpoint
}

// API returns the URL of the first listed API of type typ ("openapi",
// "mcp"), or "".
func (c *Company) API(typ string) string {
	for _, a := range c.Doc.APIs {
		if a.Type == typ {
			return a.URL
		}
	}
	return ""
}

// Operations reports whether the Company lists the Operations extension
// version 3, and its endpoint for website operations ("" if none).
func (c *Company) Operations() (ok bool, endpoint string) {
	raw, found := c.Doc.Extensions["operations"]
	if !found {
		return false, ""
	}
	type entry struct {
		Version  string `json:"version"`
		Endpoint string `json:"endpoint"`
	}
	var list []entry
	if json.Unmarshal(raw, &list) != nil {
		var one entry
		if json.Unmarshal(raw, &one) != nil {
			return false, ""
		}
		list = []entry{one}
	}
	for _, e := range list {
		if e.Version == "3" {
			if !isHTTPS(e.Endpoint) {
				e.Endpoint = ""
			}
			return true, e.Endpoint
		}
	}
	return false, ""
}

// Discover fetches and checks a Company's poppy.json at domain (a host,
// with a port if not 443), as spec 3 says: redirects only to HTTPS, the
// last URL exactly /.well-known/poppy.json, organization.domain the host
// that served it, the issuer from the domain's protected resource
// metadata, and the issuer's metadata listing the domain.
func (a *Agent) Discover(ctx context.Context, domain string) (*Company, error) {
	a.Recorder.Note("Discover %s (spec 3)", domain)
	final, body, err := a.fetchWellKnown(ctx, "https://"+strings.ToLower(domain)+"/.well-known/poppy.json")
	if err != nil {
		return nil, err
	}
	c := &Company{agent: a, Origin: final.Scheme + "://" + final.Host}
	if err := json.Unmarshal(body, &c.Doc); err != nil {
		return nil, fail(ErrDocument, "%v", err)
	}
	c.Doc.Raw = body
	// Check 1: organization.domain is the host that served the document.
	c.Domain = strings.ToLower(c.Doc.Organization.Domain)
	if c.Domain == "" || c.Domain != strings.ToLower(final.Hostname()) {
		return nil, fail(ErrDomainMismatch, "organization.domain %q, served by %q", c.Doc.Organization.Domain, final.Hostname())
	}
	if err := checkDocumentURLs(&c.Doc); err != nil {
		return nil, err
	}
	resource := "https://" + c.Domain
	issuer, err := a.findIssuer(ctx, c, resource)
	if err != nil {
		return nil, err
	}
	if issuer == "" {
		if c.Doc.Auth != nil && c.Doc.Auth.Issuer != "" {
			return nil, fail(ErrNoIssuerButSignIn, "auth.issuer %q but no authorization server", c.Doc.Auth.Issuer)
		}
		c.Identifier = resource
		return c, nil
	}
	c.Issuer = issuer
	c.Identifier = issuer
	// Check 2: the issuer lists https://{organization.domain}.
	as, err := a.issuerMetadata(ctx, issuer)
	if err != nil {
		return nil, err
	}
	if !slices.ContainsFunc(as.ProtectedResources, func(r string) bool { return sameResource(r, resource) }) {
		return nil, fail(ErrProtectedResources, "%q not in %v", resource, as.ProtectedResources)
	}
	c.AS = as
	return c, nil
}

// fetchWellKnown follows redirects itself: each must be HTTPS, and the
// last URL must have the path /.well-known/poppy.json and no query.
func (a *Agent) fetchWellKnown(ctx context.Context, start string) (*url.URL, []byte, error) {
	u, err := url.Parse(start)
	if err != nil {
		return nil, nil, fail(ErrFetch, "%v", err)
	}
	for hop := 0; hop <= 5; hop++ {
		if u.Scheme != "https" {
			return nil, nil, fail(ErrNotHTTPS, "redirect to %s", u.Redacted())
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
		if err != nil {
			return nil, nil, fail(ErrFetch, "%v", err)
		}
		req.Header.Set("Accept", "application/json")
		resp, err := a.client.Do(req)
		if err != nil {
			return nil, nil, fail(ErrFetch, "%v", err)
		}
		body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		resp.Body.Close()
		if err != nil {
			return nil, nil, fail(ErrFetch, "%v", err)
		}
		switch resp.StatusCode {
		case http.StatusMovedPermanently, http.StatusFound, http.StatusSeeOther,
			http.StatusTemporaryRedirect, http.StatusPermanentRedirect:
			next, err := u.Parse(resp.Header.Get("Location"))
			if err != nil {
				return nil, nil, fail(ErrFetch, "bad Location: %v", err)
			}
			u = next
			continue
		case http.StatusOK:
		default:
			return nil, nil, fail(ErrFetch, "%s answered %d", u.Redacted(), resp.StatusCode)
		}
		if u.Path != "/.well-known/poppy.json" || u.RawQuery != "" || u.ForceQuery {
			return nil, nil, fail(ErrRedirectPath, "last URL %s", u.Redacted())
		}
		return u, body, nil
	}
	return nil, nil, fail(ErrFetch, "%v", errTooManyRedirections)
}

// checkDocumentURLs refuses a document with a URL the agent would use
// that is not HTTPS (spec 3, "HTTPS").
func checkDocumentURLs(d *PoppyJSON) error {
	var urls []string
	if d.Agent != nil {
		for _, p := range d.Agent.Protocols {
			urls = append(urls, p.Endpoint)
		}
	}
	if d.Web != nil && d.Web.BrowserSessionEndpoint != "" {
		urls = append(urls, d.Web.BrowserSessionEndpoint)
	}
	for _, api := range d.APIs {
		urls = append(urls, api.URL)
	}
	if d.Auth != nil && d.Auth.Issuer != "" {
		urls = append(urls, d.Auth.Issuer)
	}
	for _, u := range urls {
		if !isHTTPS(u) {
			return fail(ErrNotHTTPS, "poppy.json names %q", u)
		}
	}
	return nil
}

// findIssuer reads the domain's protected resource metadata (spec 3.2):
// 404 or no authorization servers means no issuer; any other failure is
// an error, never a fallback to the domain.
func (a *Agent) findIssuer(ctx context.Context, c *Company, resource string) (string, error) {
	var prm struct {
		Resource             string   `json:"resource"`
		AuthorizationServers []string `json:"authorization_servers"`
	}
	status, err := a.getJSON(ctx, c.Origin+"/.well-known/oauth-protected-resource", &prm)
	if err != nil {
		return "", fail(ErrResourceMetadata, "%v", err)
	}
	if status == http.StatusNotFound {
		return "", nil
	}
	if status != http.StatusOK {
		return "", fail(ErrResourceMetadata, "answered %d", status)
	}
	if prm.Resource != resource {
		return "", fail(ErrResourceMetadata, "resource %q, want %q", prm.Resource, resource)
	}
	for _, s := range prm.AuthorizationServers {
		if !isHTTPS(s) {
			return "", fail(ErrNotHTTPS, "authorization server %q", s)
		}
	}
	var want string
	if c.Doc.Auth != nil {
		want = c.Doc.Auth.Issuer
	}
	switch {
	case len(prm.AuthorizationServers) == 0:
		return "", nil
	case want != "":
		if !slices.Contains(prm.AuthorizationServers, want) {
			return "", fail(ErrAuthIssuer, "auth.issuer %q not in %v", want, prm.AuthorizationServers)
		}
		return want, nil
	case len(prm.AuthorizationServers) == 1:
		return prm.AuthorizationServers[0], nil
	default:
		return "", fail(ErrAuthIssuer, "several authorization servers and no auth.issuer")
	}
}

// issuerMetadata fetches the issuer's RFC 8414 metadata (at the URL §3.1
// defines) and checks its issuer and the members spec 3.2 requires.
func (a *Agent) issuerMetadata(ctx context.Context, issuer string) (*ASMetadata, error) {
	u, err := url.Parse(issuer)
	if err != nil {
		return nil, fail(ErrIssuerMetadata, "issuer %q: %v", issuer, err)
	}
	metaURL := u.Scheme + "://" + u.Host + "/.well-known/oauth-authorization-server" + strings.TrimSuffix(u.Path, "/")
	var as ASMetadata
	status, err := a.getJSON(ctx, metaURL, &as)
	if err != nil {
		return nil, fail(ErrIssuerMetadata, "%v", err)
	}
	if status != http.StatusOK {
		return nil, fail(ErrIssuerMetadata, "%s answered %d", metaURL, status)
	}
	if as.Issuer != issuer {
		return nil, fail(ErrIssuerMismatch, "metadata issuer %q, found %q", as.Issuer, issuer)
	}
	for _, e := range []string{as.TokenEndpoint, as.RevocationEndpoint} {
		if !isHTTPS(e) {
			return nil, fail(ErrIssuerMetadata, "endpoint %q is missing or not HTTPS", e)
		}
	}
	for _, e := range []string{as.AuthorizationEndpoint, as.DeviceAuthorizationEndpoint} {
		if e != "" && !isHTTPS(e) {
			return nil, fail(ErrNotHTTPS, "endpoint %q", e)
		}
	}
	if !slices.Contains(as.GrantTypesSupported, "refresh_token") {
		return nil, fail(ErrIssuerMetadata, "grant_types_supported lacks refresh_token")
	}
	return &as, nil
}

// getJSON GETs a document and decodes it when the status is 200.
func (a *Agent) getJSON(ctx context.Context, u string, v any) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := a.client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return resp.StatusCode, nil
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(v); err != nil {
		return resp.StatusCode, fmt.Errorf("%s: %w", u, err)
	}
	return resp.StatusCode, nil
}

// sameResource compares resource identifiers as RFC 9728 §3.3 does, with
// the host compared ignoring case (spec 3.2).
func sameResource(a, b string) bool {
	ua, err1 := url.Parse(a)
	ub, err2 := url.Parse(b)
	if err1 != nil || err2 != nil {
		return false
	}
	return ua.Scheme == ub.Scheme && strings.EqualFold(ua.Host, ub.Host) &&
		ua.Path == ub.Path && ua.RawQuery == ub.RawQuery
}

func isHTTPS(s string) bool {
	u, err := url.Parse(s)
	return err == nil && u.Scheme == "https" && u.Host != ""
}

// OpenAPIBase reads an OpenAPI description listed in poppy.json and
// returns its first server URL, the base of the API's request URLs (spec
// 7). Descriptions are not Session destinations: no Session header.
func (c *Company) OpenAPIBase(ctx context.Context, descriptionURL string) (string, error) {
	var desc struct {
		Servers []struct {
			URL string `json:"url"`
		} `json:"servers"`
	}
	status, err := c.agent.getJSON(ctx, descriptionURL, &desc)
	if err != nil {
		return "", err
	}
	if status != http.StatusOK || len(desc.Servers) == 0 {
		return "", fmt.Errorf("agent: OpenAPI description %s: status %d, %d servers", descriptionURL, status, len(desc.Servers))
	}
	base := strings.TrimSuffix(desc.Servers[0].URL, "/")
	if !isHTTPS(base) {
		return "", fmt.Errorf("agent: OpenAPI server %q is not HTTPS (spec 3)", base)
	}
	return base, nil
}
