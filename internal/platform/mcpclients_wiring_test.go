package platform_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/modelcontextprotocol/go-sdk/oauthex"
	"github.com/stretchr/testify/require"
	"golang.org/x/oauth2"

	"github.com/poppyhost/poppyhost/internal/testkit"
	"github.com/poppyhost/poppyhost/internal/testkit/peers"
)

// MCP clients that are not Personal Agents (spec 7, "Other MCP clients"):
// a desktop MCP client, here the go-sdk's own client and its OAuth
// support, finds the issuer from the MCP server's 401, signs in with MCP's
// authorization (a client metadata document, public client, PKCE,
// resource), calls tools with no Session, and refreshes; its tokens work
// at that MCP server and nowhere else.

const mcpClientsPassword = "correct horse battery staple"

// mcpClientsRig is a running platform with the Company deskshop (account
// ada, scope orders:read, a tool orders.lookup needing it and a tool
// catalog.search needing none, an API, conversations and feedback), the
// Company harbor with a tool of its own, a desktop MCP client's metadata
// document on desk.test, and a Personal Agent.
type mcpClientsRig struct {
	env    *testkit.Env
	base   string
	desk   *peers.Agent  // serves the MCP client's metadata document
	agent  *peers.Agent  // a Personal Agent
	origin *peers.Origin // orders.lookup's
	api    *peers.Origin // the API orders'
}

// mcpClientRedirect is the desktop client's loopback redirect URI.
const mcpClientRedirect = "http://127.0.0.1/callback"

func setupMCPClients(t *testing.T) *mcpClientsRig {
	t.Helper()
	env := testkit.Setup(t)
	g := &mcpClientsRig{env: env, base: env.PublicURL("/t/deskshop")}
	for _, slug := range []string{"deskshop", "harbor"} {
		env.CreateCompany(t, map[string]any{
			"slug":          slug,
			"organization":  map[string]any{"name": slug, "domain": slug + ".test"},
			"auth":          map[string]any{"scopes": map[string]any{"orders:read": "See your orders"}},
			"feedback":      map[string]any{"enabled": true},
			"conversations": map[string]any{"agent_webhook": "https://hook." + slug + ".test/events"},
		})
		resp := env.Admin(t, http.MethodPost, "/admin/v1/companies/"+slug+"/accounts",
			map[string]any{"username": "ada", "password": mcpClientsPassword})
		require.Equal(t, http.StatusCreated, resp.Status, "%s", resp.Body)
	}
	// An origin per tool, whose base URL, its Poppy-Verified aud, is the
	// tool's URL; the API's origin is another.
	origin := func(host string, h http.HandlerFunc) *peers.Origin {
		o := env.StartOrigin(t, host, g.base, g.base)
		o.Handle(http.MethodPost, "/", h)
		return o
	}
	answer := func(body string) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(body))
		}
	}
	g.origin = origin("lookup.deskshop.test", answer(`{"order":"o1","status":"shipped"}`))
	search := origin("search.deskshop.test", answer(`{"items":["jacket"]}`))
	g.api = env.StartOrigin(t, "api.deskshop.test", g.base, g.base)
	g.api.Handle(http.MethodGet, "/v1/orders", answer(`[]`))
	tool := func(slug, name, url string, scopes []string) {
		t.Helper()
		resp := env.Admin(t, http.MethodPut, "/admin/v1/companies/"+slug+"/tools/"+name, map[string]any{
			"description": "A tool.", "input_schema": map[string]any{"type": "object"},
			"url": url, "scopes": scopes})
		require.Equal(t, http.StatusCreated, resp.Status, "%s", resp.Body)
	}
	tool("deskshop", "orders.lookup", g.origin.BaseURL(), []string{"orders:read"})
	tool("deskshop", "catalog.search", search.BaseURL(), []string{})
	tool("harbor", "orders.lookup", "https://tools.harbor.test/lookup", []string{"orders:read"})
	resp := env.Admin(t, http.MethodPut, "/admin/v1/companies/deskshop/apis/orders", map[string]any{
		"origin": g.api.URL("/v1"), "openapi": map[string]any{"openapi": "3.1.0",
			"info":  map[string]any{"title": "Orders", "version": "1"},
			"paths": map[string]any{"/orders": map[string]any{"get": map[string]any{"responses": map[string]any{"200": map[string]any{"description": "ok"}}}}}}})
	require.Equal(t, http.StatusCreated, resp.Status, "%s", resp.Body)

	g.desk = env.StartAgent(t, "desk.test")
	g.desk.SetMetadata(map[string]any{
		"client_id":                  g.desk.ClientID,
		"client_name":                "Desk Assistant",
		"client_uri":                 g.desk.URL("/"),
		"redirect_uris":              []string{mcpClientRedirect},
		"grant_types":                []string{"authorization_code", "refresh_token"},
		"response_types":             []string{"code"},
		"token_endpoint_auth_method": "none",
	})
	g.agent = env.StartAgent(t, "agent.test")
	return g
}

