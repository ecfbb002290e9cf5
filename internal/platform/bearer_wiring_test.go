package platform_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/stretchr/testify/require"
	"golang.org/x/oauth2"

	"github.com/poppyhost/poppyhost/internal/agentid"
	"github.com/poppyhost/poppyhost/internal/bearer"
	"github.com/poppyhost/poppyhost/internal/dpop"
	"github.com/poppyhost/poppyhost/internal/dpop/dpoptest"
	"github.com/poppyhost/poppyhost/internal/httpx"
	"github.com/poppyhost/poppyhost/internal/issuer"
	"github.com/poppyhost/poppyhost/internal/safehttp"
	"github.com/poppyhost/poppyhost/internal/sessions"
	"github.com/poppyhost/poppyhost/internal/signing"
	"github.com/poppyhost/poppyhost/internal/tenant"
	"github.com/poppyhost/poppyhost/internal/testkit"
	"github.com/poppyhost/poppyhost/internal/testkit/peers"
	"github.com/poppyhost/poppyhost/internal/testkit/testdb"
)

// The bearer package's Validator with tokens the issuer grants through
// sign-in and revokes (spec 4.5, 4.6, 5.3, 5.4, 5.5): a flow across the
// issuer, the Session middleware and the Validator. The Validator's rules
// are tested in internal/bearer.

// bearerPassword is every test account's password.
const bearerPassword = "correct horse battery staple"

// bearerRig is a running platform with the Company stormline (accounts
// ada and bob, three scopes), the Company harbor, a test Personal Agent,
// and resource routes behind sessions.Manager.Require and Validator.Require:
//
//	GET /t/{slug}/browse        default resource, no scope
//	GET /t/{slug}/orders        default resource, orders:read
//	GET /t/{slug}/orders/edit   default resource, orders:write
//	GET /t/{slug}/mcp           the Company's MCP resource, orders:read
type bearerRig struct {
	env    *testkit.Env
	agent  *peers.Agent
	issuer string
	routes http.Handler
	mgr    *sessions.Manager
	skew   atomic.Int64 // added to the Validator's clock
}

func setupBearerRig(t *testing.T) *bearerRig {
	t.Helper()
	env := testkit.Setup(t)
	scopes := map[string]any{"orders:read": "See your orders", "orders:write": "Change your orders", "addresses": "Your addresses"}
	for _, slug := range []string{"stormline", "harbor"} {
		env.CreateCompany(t, map[string]any{
			"slug":         slug,
			"organization": map[string]any{"name": slug, "domain": slug + ".test"},
			"auth":         map[string]any{"scopes": scopes},
		})
	}
	for _, user := range []string{"ada", "bob"} {
		resp := env.Admin(t, http.MethodPost, "/admin/v1/companies/stormline/accounts",
			map[string]any{"username": user, "password": bearerPassword})
		require.Equal(t, http.StatusCreated, resp.Status, "%s", resp.Body)
	}
	g := &bearerRig{env: env, agent: env.StartAgent(t, "agent.test"), issuer: env.PublicURL("/t/stormline")}

	resolver := agentid.NewResolver(safehttp.New(safehttp.Options{AllowPrivate: true, RootCAs: env.CA.Pool(),
		Resolver: env.Hosts}), agentid.Options{})
	store := sessions.NewStore(env.Pool)
	mgr := sessions.NewManager(sessions.NewVerifier(resolver, sessions.VerifierOptions{}), store, env.URLs)
	v := bearer.New(signing.NewKeys(env.Pool, testdb.Sealer(env.Pool), signing.Options{}), issuer.NewStore(env.Pool), store,
		dpop.New(dpop.NewStore(env.Pool), dpop.Options{}), env.URLs,
		func() time.Time { return time.Now().Add(time.Duration(g.skew.Load())) })
	g.mgr = mgr
	g.routes = g.routesWith(v)
	return g
}

