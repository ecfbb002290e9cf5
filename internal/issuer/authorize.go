package issuer

import (
	"net/http"
	"net/url"
	"slices"

	"github.com/ory/fosite"

	"github.com/poppyhost/poppyhost/internal/accounts"
	"github.com/poppyhost/poppyhost/internal/agentid"
	"github.com/poppyhost/poppyhost/internal/issuer/pages"
	"github.com/poppyhost/poppyhost/internal/tenant"
)

// authorizeParams may each appear once (RFC 6749 §3.1).
var authorizeParams = []string{"response_type", "client_id", "redirect_uri", "scope", "state",
	"code_challenge", "code_challenge_method", "resource", "response_mode"}

// authorize is Direct Sign-In's authorization endpoint (spec 4.2). The
// authorization request always travels in the URL: the login and consent
// forms post back to the same URL, with only their own fields in the body,
// and fosite validates the request again on each step.
func (s *Server) authorize(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	c := tenant.FromContext(ctx)
	if r.Method != http.MethodGet && r.Method != http.MethodPost {
		w.Header().Set("Allow", "GET, POST")
		s.messagePage(w, r, http.StatusMethodNotAllowed, "Not allowed", "Use GET or POST.")
		return
	}
	if r.Method == http.MethodPost && !s.parsePageForm(w, r) {
		return
	}
	q := r.URL.Query()

	// Problems with the client or redirect_uri are shown to the User, never
	// redirected (RFC 6749 §4.1.2.1).
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
	if !redirectAllowed(agent, q.Get("redirect_uri")) {
		s.messagePage(w, r, http.StatusBadRequest, "This sign-in link is not valid",
			"redirect_uri is not one of the agent's redirect_uris (spec 4.2). Go back to your agent and start again.")
		return
	}

	fr := r.Clone(ctx)
	fr.Method, fr.Body, fr.ContentLength = http.MethodGet, http.NoBody, 0
	fr.Form, fr.PostForm = nil, nil
	fr.Header = fr.Header.Clone()
	fr.Header.Del("Content-Type")
	ar, err := s.provider.NewAuthorizeRequest(ctx, fr)
	if err != nil {
		s.authorizeError(w, r, ar, err)
		return
	}
	if err := s.checkAuthorize(c, agent, q); err != nil {
		s.authorizeError(w, r, ar, err)
		return
	}

	acct, err := s.currentAccount(r)
	if err != nil {
		s.failPage(w, r, err)
		return
	}
	action := ""
	if r.Method == http.MethodPost {
		action = r.PostForm.Get("action")
	}
	if acct == nil {
		msg := ""
		if action == "login" {
			if acct, msg, err = s.login(w, r); err != nil {
				s.failPage(w, r, err)
				return
			}
		}
		if acct == nil {
			s.loginPage(w, r, msg, "Sign in to "+c.Settings.Organization.Name+" to continue connecting "+agentName(agent)+".")
			return
		}
		action = ""
	}
	switch action {
	case "deny":
		s.authorizeError(w, r, ar, fosite.ErrAccessDenied.WithHint("The User declined the request."))
	case "approve":
		granted := approvedScopes(r.PostForm["scope"], ar.GetRequestedScopes())
		if len(granted) == 0 {
			// Approving none is a decline (spec 4.7).
			s.authorizeError(w, r, ar, fosite.ErrAccessDenied.WithHint("The User approved no scope."))
			return
		}
		for _, g := range granted {
			ar.GrantScope(g)
		}
		sess := &Session{AccountID: acct.ID, Username: acct.Username, Resource: q.Get("resource")}
		resp, err := s.provider.NewAuthorizeResponse(ctx, ar, sess)
		if err != nil {
			s.authorizeError(w, r, ar, err)
			return
		}
		resp.AddParameter("iss", s.urls.Issuer(c))
		s.provider.WriteAuthorizeResponse(ctx, w, ar, resp)
	default:
		s.consentPage(w, r, acct, agent, ar.GetRequestedScopes(), "", "")
	}
}

// redirectAllowed applies spec 4.2: exactly one of the agent's
// redirect_uris, or a loopback one on another port (RFC 8252 §7.3).
func redirectAllowed(agent *agentid.Client, redirect string) bool {
	_, err := fosite.MatchRedirectURIWithClientRedirectURIs(redirect, &Client{ID: agent.ClientID, Agent: agent})
	return err == nil
}

// checkAuthorize applies Poppy's rules that fosite does not, before any
// login, so a bad request never reaches the User.
func (s *Server) checkAuthorize(c *tenant.Company, agent *agentid.Client, q url.Values) error {
	for _, p := range authorizeParams {
		if len(q[p]) > 1 {
			return fosite.ErrInvalidRequest.WithHintf("%s must not be repeated (RFC 6749 §3.1).", p)
		}
	}
	switch {
	case q.Get("response_mode") != "" && q.Get("response_mode") != "query":
		return fosite.ErrInvalidRequest.WithHint("Only response_mode=query is supported.")
	case q.Get("code_challenge") == "":
		return fosite.ErrInvalidRequest.WithHint("code_challenge is required: PKCE with S256 (spec 4.2).")
	case q.Get("code_challenge_method") != "S256":
		return fosite.ErrInvalidRequest.WithHint("code_challenge_method must be S256 (spec 4.2).")
	case q.Get("scope") == "":
		return fosite.ErrInvalidScope.WithHint("scope is required (spec 4.7).")
	case !c.Settings.Agents.SignInAllowed(agent.ClientID, tenant.GrantAuthorizationCode):
		return fosite.ErrUnauthorizedClient.WithHint("This Company does not offer this Personal Agent Direct Sign-In.")
	}
	if _, err := audience(c, s.urls, q.Get("resource")); err != nil {
		return err
	}
	return nil
}

// authorizeError answers an authorization request that failed: with a
// redirect carrying error, state and iss (RFC 9207) when the redirect_uri
// is known to be the agent's, else with a page.
func (s *Server) authorizeError(w http.ResponseWriter, r *http.Request, ar fosite.AuthorizeRequester, err error) {
	logFailure(r, err)
	if ar == nil || !ar.IsRedirectURIValid() || ar.GetRedirectURI() == nil {
		s.oauthErrorPage(w, r, err)
		return
	}
	rfc := fosite.ErrorToRFC6749Error(err)
	u := *ar.GetRedirectURI()
	q := u.Query()
	q.Set("error", rfc.ErrorField)
	if d := rfc.GetDescription(); d != "" {
		q.Set("error_description", d)
	}
	if st := ar.GetState(); st != "" {
		q.Set("state", st)
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
	if status == 0 {
		status = http.StatusBadRequest
	}
	s.messagePage(w, r, status, "Sign-in cannot continue", rfc.GetDescription())
}

func agentName(a *agentid.Client) string {
	if a.Name != "" {
		return a.Name
	}
	return "an agent"
}

func agentView(a *agentid.Client) pages.Agent {
	return pages.Agent{Name: a.Name, LogoURI: a.LogoURI, ClientID: a.ClientID}
}

// loginPage asks the User to sign in; the form posts back to this URL.
func (s *Server) loginPage(w http.ResponseWriter, r *http.Request, msg, intro string) {
	csrf, err := s.csrfToken(w, r)
	if err != nil {
		s.failPage(w, r, err)
		return
	}
	status := http.StatusOK
	if msg != "" {
		status = http.StatusUnauthorized
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