// signInPage plays the User in the browser: it opens the authorization
// URL, signs ada in, checks the consent page marks a client that is not a
// Personal Agent, approves, and returns the redirect's query.
func (g *mcpClientsRig) signInPage(t *testing.T, authURL string) url.Values {
	t.Helper()
	b := g.env.Browser(t)
	page := b.Get(authURL)
	require.Equal(t, http.StatusOK, page.Status, page.Body)
	page = b.Submit(page, "login", map[string][]string{"username": {"ada"}, "password": {mcpClientsPassword}})
	require.Equal(t, http.StatusOK, page.Status, page.Body)
	require.Contains(t, page.Body, "This is not a Personal Agent")
	require.Contains(t, page.Body, "Desk Assistant")
	require.Contains(t, page.Body, `href="`+g.desk.URL("/")+`"`)
	page = b.Submit(page, "approve", nil)
	require.Equal(t, http.StatusSeeOther, page.Status, page.Body)
	back, err := url.Parse(page.Location())
	require.NoError(t, err)
	require.Equal(t, "127.0.0.1", back.Host)
	return back.Query()
}

// TestMCPClientGoSDK drives the go-sdk's MCP client with its OAuth
// support through the whole flow against the hosted MCP server.
func TestMCPClientGoSDK(t *testing.T) {
	t.Parallel()
	g := setupMCPClients(t)
	ctx := context.Background()
	var (
		conf  *oauth2.Config
		first *oauth2.Token
	)
	h, err := auth.NewAuthorizationCodeHandler(&auth.AuthorizationCodeHandlerConfig{
		ClientIDMetadataDocumentConfig: &auth.ClientIDMetadataDocumentConfig{URL: g.desk.ClientID},
		RedirectURL:                    mcpClientRedirect,
		Client:                         g.env.Client,
		AuthorizationCodeFetcher: func(_ context.Context, args *auth.AuthorizationArgs) (*auth.AuthorizationResult, error) {
			u, err := url.Parse(args.URL)
			require.NoError(t, err)
			q := u.Query()
			require.Equal(t, g.desk.ClientID, q.Get("client_id"))
			require.Equal(t, "S256", q.Get("code_challenge_method"))
			require.Equal(t, g.base+"/mcp", q.Get("resource"))
			back := g.signInPage(t, args.URL)
			return &auth.AuthorizationResult{Code: back.Get("code"), State: back.Get("state"), Iss: back.Get("iss")}, nil
		},
		NewTokenSource: func(ctx context.Context, c *oauth2.Config, tok *oauth2.Token) (oauth2.TokenSource, error) {
			conf, first = c, tok
			return c.TokenSource(ctx, tok), nil
		},
	})
	require.NoError(t, err)
	client := mcp.NewClient(&mcp.Implementation{Name: "desk", Version: "1"}, nil)
	cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: g.base + "/mcp", HTTPClient: g.env.Client,
		OAuthHandler: h, DisableStandaloneSSE: true}, nil)
	require.NoError(t, err)
	defer cs.Close()
	require.NotNil(t, first, "the client signed in")
	require.NotEmpty(t, first.RefreshToken)

	tools, err := cs.ListTools(ctx, nil)
	require.NoError(t, err)
	var names []string
	for _, tl := range tools.Tools {
		names = append(names, tl.Name)
	}
	require.ElementsMatch(t, []string{"orders.lookup", "catalog.search"}, names)
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "orders.lookup", Arguments: map[string]any{"id": "o1"}})
	require.NoError(t, err)
	got := g.origin.Last()
	require.False(t, res.IsError, "%s %v", toolText(res), got.VerifyErr)
	require.NotNil(t, got.Claims, "%v", got.VerifyErr)
	require.Equal(t, "/", got.Path)
	require.Equal(t, "orders.lookup", got.Claims.Tool)
	// Poppy-Verified names the client and the account, and no Session.
	require.Equal(t, g.desk.ClientID, got.Claims.ClientID)
	require.Empty(t, got.Claims.SID)
	require.Empty(t, got.Claims.UserID)
	require.Equal(t, strconv.FormatInt(g.accountID(t, "deskshop"), 10), got.Claims.Account)
	require.Equal(t, []string{"orders:read"}, got.Claims.Scopes)

	// Refresh, as the SDK's token source does once the token expires:
	// the refresh token rotates, the old one is spent.
	refreshed, err := conf.TokenSource(context.WithValue(ctx, oauth2.HTTPClient, g.env.Client),
		&oauth2.Token{RefreshToken: first.RefreshToken, Expiry: time.Now().Add(-time.Minute)}).Token()
	require.NoError(t, err)
	require.NotEqual(t, first.RefreshToken, refreshed.RefreshToken)
	require.NotEqual(t, first.AccessToken, refreshed.AccessToken)
	// The refreshed token serves a new connection of the same client.
	again, err := auth.NewAuthorizationCodeHandler(&auth.AuthorizationCodeHandlerConfig{
		ClientIDMetadataDocumentConfig: &auth.ClientIDMetadataDocumentConfig{URL: g.desk.ClientID},
		RedirectURL:                    mcpClientRedirect, Client: g.env.Client,
		InitialTokenSource: oauth2.StaticTokenSource(refreshed),
		AuthorizationCodeFetcher: func(context.Context, *auth.AuthorizationArgs) (*auth.AuthorizationResult, error) {
			t.Error("a valid token needs no sign-in")
			return nil, context.Canceled
		},
	})
	require.NoError(t, err)
	cs2, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: g.base + "/mcp", HTTPClient: g.env.Client,
		OAuthHandler: again, DisableStandaloneSSE: true}, nil)
	require.NoError(t, err)
	defer cs2.Close()
	res, err = cs2.CallTool(ctx, &mcp.CallToolParams{Name: "catalog.search", Arguments: map[string]any{}})
	require.NoError(t, err)
	require.False(t, res.IsError, "%s", toolText(res))

	// Spending a refresh token twice ends its grant (RFC 9700 §4.14.2).
	_, err = conf.TokenSource(context.WithValue(ctx, oauth2.HTTPClient, g.env.Client),
		&oauth2.Token{RefreshToken: first.RefreshToken, Expiry: time.Now().Add(-time.Minute)}).Token()
	require.ErrorContains(t, err, "invalid_grant")

	status, _ := g.mcpCall(t, "deskshop", refreshed.AccessToken)
	require.Equal(t, http.StatusUnauthorized, status, "a reused refresh token revokes the grant")
}