// routesWith serves the rig's resource routes with the Validator v.
func (g *bearerRig) routesWith(v *bearer.Validator) http.Handler {
	limits := httpx.NewLimiter()
	show := func(w http.ResponseWriter, r *http.Request) {
		httpx.WriteJSON(w, http.StatusOK, map[string]any{"grant": bearer.FromContext(r.Context())})
	}
	mcp := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			res := bearer.Resource{ID: g.env.URLs.MCPResource(tenant.FromContext(r.Context()))}
			v.Require(res, "orders:read")(next).ServeHTTP(w, r)
		})
	}
	r := chi.NewRouter()
	r.Route("/t/{slug}", func(r chi.Router) {
		r.Use(tenant.BySlug(g.env.Platform.Tenants), g.mgr.Require(limits))
		r.With(v.Require(bearer.Resource{})).Get("/browse", show)
		r.With(v.Require(bearer.Resource{}, "orders:read")).Get("/orders", show)
		r.With(v.Require(bearer.Resource{}, "orders:write")).Get("/orders/edit", show)
		r.With(mcp).Get("/mcp", show)
	})
	return r
}

// signIn has user sign a in at stormline through Direct Sign-In with
// scopes and returns the tokens. resource, when set, asks for a token for
// that service (RFC 8707).
func (g *bearerRig) signIn(t *testing.T, a *peers.Agent, user string, scopes []string, resource string) *oauth2.Token {
	t.Helper()
	return g.env.SignIn(t, a, g.issuer, user, bearerPassword, scopes, resource)
}

// revoke revokes a refresh token at stormline (spec 4.6).
func (g *bearerRig) revoke(t *testing.T, a *peers.Agent, refreshToken string) {
	t.Helper()
	g.env.Revoke(t, a, g.issuer, refreshToken)
}

// call sends GET /t/{slug}{path} signed by a in Session sid, with token
// when not empty.
func (g *bearerRig) call(t *testing.T, a *peers.Agent, slug, path, sid, token string) *httptest.ResponseRecorder {
	t.Helper()
	req := httptest.NewRequest(http.MethodGet, g.env.PublicURL("/t/"+slug+path), nil)
	a.Sign(t, req, peers.SessionClaims{Aud: g.env.PublicURL("/t/" + slug), SID: sid, Sub: "usr_" + sid[:8],
		AccessToken: token}, peers.SessionOptions{})
	w := httptest.NewRecorder()
	g.routes.ServeHTTP(w, req)
	return w
}

// grant is the route's answer: the grant it saw.
type bearerGrant struct {
	Grant *bearer.Grant `json:"grant"`
}

func requireBearerGrant(t *testing.T, w *httptest.ResponseRecorder) *bearer.Grant {
	t.Helper()
	require.Equal(t, http.StatusOK, w.Code, w.Body.String())
	var got bearerGrant
	require.NoError(t, json.Unmarshal(w.Body.Bytes(), &got))
	return got.Grant
}

// requireBearerRefused checks an error answer and returns its WWW-Authenticate.
func requireBearerRefused(t *testing.T, w *httptest.ResponseRecorder, status int, code string) string {
	t.Helper()
	require.Equal(t, status, w.Code, w.Body.String())
	var body struct {
		Error string `json:"error"`
	}
	require.NoError(t, json.Unmarshal(w.Body.Bytes(), &body))
	require.Equal(t, code, body.Error, w.Body.String())
	return w.Header().Get("WWW-Authenticate")
}

func (g *bearerRig) accountID(t *testing.T, user string) int64 {
	t.Helper()
	var id int64
	require.NoError(t, g.env.Pool.QueryRow(context.Background(), `SELECT a.id FROM accounts a
		JOIN companies c ON c.id = a.company_id WHERE c.slug = 'stormline' AND a.username = $1`, user).Scan(&id))
	return id
}

func (g *bearerRig) sessionAccount(t *testing.T, a *peers.Agent, sid string) *int64 {
	t.Helper()
	var id *int64
	require.NoError(t, g.env.Pool.QueryRow(context.Background(), `SELECT s.account_id FROM sessions s
		JOIN companies c ON c.id = s.company_id WHERE c.slug = 'stormline' AND s.client_id = $1 AND s.sid = $2`,
		a.ClientID, sid).Scan(&id))
	return id
}

