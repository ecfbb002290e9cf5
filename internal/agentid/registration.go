package agentid

import (
	"encoding/json"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/poppyhost/poppyhost/internal/httpx"
)

// Dynamic Client Registration (RFC 7591) of a public MCP client: the
// metadata a client sends about itself, with the rules of a public
// client's metadata document except that no client_id URL anchors its
// https redirect URIs.

// MaxRegistrationBytes bounds a registration request's body.
const MaxRegistrationBytes = 8 << 10

// maxClientName bounds a client_name, registered or in a metadata
// document: the consent page shows it.
const maxClientName = 200

// nameProblem says what is wrong with a client_name, or "" when nothing
// is: the consent page shows it to the User as the Personal Agent's or
// MCP client's name, so it is at most 200 bytes of text on one line, and
// holds nothing that makes it read otherwise than it is
// (httpx.Disguising: "Trojan Source" reordering, invisible characters).
func nameProblem(name string) string {
	if !utf8.ValidString(name) || len(name) > maxClientName ||
		strings.ContainsFunc(name, func(r rune) bool { return r < 0x20 || r >= 0x7f && r <= 0x9f }) {
		return "must be at most 200 bytes of text on one line"
	}
	return httpx.DisguiseProblem(name)
}

// registrationDoc is the RFC 7591 §2 metadata we read; other members are
// ignored (§3.1: the server may ignore what it does not understand).
type registrationDoc struct {
	RedirectURIs  []string `json:"redirect_uris"`
	AuthMethod    *string  `json:"token_endpoint_auth_method"`
	GrantTypes    []string `json:"grant_types"`
	ResponseTypes []string `json:"response_types"`
	ClientName    string   `json:"client_name"`
	ClientURI     string   `json:"client_uri"`
	LogoURI       string   `json:"logo_uri"`
}

// RegistrationError is a refused registration, with RFC 7591 §3.2.2's
// error code: invalid_redirect_uri or invalid_client_metadata.
type RegistrationError struct{ Code, Description string }

func (e *RegistrationError) Error() string { return e.Code + ": " + e.Description }

func badMetadata(desc string) error {
	return &RegistrationError{Code: "invalid_client_metadata", Description: desc}
}

// ParseRegistration validates a registration request's metadata and
// returns the public client it describes, without a ClientID: the issuer
// assigns one. A client registers only as a public client
// (token_endpoint_auth_method none) for the authorization code and
// refresh grants.
func ParseRegistration(body []byte) (*Client, error) {
	var doc registrationDoc
	if len(body) > MaxRegistrationBytes {
		return nil, badMetadata("the metadata is larger than 8 KiB")
	}
	if err := json.Unmarshal(body, &doc); err != nil {
		return nil, badMetadata("the metadata is not a JSON object of the expected shape (RFC 7591 §2)")
	}
	if doc.AuthMethod != nil && *doc.AuthMethod != "none" {
		return nil, badMetadata("only public clients register here: token_endpoint_auth_method must be none")
	}
	for _, g := range doc.GrantTypes {
		if g != "authorization_code" && g != "refresh_token" {
			return nil, badMetadata("grant_types may hold authorization_code and refresh_token only")
		}
	}
	if len(doc.GrantTypes) > 0 && !slices.Contains(doc.GrantTypes, "authorization_code") {
		return nil, badMetadata("grant_types must include authorization_code")
	}
	for _, r := range doc.ResponseTypes {
		if r != "code" {
			return nil, badMetadata("response_types may hold code only")
		}
	}
	if msg := nameProblem(doc.ClientName); msg != "" {
		return nil, badMetadata("client_name " + msg)
	}
	if len(doc.RedirectURIs) == 0 || len(doc.RedirectURIs) > maxRedirectURIs {
		return nil, &RegistrationError{Code: "invalid_redirect_uri", Description: "redirect_uris needs 1 to 20 URIs"}
	}
	c := &Client{Name: doc.ClientName, ClientURI: httpsOnly(doc.ClientURI), LogoURI: httpsOnly(doc.LogoURI),
		Extensions: map[string]string{}, Public: true}
	for _, r := range doc.RedirectURIs {
		if err := publicRedirect(nil, r); err != nil {
			return nil, &RegistrationError{Code: "invalid_redirect_uri", Description: err.Error()}
		}
		c.RedirectURIs = append(c.RedirectURIs, r)
	}
	return c, nil
}
