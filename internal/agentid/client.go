package agentid

import (
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strings"

	"golang.org/x/net/publicsuffix"

	"github.com/poppyhost/poppyhost/internal/safehttp"
)

// Client is a Personal Agent as its client metadata document describes it,
// or, when Public, an MCP client that is not one (spec 7, "Other MCP
// clients").
type Client struct {
	ClientID     string
	Name         string
	LogoURI      string
	JWKSURI      string
	RedirectURIs []string
	// Extensions are the extensions the agent declares, name to version.
	Extensions map[string]string
	// Public is a document with token_endpoint_auth_method none: a public
	// client (RFC 6749 §2.1) with no keys, such as a desktop MCP client
	// signing in with MCP's own authorization. It is never a Personal
	// Agent: Resolver.Client refuses it.
	Public bool
	// ClientURI is a public client's home page (client_uri, RFC 7591 §2),
	// shown only when it is an https URL.
	ClientURI string
}

// InvalidError says why a client metadata document or key set is refused.
type InvalidError struct{ Reason string }

func (e *InvalidError) Error() string { return e.Reason }

func invalid(format string, a ...any) error {
	return &InvalidError{Reason: fmt.Sprintf(format, a...)}
}

// MaxClientID bounds client_id URLs we are willing to fetch.
const MaxClientID = 2048

// CheckClientID says whether s can be a client_id (CIMD §3): an https URL
// with a host and a path without dot segments, and no user info or
// fragment. A query is allowed, as CIMD allows it.
func CheckClientID(s string) error {
	if len(s) > MaxClientID {
		return invalid("client_id is longer than %d characters", MaxClientID)
	}
	u, err := url.Parse(s)
	switch {
	case err != nil:
		return invalid("client_id is not a URL")
	case u.Scheme != "https":
		return invalid("client_id must be an https URL (spec 4.1)")
	case u.Hostname() == "" || u.User != nil:
		return invalid("client_id must name a host and no user info")
	case u.Fragment != "" || strings.Contains(s, "#"):
		return invalid("client_id must not have a fragment")
	case u.Path == "":
		return invalid("client_id must have a path")
	}
	// CIMD §3 forbids dot segments; the one path rule also refuses the
	// spellings servers may read as them.
	if !safehttp.ValidPath(u.EscapedPath()) {
		return invalid("client_id's path must be %s", safehttp.PathRule)
	}
	return nil
}

// sameDomain reports whether host b is on host a's registrable domain.
func sameDomain(a, b string) bool {
	a, b = strings.ToLower(a), strings.ToLower(b)
	if a == b {
		return true
	}
	if _, err := netip.ParseAddr(a); err == nil {
		return false
	}
	ra, err1 := publicsuffix.EffectiveTLDPlusOne(a)
	rb, err2 := publicsuffix.EffectiveTLDPlusOne(b)
	return err1 == nil && err2 == nil && ra == rb
}

// loopbackRedirect reports whether u is a loopback redirect URI as RFC 8252
// §7.3 defines it: http with an IP literal loopback host, any port.
func loopbackRedirect(u *url.URL) bool {
	if u.Scheme != "http" {
		return false
	}
	ip := net.ParseIP(u.Hostname())
	return ip != nil && ip.IsLoopback()
}

type metadataDoc struct {
	ClientID     *string         `json:"client_id"`
	ClientName   string          `json:"client_name"`
	ClientURI    string          `json:"client_uri"`
	LogoURI      string          `json:"logo_uri"`
	JWKSURI      *string         `json:"jwks_uri"`
	RedirectURIs []string        `json:"redirect_uris"`
	Extensions   json.RawMessage `json:"extensions"`
	AuthMethod   string          `json:"token_endpoint_auth_method"`
}

// maxRedirectURIs bounds a public client's redirect_uris.
const maxRedirectURIs = 20

