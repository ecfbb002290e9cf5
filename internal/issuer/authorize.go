package issuer

import (
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strings"

	"github.com/ory/fosite"

	"github.com/poppyhost/poppyhost/internal/accounts"
	"github.com/poppyhost/poppyhost/internal/agentid"
	"github.com/poppyhost/poppyhost/internal/issuer/pages"
	"github.com/poppyhost/poppyhost/internal/tenant"
)

// authorizeParams may each appear once (RFC 6749 §3.1). resource may be
// repeated under RFC 8707 §2, but a Poppy token is for one service (spec
// 4.5), so a second one is refused too.
var authorizeParams = []string{"response_type", "client_id", "redirect_uri", "scope", "state",
	"code_challenge", "code_challenge_method", "resource", "response_mode"}

// authorize is Direct Sign-In's authorization endpoint (spec 4.2). The
// authorization request always travels in the URL: the login and consent
// forms post back to the same URL, with only their own fields in the body,
// and the request is validated again on each step.
//
// Problems with client_id or redirect_uri are shown to the User and never
// redirected (RFC 6749 §4.1.2.1); once both are known to be the agent's,
// every other error goes back to redirect_uri with iss (RFC 9207), before
// any login page, and nothing is stored.
func (s *Server) authorize(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	c := tenant.FromContext(ctx)
	if !s.pageMethod(w, r) {
		return
	}
	if r.Method == http.MethodPost && !s.parsePageForm(w, r) {
		return
	}
	q := r.URL.Query()

	for _, p := range []string{"client_id", "redirect_uri"} {
		if len(q[p]) != 1 || q.Get(p) == "" {
			s.messagePage(w, r, http.StatusBadRequest, "This sign-in link is not valid",
				p+" is required, once (spec 4.2). Go back to your agent and start again.")
			return
		}
	}
	agent, err := s.resolveAgent(ctx, q.Get("client_id"))
	if err != nil {
		s.oauthErrorPage(w, r, err)
		return
	}
	redirect, ok := matchRedirect(agent.RedirectURIs, q.Get("redirect_uri"))
	if !ok {
		s.messagePage(w, r, http.StatusBadRequest, "This sign-in link is not valid",
			"redirect_uri is not one of the agent's redirect_uris (spec 4.2). Go back to your agent and start again.")
		return
	}
	fail := func(err error) { s.authorizeError(w, r, redirect, q.Get("state"), err) }
	if err := s.checkAuthorize(c, agent, q); err != nil {
		fail(err)
		return
	}

	// fosite sees the URL's parameters only, without the form's fields.
	// response_mode is left out: checkAuthorize allowed only query, the
	// default for code, which fosite refuses when named (its clients must
	// list their response modes).
	fr := r.Clone(ctx)
	fr.Method, fr.Body, fr.ContentLength = http.MethodGet, http.NoBody, 0
	fr.Form, fr.PostForm, fr.MultipartForm = nil, nil, nil
	fr.Header = fr.Header.Clone()
	fr.Header.Del("Content-Type")
	fq := fr.URL.Query()
	fq.Del("response_mode")
	fr.URL.RawQuery = fq.Encode()
	ar, err := s.provider.NewAuthorizeRequest(ctx, fr)
	if err != nil && q.Get("state") == "" && errors.Is(err, fosite.ErrInvalidState) {
		// state is optional (RFC 6749 §4.1.1): PKCE, required above,
		// protects the redirect (RFC 9700 §2.1). fosite always wants
		// one and checks it last, once the request is otherwise valid.
		err = nil
	}
	if err != nil {
		if errors.Is(err, fosite.ErrInvalidClient) {
			s.oauthErrorPage(w, r, err)
			return
		}
		fail(err)
		return
	}

	action := ""
	if r.Method == http.MethodPost {
		action = r.PostForm.Get("action")
	}
	acct, action, ok := s.signedIn(w, r, action, "Sign in to "+c.Settings.Organization.Name+" to continue connecting "+agentName(agent)+".")
	if !ok {
		return
	}
	switch action {
	case "deny":
		fail(fosite.ErrAccessDenied.WithHint("The User declined the request."))
	case "approve":
		granted := approvedScopes(r.PostForm["scope"], ar.GetRequestedScopes())
		if len(granted) == 0 && len(ar.GetRequestedScopes()) > 0 {
			// Approving none is a decline (spec 4.7).
			fail(fosite.ErrAccessDenied.WithHint("The User approved no scope."))
			return
		}
		for _, g := range granted {
			ar.GrantScope(g)
		}
		sess := &Session{AccountID: acct.ID, Username: acct.Username, Resource: q.Get("resource")}
		resp, err := s.provider.NewAuthorizeResponse(ctx, ar, sess)
		if err != nil {
			fail(err)
			return
		}
		if ar.GetState() == "" {
			// No state in the request, none in the response (RFC 6749
			// §4.1.2); fosite adds an empty one.
			resp.GetParameters().Del("state")
		}
		resp.AddParameter("iss", s.urls.Issuer(c))
		pages.SetHeaders(w.Header())
		s.provider.WriteAuthorizeResponse(ctx, w, ar, resp)
	default:
		s.consentPage(w, r, acct, agent, ar.GetRequestedScopes(), "", "")
	}
}