func (g *mcpClientsRig) accountID(t *testing.T, slug string) int64 {
	t.Helper()
	var id int64
	require.NoError(t, g.env.Pool.QueryRow(context.Background(), `SELECT a.id FROM accounts a
		JOIN companies c ON c.id = a.company_id WHERE c.slug = $1 AND a.username = 'ada'`, slug).Scan(&id))
	return id
}

// mcpCall sends tools/list to slug's MCP server with token and no Session,
// and returns the status and WWW-Authenticate.
func (g *mcpClientsRig) mcpCall(t *testing.T, slug, token string) (int, string) {
	t.Helper()
	resp := g.env.Do(t, http.MethodPost, g.env.PublicURL("/t/"+slug+"/mcp"),
		`{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{}}`,
		"Content-Type", "application/json", "Accept", "application/json, text/event-stream",
		"MCP-Protocol-Version", "2025-06-18", "Authorization", "Bearer "+token)
	return resp.Status, resp.Header.Get("WWW-Authenticate")
}

// mcpClientToken signs ada in at deskshop as the desktop client, by hand,
// and returns its tokens.
func (g *mcpClientsRig) mcpClientToken(t *testing.T) *oauth2.Token {
	t.Helper()
	conf := &oauth2.Config{ClientID: g.desk.ClientID, RedirectURL: mcpClientRedirect, Scopes: []string{"orders:read"},
		Endpoint: oauth2.Endpoint{AuthURL: g.base + "/oauth/authorize", TokenURL: g.base + "/oauth/token",
			AuthStyle: oauth2.AuthStyleInParams}}
	verifier := oauth2.GenerateVerifier()
	resource := oauth2.SetAuthURLParam("resource", g.base+"/mcp")
	back := g.signInPage(t, conf.AuthCodeURL("st4te", oauth2.S256ChallengeOption(verifier), resource))
	tok, err := conf.Exchange(context.WithValue(context.Background(), oauth2.HTTPClient, g.env.Client),
		back.Get("code"), oauth2.VerifierOption(verifier), resource)
	require.NoError(t, err)
	return tok
}

