package issuer

import (
	"slices"

	"github.com/ory/fosite"

	"github.com/poppyhost/poppyhost/internal/agentid"
	"github.com/poppyhost/poppyhost/internal/tenant"
)

// Client is a Personal Agent as fosite sees it at one Company: its client
// metadata document (spec 4.1) and what the Company lets it ask for; or
// a public MCP client, for the Company's MCP server only (spec 7).
type Client struct {
	ID string
	// Agent is the resolved metadata document; nil for a client rebuilt
	// from storage, which fosite only compares by ID.
	Agent  *agentid.Client
	scopes []string
}

func newClient(a *agentid.Client, c *tenant.Company) *Client {
	scopes := make([]string, 0, len(c.Settings.Auth.Scopes))
	for s := range c.Settings.Auth.Scopes {
		scopes = append(scopes, s)
	}
	slices.Sort(scopes)
	return &Client{ID: a.ClientID, Agent: a, scopes: scopes}
}

// GetID implements fosite.Client.
func (c *Client) GetID() string { return c.ID }

// GetHashedSecret implements fosite.Client: Personal Agents have no
// secret, only keys (private_key_jwt).
func (c *Client) GetHashedSecret() []byte { return nil }

// GetRedirectURIs implements fosite.Client.
func (c *Client) GetRedirectURIs() []string {
	if c.Agent == nil {
		return nil
	}
	return c.Agent.RedirectURIs
}

// GetGrantTypes implements fosite.Client. Which sign-in types a Company
// offers a client is checked by the endpoints, with Poppy's errors; a
// public MCP client has Direct Sign-In only (MCP authorization).
func (c *Client) GetGrantTypes() fosite.Arguments {
	if c.IsPublic() {
		return fosite.Arguments{tenant.GrantAuthorizationCode, tenant.GrantRefreshToken}
	}
	return fosite.Arguments{tenant.GrantAuthorizationCode, tenant.GrantRefreshToken, tenant.GrantDeviceCode}
}

// GetResponseTypes implements fosite.Client.
func (c *Client) GetResponseTypes() fosite.Arguments { return fosite.Arguments{"code"} }

// GetScopes implements fosite.Client: every scope the Company defines.
func (c *Client) GetScopes() fosite.Arguments { return c.scopes }

// IsPublic implements fosite.Client: an MCP client that is not a
// Personal Agent and has no keys (token_endpoint_auth_method none).
func (c *Client) IsPublic() bool { return c.Agent != nil && c.Agent.Public }

// GetAudience implements fosite.Client. Audiences come from resource
// indicators, which this package handles itself, never from fosite's
// audience parameter.
func (c *Client) GetAudience() fosite.Arguments { return nil }