// matchRedirect applies spec 4.2 to a requested redirect_uri: exactly one
// of the agent's redirect_uris, compared as strings, or a loopback one
// (http with a loopback IP literal) on another port (RFC 8252 §7.3). It
// is stricter than fosite's matcher, which runs after it.
func matchRedirect(registered []string, requested string) (*url.URL, bool) {
	u, err := url.Parse(requested)
	if err != nil || !u.IsAbs() || u.User != nil || strings.Contains(requested, "#") {
		return nil, false
	}
	for _, reg := range registered {
		// A registered URI was checked when it was registered: a Personal
		// Agent's is https, a public client's may also be a private-use
		// scheme with no host (RFC 8252 §7.1).
		if reg == requested {
			return u, true
		}
		ru, err := url.Parse(reg)
		if err == nil && loopbackRedirect(ru) && loopbackRedirect(u) && ru.User == nil &&
			ru.Hostname() == u.Hostname() && ru.EscapedPath() == u.EscapedPath() &&
			ru.RawQuery == u.RawQuery && ru.ForceQuery == u.ForceQuery {
			return u, true
		}
	}
	return nil, false
}

// loopbackRedirect reports whether u is http on a loopback IP literal
// (RFC 8252 §7.3; "localhost" is not one).
func loopbackRedirect(u *url.URL) bool {
	if u.Scheme != "http" {
		return false
	}
	ip, err := netip.ParseAddr(u.Hostname())
	return err == nil && ip.IsLoopback()
}

// checkAuthorize applies Poppy's rules that fosite does not, or applies
// only after login or with non-standard errors, so a bad request never
// reaches the User.
func (s *Server) checkAuthorize(c *tenant.Company, agent *agentid.Client, q url.Values) error {
	for _, p := range authorizeParams {
		if len(q[p]) > 1 {
			return fosite.ErrInvalidRequest.WithHintf("%s must not be repeated (RFC 6749 §3.1).", p)
		}
	}
	switch {
	case !c.Settings.Agents.SignInAllowed(agent.ClientID, tenant.GrantAuthorizationCode):
		return fosite.ErrUnauthorizedClient.WithHint("This Company does not offer this Personal Agent Direct Sign-In.")
	case q.Get("response_mode") != "" && q.Get("response_mode") != "query":
		return fosite.ErrInvalidRequest.WithHint("Only response_mode=query is supported.")
	case q.Get("code_challenge") == "":
		return fosite.ErrInvalidRequest.WithHint("code_challenge is required: PKCE with S256 (spec 4.2).")
	case q.Get("code_challenge_method") != "S256":
		return fosite.ErrInvalidRequest.WithHint("code_challenge_method must be S256 (spec 4.2).")
	case !s256Challenge(q.Get("code_challenge")):
		return fosite.ErrInvalidRequest.WithHint("code_challenge must be the base64url SHA-256 of the verifier, 43 characters (RFC 7636 §4.2).")
	case len(strings.Fields(q.Get("scope"))) == 0 && !agent.Public:
		// An MCP client asks for no scope when the server's metadata
		// lists none (MCP authorization); a Personal Agent always asks.
		return fosite.ErrInvalidScope.WithHint("scope is required (spec 4.7).")
	}
	if _, err := audience(c, s.urls, q.Get("resource")); err != nil {
		return err
	}
	if agent.Public && q.Get("resource") != s.urls.MCPResource(c) {
		// MCP authorization: a client that is not a Personal Agent signs
		// in for the MCP server only, and says so (RFC 8707).
		return errInvalidTarget.WithHintf("resource is required and must be %s: clients that are not Personal Agents sign in for the MCP server only.", s.urls.MCPResource(c))
	}
	return nil
}