// TestMCPClientTokensRefusedElsewhere: a token issued to an MCP client
// works at the MCP server it was issued for and is refused at every other
// resource (spec 7: "The Company MUST reject it elsewhere"), even sent
// with a Personal Agent's valid Session.
func TestMCPClientTokensRefusedElsewhere(t *testing.T) {
	t.Parallel()
	g := setupMCPClients(t)
	tok := g.mcpClientToken(t)
	status, _ := g.mcpCall(t, "deskshop", tok.AccessToken)
	require.Equal(t, http.StatusOK, status)

	refused := func(t *testing.T, method, path, body string) {
		t.Helper()
		req := peers.NewRequest(t, method, g.base+path, body)
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		sid := sessID()
		g.agent.Sign(t, req, peers.SessionClaims{Aud: g.base, SID: sid, Sub: "usr_" + sid[:8], AccessToken: tok.AccessToken},
			peers.SessionOptions{})
		resp := peers.Send(t, g.env.Client, req)
		require.Equal(t, http.StatusUnauthorized, resp.Status, "%s", resp.Body)
		require.Equal(t, "invalid_token", resp.JSON(t)["error"], "%s", resp.Body)
		require.Contains(t, resp.Header.Get("WWW-Authenticate"), `error="invalid_token"`)
	}
	calls := g.api.Calls(http.MethodGet, "/v1/orders")
	t.Run("gateway API", func(t *testing.T) { refused(t, http.MethodGet, "/api/orders/orders", "") })
	require.Equal(t, calls, g.api.Calls(http.MethodGet, "/v1/orders"), "nothing reached the origin")
	t.Run("conversations", func(t *testing.T) {
		refused(t, http.MethodPost, "/poppy/conversations/", `{"message":{"text":"hello"}}`)
	})
	t.Run("feedback", func(t *testing.T) {
		refused(t, http.MethodPost, "/poppy/feedback", `{"type":"task_failed","summary":"x"}`)
	})
	t.Run("another Company's MCP server", func(t *testing.T) {
		status, challenge := g.mcpCall(t, "harbor", tok.AccessToken)
		require.Equal(t, http.StatusUnauthorized, status)
		require.Contains(t, challenge, `error="invalid_token"`)
	})
	t.Run("the MCP server, in a Personal Agent's Session", func(t *testing.T) {
		// A client presenting the Session header is a Personal Agent, and
		// spec 5.3 wants the token issued to the Session's client_id.
		req := peers.NewRequest(t, http.MethodPost, g.base+"/mcp", `{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{}}`)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("MCP-Protocol-Version", "2025-06-18")
		sid := sessID()
		g.agent.Sign(t, req, peers.SessionClaims{Aud: g.base, SID: sid, Sub: "usr_" + sid[:8], AccessToken: tok.AccessToken},
			peers.SessionOptions{})
		resp := peers.Send(t, g.env.Client, req)
		require.Equal(t, http.StatusBadRequest, resp.Status, "%s", resp.Body)
		require.Equal(t, "invalid_session", resp.JSON(t)["error"], "%s", resp.Body)
	})
	t.Run("refresh for another resource", func(t *testing.T) {
		for _, resource := range []string{"https://deskshop.test", g.env.PublicURL("/t/harbor/mcp")} {
			form := url.Values{"grant_type": {"refresh_token"}, "refresh_token": {tok.RefreshToken},
				"client_id": {g.desk.ClientID}, "resource": {resource}}
			resp := g.env.Do(t, http.MethodPost, g.base+"/oauth/token", form.Encode(),
				"Content-Type", "application/x-www-form-urlencoded")
			require.Equal(t, http.StatusBadRequest, resp.Status, "%s", resp.Body)
			require.Equal(t, "invalid_target", resp.JSON(t)["error"])
		}
	})
	t.Run("its audience is the MCP server only", func(t *testing.T) {
		var claims struct {
			Aud []string `json:"aud"`
		}
		parts := strings.Split(tok.AccessToken, ".")
		require.Len(t, parts, 3)
		raw, err := base64.RawURLEncoding.DecodeString(parts[1])
		require.NoError(t, err)
		require.NoError(t, json.Unmarshal(raw, &claims))
		require.Equal(t, []string{g.base + "/mcp"}, claims.Aud)
	})
	// The account page lists the client, marked, and disconnects it.
	b := g.env.Browser(t)
	page := b.Get(g.base + "/account")
	page = b.Submit(page, "login", map[string][]string{"username": {"ada"}, "password": {mcpClientsPassword}})
	require.Equal(t, http.StatusOK, page.Status, page.Body)
	require.Contains(t, page.Body, "Desk Assistant")
	require.Contains(t, page.Body, "Not a Personal Agent")
	page = b.Submit(page, "disconnect", map[string][]string{"client_id": {g.desk.ClientID}})
	require.Equal(t, http.StatusOK, page.Status, page.Body)
	require.Contains(t, page.Body, "Desk Assistant was disconnected")
	status, _ = g.mcpCall(t, "deskshop", tok.AccessToken)
	require.Equal(t, http.StatusUnauthorized, status, "a disconnected client's token stops working")

}