func TestBearerWithRealTokens(t *testing.T) {
	t.Parallel()
	g := setupBearerRig(t)
	ada := g.signIn(t, g.agent, "ada", []string{"orders:read"}, "")
	domainMeta := "https://stormline.test/.well-known/oauth-protected-resource"
	mcpMeta := g.env.PublicURL("/.well-known/oauth-protected-resource/t/stormline/mcp")

	t.Run("valid token", func(t *testing.T) {
		sid := sessID()
		gr := requireBearerGrant(t, g.call(t, g.agent, "stormline", "/orders", sid, ada.AccessToken))
		require.Equal(t, g.agent.ClientID, gr.ClientID)
		require.Equal(t, g.accountID(t, "ada"), gr.AccountID)
		require.Equal(t, []string{"orders:read"}, gr.Scopes)
		require.Equal(t, []string{"https://stormline.test"}, gr.Audience)
		// Spec 5.4: the Session now acts for ada.
		require.Equal(t, g.accountID(t, "ada"), *g.sessionAccount(t, g.agent, sid))
	})

	t.Run("signed out", func(t *testing.T) {
		sid := sessID()
		require.Nil(t, requireBearerGrant(t, g.call(t, g.agent, "stormline", "/browse", sid, "")))
		require.Nil(t, g.sessionAccount(t, g.agent, sid))
		h := requireBearerRefused(t, g.call(t, g.agent, "stormline", "/orders", sid, ""), http.StatusUnauthorized, "unauthorized")
		require.True(t, strings.HasPrefix(h, `Bearer realm="poppyhost", scope="orders:read"`), h)
		require.NotContains(t, h, "error")
	})

	t.Run("invalid tokens", func(t *testing.T) {
		for name, token := range map[string]string{
			"garbage":      "garbage",
			"JWT-shaped":   "a.b.c",
			"tampered":     ada.AccessToken[:len(ada.AccessToken)-4] + "AAAA",
			"refresh used": ada.RefreshToken,
		} {
			t.Run(name, func(t *testing.T) {
				h := requireBearerRefused(t, g.call(t, g.agent, "stormline", "/orders", sessID(), token), http.StatusUnauthorized, "invalid_token")
				require.Contains(t, h, `error="invalid_token"`)
				require.Contains(t, h, `resource_metadata="`+domainMeta+`"`)
			})
		}
	})

	t.Run("expired", func(t *testing.T) {
		g.skew.Store(int64(issuer.DefaultAccessTokenLifetime + time.Minute))
		defer g.skew.Store(0)
		h := requireBearerRefused(t, g.call(t, g.agent, "stormline", "/orders", sessID(), ada.AccessToken), http.StatusUnauthorized, "invalid_token")
		require.Contains(t, h, `resource_metadata="`+domainMeta+`"`)
	})

	t.Run("insufficient scope", func(t *testing.T) {
		h := requireBearerRefused(t, g.call(t, g.agent, "stormline", "/orders/edit", sessID(), ada.AccessToken), http.StatusForbidden, "insufficient_scope")
		require.Contains(t, h, `error="insufficient_scope"`)
		require.Contains(t, h, `scope="orders:write"`)
	})

	t.Run("tokens for one service", func(t *testing.T) {
		mcpTok := g.signIn(t, g.agent, "ada", []string{"orders:read"}, g.issuer+"/mcp")
		gr := requireBearerGrant(t, g.call(t, g.agent, "stormline", "/mcp", sessID(), mcpTok.AccessToken))
		require.Equal(t, []string{g.issuer + "/mcp"}, gr.Audience)

		// Spec 4.5: each is refused at the other's service, with that
		// service's metadata in the challenge.
		h := requireBearerRefused(t, g.call(t, g.agent, "stormline", "/orders", sessID(), mcpTok.AccessToken), http.StatusUnauthorized, "invalid_token")
		require.Contains(t, h, `resource_metadata="`+domainMeta+`"`)
		h = requireBearerRefused(t, g.call(t, g.agent, "stormline", "/mcp", sessID(), ada.AccessToken), http.StatusUnauthorized, "invalid_token")
		require.Contains(t, h, `resource_metadata="`+mcpMeta+`"`)
		require.Equal(t, "https://"+testkit.PublicHost+":"+g.env.Port+"/.well-known/oauth-protected-resource/t/stormline/mcp", mcpMeta)
	})

	t.Run("another Company", func(t *testing.T) {
		h := requireBearerRefused(t, g.call(t, g.agent, "harbor", "/orders", sessID(), ada.AccessToken), http.StatusUnauthorized, "invalid_token")
		require.Contains(t, h, `resource_metadata="https://harbor.test/.well-known/oauth-protected-resource"`)
	})

	t.Run("another client's token", func(t *testing.T) {
		other := g.env.StartAgent(t, "other-agent.test")
		otherTok := g.signIn(t, other, "ada", []string{"orders:read"}, "")
		require.Equal(t, http.StatusOK, g.call(t, other, "stormline", "/orders", sessID(), otherTok.AccessToken).Code)
		// Spec 5.3 step 3: a token must be the Session's client's.
		sid := sessID()
		requireBearerRefused(t, g.call(t, g.agent, "stormline", "/orders", sid, otherTok.AccessToken), http.StatusBadRequest, "invalid_session")
		// Every check comes before the Session starts (spec 5.3): none did.
		var n int
		require.NoError(t, g.env.Pool.QueryRow(context.Background(), `SELECT count(*) FROM sessions
			WHERE client_id = $1 AND sid = $2`, g.agent.ClientID, sid).Scan(&n))
		require.Zero(t, n)
	})

	t.Run("second account in a Session", func(t *testing.T) {
		bob := g.signIn(t, g.agent, "bob", []string{"orders:read"}, "")
		sid := sessID()
		require.Equal(t, g.accountID(t, "ada"), requireBearerGrant(t, g.call(t, g.agent, "stormline", "/orders", sid, ada.AccessToken)).AccountID)
		// Spec 5.4: session_ended for bob in ada's Session, and no
		// challenge, since bob's token is fine.
		w := g.call(t, g.agent, "stormline", "/orders", sid, bob.AccessToken)
		require.Empty(t, requireBearerRefused(t, w, http.StatusBadRequest, "session_ended"))
		require.Equal(t, http.StatusBadRequest, g.call(t, g.agent, "stormline", "/browse", sid, bob.AccessToken).Code)
		// ada continues, signed in and out.
		require.Equal(t, g.accountID(t, "ada"), requireBearerGrant(t, g.call(t, g.agent, "stormline", "/orders", sid, ada.AccessToken)).AccountID)
		require.Nil(t, requireBearerGrant(t, g.call(t, g.agent, "stormline", "/browse", sid, "")))
		// bob works in his own Session.
		require.Equal(t, g.accountID(t, "bob"), requireBearerGrant(t, g.call(t, g.agent, "stormline", "/orders", sessID(), bob.AccessToken)).AccountID)
	})

	t.Run("first token of a Session that browsed signed out", func(t *testing.T) {
		sid := sessID()
		require.Nil(t, requireBearerGrant(t, g.call(t, g.agent, "stormline", "/browse", sid, "")))
		require.Equal(t, g.accountID(t, "ada"), requireBearerGrant(t, g.call(t, g.agent, "stormline", "/browse", sid, ada.AccessToken)).AccountID)
		require.Equal(t, g.accountID(t, "ada"), *g.sessionAccount(t, g.agent, sid))
	})

	t.Run("DPoP scheme with a token that is not bound", func(t *testing.T) {
		// RFC 9449 §7.1: the DPoP scheme is never a Bearer token without a
		// proof, nor with a proof of a key the token is not bound to.
		key := dpoptest.NewKey()
		url := g.env.PublicURL("/t/stormline/orders")
		for name, proof := range map[string]string{
			"no proof":    "",
			"valid proof": key.Valid(http.MethodGet, url, ada.AccessToken, time.Now()),
		} {
			t.Run(name, func(t *testing.T) {
				req := httptest.NewRequest(http.MethodGet, url, nil)
				g.agent.Sign(t, req, peers.SessionClaims{Aud: g.env.PublicURL("/t/stormline"), SID: sessID(), Sub: "usr_dpop",
					AccessToken: ada.AccessToken}, peers.SessionOptions{})
				req.Header.Set("Authorization", "DPoP "+ada.AccessToken)
				if proof != "" {
					req.Header.Set("DPoP", proof)
				}
				w := httptest.NewRecorder()
				g.routes.ServeHTTP(w, req)
				h := requireBearerRefused(t, w, http.StatusUnauthorized, "invalid_token")
				require.Contains(t, h, `DPoP realm="poppyhost", error="invalid_token"`)
			})
		}
	})

	// Last, since it ends ada's tokens.
	t.Run("revoked", func(t *testing.T) {
		sid := sessID()
		requireBearerGrant(t, g.call(t, g.agent, "stormline", "/orders", sid, ada.AccessToken))
		g.revoke(t, g.agent, ada.RefreshToken)
		h := requireBearerRefused(t, g.call(t, g.agent, "stormline", "/orders", sid, ada.AccessToken), http.StatusUnauthorized, "invalid_token")
		require.Contains(t, h, `resource_metadata="`+domainMeta+`"`)
		// The Session continues signed out (spec 5.5).
		require.Nil(t, requireBearerGrant(t, g.call(t, g.agent, "stormline", "/browse", sid, "")))
	})
}