// parseMetadata validates a client metadata document fetched from
// fetchedURL. Unknown members are ignored (spec 3.3).
func parseMetadata(fetchedURL string, body []byte) (*Client, error) {
	var doc metadataDoc
	if err := json.Unmarshal(body, &doc); err != nil {
		return nil, invalid("the client metadata document is not a JSON object of the expected shape")
	}
	if doc.ClientID == nil || *doc.ClientID != fetchedURL {
		return nil, invalid("the client metadata document's client_id must equal the URL it was fetched from (spec 4.1)")
	}
	if msg := nameProblem(doc.ClientName); msg != "" {
		return nil, invalid("the client metadata document's client_name %s", msg)
	}
	base, _ := url.Parse(fetchedURL)
	if doc.AuthMethod == "none" {
		return parsePublic(fetchedURL, base, &doc)
	}
	if doc.JWKSURI == nil {
		return nil, invalid("the client metadata document has no jwks_uri")
	}
	ju, err := url.Parse(*doc.JWKSURI)
	if err != nil || ju.Scheme != "https" || ju.Hostname() == "" || ju.User != nil {
		return nil, invalid("jwks_uri must be an https URL (spec 4.1)")
	}
	if !sameDomain(base.Hostname(), ju.Hostname()) {
		return nil, invalid("jwks_uri must be on the same domain as client_id (spec 4.1)")
	}
	c := &Client{ClientID: fetchedURL, Name: doc.ClientName, JWKSURI: *doc.JWKSURI, Extensions: map[string]string{},
		LogoURI: httpsOnly(doc.LogoURI)}
	for _, r := range doc.RedirectURIs {
		ru, err := url.Parse(r)
		if err != nil || strings.Contains(r, "#") || ru.User != nil {
			return nil, invalid("redirect_uris holds a malformed URL")
		}
		ok := loopbackRedirect(ru) || (ru.Scheme == "https" && sameDomain(base.Hostname(), ru.Hostname()))
		if !ok {
			return nil, invalid("each redirect_uri must be https on the client_id's domain or a loopback redirect URI (spec 4.1)")
		}
		c.RedirectURIs = append(c.RedirectURIs, r)
	}
	if len(doc.Extensions) > 0 && string(doc.Extensions) != "null" {
		var exts map[string]json.RawMessage
		if err := json.Unmarshal(doc.Extensions, &exts); err != nil {
			return nil, invalid("extensions must be an object keyed by extension name (spec 3.3)")
		}
		for name, raw := range exts {
			var e struct {
				Version string `json:"version"`
			}
			// An entry we cannot read is an extension we do not support.
			if json.Unmarshal(raw, &e) == nil && e.Version != "" {
				c.Extensions[name] = e.Version
			}
		}
	}
	return c, nil
}

// parsePublic validates the document of a public client (CIMD with
// token_endpoint_auth_method none, as MCP authorization uses it): no keys,
// and redirect URIs by RFC 8252's rules for native apps (loopback http,
// including localhost, §7.3 and §8.3; a private-use scheme with a period,
// §7.1) or https on the client_id's domain, as for Personal Agents.
func parsePublic(clientID string, base *url.URL, doc *metadataDoc) (*Client, error) {
	if len(doc.RedirectURIs) == 0 || len(doc.RedirectURIs) > maxRedirectURIs {
		return nil, invalid("a public client's metadata document needs 1 to %d redirect_uris", maxRedirectURIs)
	}
	c := &Client{ClientID: clientID, Name: doc.ClientName, LogoURI: httpsOnly(doc.LogoURI),
		ClientURI: httpsOnly(doc.ClientURI), Extensions: map[string]string{}, Public: true}
	for _, r := range doc.RedirectURIs {
		if err := publicRedirect(base, r); err != nil {
			return nil, err
		}
		c.RedirectURIs = append(c.RedirectURIs, r)
	}
	return c, nil
}

// publicRedirect checks one of a public client's redirect_uris: loopback
// http (an IP literal or localhost, any port), a private-use scheme with
// a period, or https, on base's registrable domain when the client has a
// client_id URL (base), on any host for a registered one (base nil).
func publicRedirect(base *url.URL, r string) error {
	ru, err := url.Parse(r)
	if err != nil || !ru.IsAbs() || strings.Contains(r, "#") || ru.User != nil || len(r) > MaxClientID {
		return invalid("redirect_uris holds a malformed URL")
	}
	https := ru.Scheme == "https" && ru.Hostname() != "" && (base == nil || sameDomain(base.Hostname(), ru.Hostname()))
	if loopbackRedirect(ru) || (ru.Scheme == "http" && ru.Hostname() == "localhost") || https || privateUseScheme(ru) {
		return nil
	}
	if base == nil {
		return invalid("each redirect_uri must be https, a loopback http URL, or a private-use scheme with a period (RFC 8252 §7)")
	}
	return invalid("each redirect_uri must be a loopback http URL, https on the client_id's domain, " +
		"or a private-use scheme with a period (RFC 8252 §7)")
}

// privateUseScheme reports whether u has a private-use scheme as RFC 8252
// §7.1 names them: a reversed domain name, so with a period.
func privateUseScheme(u *url.URL) bool {
	switch u.Scheme {
	case "http", "https", "javascript", "data", "file", "":
		return false
	}
	return strings.Contains(u.Scheme, ".")
}

// httpsOnly returns raw when it is an https URL with a host, else "".
func httpsOnly(raw string) string {
	if u, err := url.Parse(raw); err == nil && u.Scheme == "https" && u.Hostname() != "" && u.User == nil {
		return raw
	}
	return ""
}

// errPrivateKey is returned for key sets that carry private key members.
var errPrivateKey error = &InvalidError{Reason: "the key set holds private key members; it must contain only public keys (spec 4.1)"}