// toolText is a tool result's text, for failure messages.
func toolText(res *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

// TestMCPClientMetadata: the issuer's metadata offers public clients
// (token_endpoint_auth_method none) only while the Company has an MCP
// server and accepts them; the server's metadata names the issuer.
func TestMCPClientMetadata(t *testing.T) {
	t.Parallel()
	g := setupMCPClients(t)
	g.env.CreateCompany(t, map[string]any{"slug": "notools",
		"organization": map[string]any{"name": "No Tools", "domain": "notools.test"}})
	methods := func(slug string) []any {
		t.Helper()
		resp := g.env.Do(t, http.MethodGet, g.env.PublicURL("/.well-known/oauth-authorization-server/t/"+slug), nil)
		require.Equal(t, http.StatusOK, resp.Status, "%s", resp.Body)
		m := resp.JSON(t)
		require.Equal(t, true, m["client_id_metadata_document_supported"])
		require.Equal(t, []any{"S256"}, m["code_challenge_methods_supported"])
		if slug == "notools" {
			require.NotContains(t, m, "registration_endpoint")
		}
		return m["token_endpoint_auth_methods_supported"].([]any)
	}
	require.Equal(t, []any{"private_key_jwt", "none"}, methods("deskshop"))
	require.Equal(t, []any{"private_key_jwt"}, methods("notools"))
	// Dynamic Client Registration, where the Company turns it on.
	resp := g.env.Admin(t, http.MethodPatch, "/admin/v1/companies/deskshop", map[string]any{"mcp": map[string]any{"dynamic_registration": true}})
	require.Equal(t, http.StatusOK, resp.Status, "%s", resp.Body)
	as := g.env.Do(t, http.MethodGet, g.env.PublicURL("/.well-known/oauth-authorization-server/t/deskshop"), nil).JSON(t)
	require.Equal(t, g.base+"/oauth/register", as["registration_endpoint"])
	resp = g.env.Admin(t, http.MethodPatch, "/admin/v1/companies/deskshop", map[string]any{"mcp": map[string]any{"other_clients": false}})
	require.Equal(t, http.StatusOK, resp.Status, "%s", resp.Body)
	require.Equal(t, []any{"private_key_jwt"}, methods("deskshop"))
	as = g.env.Do(t, http.MethodGet, g.env.PublicURL("/.well-known/oauth-authorization-server/t/deskshop"), nil).JSON(t)
	require.NotContains(t, as, "registration_endpoint", "registration needs other_clients")

	prm := g.env.Do(t, http.MethodGet, g.env.PublicURL("/.well-known/oauth-protected-resource/t/deskshop/mcp"), nil)
	require.Equal(t, http.StatusOK, prm.Status, "%s", prm.Body)
	require.Equal(t, g.base+"/mcp", prm.JSON(t)["resource"])
	require.Equal(t, []any{g.base}, prm.JSON(t)["authorization_servers"])
}

// TestMCPClientGoSDKRegistered: a client without a client metadata
// document registers itself (RFC 7591) where the Company allows it, and
// then signs in and calls tools as any MCP client does.
func TestMCPClientGoSDKRegistered(t *testing.T) {
	t.Parallel()
	g := setupMCPClients(t)
	resp := g.env.Admin(t, http.MethodPatch, "/admin/v1/companies/deskshop", map[string]any{"mcp": map[string]any{"dynamic_registration": true}})
	require.Equal(t, http.StatusOK, resp.Status, "%s", resp.Body)
	ctx := context.Background()
	var clientID string
	h, err := auth.NewAuthorizationCodeHandler(&auth.AuthorizationCodeHandlerConfig{
		DynamicClientRegistrationConfig: &auth.DynamicClientRegistrationConfig{Metadata: &oauthex.ClientRegistrationMetadata{
			RedirectURIs: []string{mcpClientRedirect}, ClientName: "Desk Assistant", ClientURI: g.desk.URL("/"),
			TokenEndpointAuthMethod: "none", GrantTypes: []string{"authorization_code", "refresh_token"},
		}},
		Client: g.env.Client,
		AuthorizationCodeFetcher: func(_ context.Context, args *auth.AuthorizationArgs) (*auth.AuthorizationResult, error) {
			u, err := url.Parse(args.URL)
			require.NoError(t, err)
			clientID = u.Query().Get("client_id")
			back := g.signInPage(t, args.URL)
			return &auth.AuthorizationResult{Code: back.Get("code"), State: back.Get("state"), Iss: back.Get("iss")}, nil
		},
	})
	require.NoError(t, err)
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "desk", Version: "1"}, nil).Connect(ctx,
		&mcp.StreamableClientTransport{Endpoint: g.base + "/mcp", HTTPClient: g.env.Client, OAuthHandler: h, DisableStandaloneSSE: true}, nil)
	require.NoError(t, err)
	defer cs.Close()
	require.True(t, strings.HasPrefix(clientID, "mcpc_"), clientID)
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "orders.lookup", Arguments: map[string]any{"id": "o1"}})
	require.NoError(t, err)
	require.False(t, res.IsError, "%s", toolText(res))
	got := g.origin.Last()
	require.NotNil(t, got.Claims, "%v", got.VerifyErr)
	require.Equal(t, clientID, got.Claims.ClientID)
	require.Empty(t, got.Claims.SID)
}