// s256Challenge reports whether v can be an S256 code_challenge: 32 bytes
// in unpadded base64url.
func s256Challenge(v string) bool {
	b, err := base64.RawURLEncoding.Strict().DecodeString(v)
	return err == nil && len(b) == sha256.Size
}

// authorizeError sends the browser back to the agent's redirect_uri with
// error, error_description, state and iss (RFC 6749 §4.1.2.1, RFC 9207).
// The caller has checked redirect against the agent's redirect_uris.
func (s *Server) authorizeError(w http.ResponseWriter, r *http.Request, redirect *url.URL, state string, err error) {
	logFailure(r, err)
	rfc := fosite.ErrorToRFC6749Error(err)
	u := *redirect
	q := u.Query()
	q.Set("error", rfc.ErrorField)
	if d := rfc.GetDescription(); d != "" {
		q.Set("error_description", d)
	}
	if state != "" {
		q.Set("state", state)
	}
	q.Set("iss", s.urls.Issuer(tenant.FromContext(r.Context())))
	u.RawQuery = q.Encode()
	pages.SetHeaders(w.Header())
	w.Header().Set("Location", u.String())
	w.WriteHeader(http.StatusSeeOther)
}

// oauthErrorPage shows an OAuth error to the User.
func (s *Server) oauthErrorPage(w http.ResponseWriter, r *http.Request, err error) {
	logFailure(r, err)
	rfc := fosite.ErrorToRFC6749Error(err)
	status := rfc.CodeField
	if status == 0 || status == http.StatusUnauthorized {
		// A page is no HTTP authentication challenge, which 401 needs
		// (RFC 9110 §15.5.2).
		status = http.StatusBadRequest
	}
	// The error code helps the User, or whoever they ask, find the cause.
	s.messagePage(w, r, status, "Sign-in cannot continue", rfc.GetDescription()+"\n\nError: "+rfc.ErrorField)
}

func agentName(a *agentid.Client) string {
	if a.Name != "" {
		return a.Name
	}
	return "an agent"
}

func agentView(a *agentid.Client) pages.Agent {
	return pages.Agent{Name: a.Name, LogoURI: a.LogoURI, ClientID: a.ClientID, MCPClient: a.Public, HomePage: a.ClientURI,
		Registered: isRegistered(a.ClientID)}
}

// loginPage asks the User to sign in, with status and msg saying why an
// attempt failed; the form posts back to this URL.
func (s *Server) loginPage(w http.ResponseWriter, r *http.Request, status int, msg, intro string) {
	csrf, err := s.csrfToken(w, r)
	if err != nil {
		s.failPage(w, r, err)
		return
	}
	pages.Render(w, status, pages.Login{Brand: s.brand(tenant.FromContext(r.Context())), Action: r.URL.RequestURI(),
		CSRF: csrf, Username: r.PostForm.Get("username"), Error: msg, Intro: intro})
}

// consentPage asks the User to approve the requested scopes.
func (s *Server) consentPage(w http.ResponseWriter, r *http.Request, acct *accounts.Account, agent *agentid.Client, scopes []string, userCode, msg string) {
	csrf, err := s.csrfToken(w, r)
	if err != nil {
		s.failPage(w, r, err)
		return
	}
	c := tenant.FromContext(r.Context())
	pages.Render(w, http.StatusOK, pages.Consent{Brand: s.brand(c), Agent: agentView(agent),
		Scopes: scopeViews(c, slices.Clone(scopes)), Action: r.URL.RequestURI(), CSRF: csrf,
		Username: acct.Username, UserCode: userCode, Error: msg})
}
