package issuer

import (
	"net/http"
	"net/url"
	"strings"

	"github.com/ory/fosite"

	"github.com/poppyhost/poppyhost/internal/httpx"
	"github.com/poppyhost/poppyhost/internal/issuer/pages"
	"github.com/poppyhost/poppyhost/internal/tenant"
)

// deviceAuthorization is the device authorization endpoint (spec 4.3,
// RFC 8628 §3.1-3.2): it authenticates the agent, checks the scopes and
// returns the codes.
func (s *Server) deviceAuthorization(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	c := tenant.FromContext(ctx)
	r.Body = http.MaxBytesReader(w, r.Body, maxTokenForm)
	if err := r.ParseForm(); err != nil {
		if slowForm(w, r, err) {
			return
		}
		writeOAuthError(w, r, fosite.ErrInvalidRequest.WithHint("The body must be a form of at most 64 KiB."))
		return
	}
	for k, v := range r.PostForm {
		if len(v) > 1 {
			writeOAuthError(w, r, fosite.ErrInvalidRequest.WithHintf("%s must not be repeated.", k))
			return
		}
	}
	client, err := s.authenticateClient(ctx, r, r.PostForm)
	if err != nil {
		writeOAuthError(w, r, err)
		return
	}
	if !offersGrant(c, client.GetID(), tenant.GrantDeviceCode) || client.IsPublic() {
		writeOAuthError(w, r, fosite.ErrUnauthorizedClient.WithHint("This Company does not offer this Personal Agent Device Sign-In."))
		return
	}
	scopes := strings.Fields(r.PostForm.Get("scope"))
	if len(scopes) == 0 {
		writeOAuthError(w, r, fosite.ErrInvalidScope.WithHint("scope is required (spec 4.7)."))
		return
	}
	for _, sc := range scopes {
		if _, ok := c.Settings.Auth.Scopes[sc]; !ok {
			writeOAuthError(w, r, fosite.ErrInvalidScope.WithHintf("Unknown scope %q.", sc))
			return
		}
	}
	resource := r.PostForm.Get("resource")
	if _, err := audience(c, s.urls, resource); err != nil {
		writeOAuthError(w, r, err)
		return
	}
	deviceCode, userCode, err := s.store.createDevice(ctx, client.GetID(), scopes, resource, s.now())
	if err != nil {
		writeOAuthError(w, r, fosite.ErrServerError.WithWrap(err))
		return
	}
	verify := s.urls.Issuer(c) + "/device"
	w.Header().Set("Cache-Control", "no-store")
	httpx.WriteJSON(w, http.StatusOK, map[string]any{
		"device_code":               deviceCode,
		"user_code":                 DisplayUserCode(userCode),
		"verification_uri":          verify,
		"verification_uri_complete": verify + "?user_code=" + url.QueryEscape(DisplayUserCode(userCode)),
		"expires_in":                int(deviceLifetime.Seconds()),
		"interval":                  deviceInterval,
	})
}

// devicePage is where the User enters the code and approves or declines
// (RFC 8628 §3.3). Opening it, even with the code in the link, approves
// nothing: approval is a POST from the consent form.
func (s *Server) devicePage(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	c := tenant.FromContext(ctx)
	if !s.pageMethod(w, r) {
		return
	}
	if r.Method != http.MethodPost {
		s.deviceEntry(w, r, r.URL.Query().Get("user_code"), "")
		return
	}
	if !s.parsePageForm(w, r) {
		return
	}
	action := r.PostForm.Get("action")
	raw := r.URL.Query().Get("user_code")
	if action == "continue" {
		raw = r.PostForm.Get("user_code")
	}
	code := NormalUserCode(raw)
	if code == "" {
		s.deviceEntry(w, r, raw, "That is not a code from "+c.Settings.Organization.Name+". Check the code your agent shows and try again.")
		return
	}
	d, err := s.store.deviceByUserCode(ctx, code, s.now())
	if err != nil {
		s.failPage(w, r, err)
		return
	}
	if d == nil {
		s.deviceEntry(w, r, raw, "This code is not valid or has expired. Ask your agent for a new one.")
		return
	}
	agent, err := s.resolveAgent(ctx, d.ClientID)
	if err != nil {
		s.oauthErrorPage(w, r, err)
		return
	}
	// Later steps post back with the code in the URL.
	r.URL.RawQuery = url.Values{"user_code": {DisplayUserCode(code)}}.Encode()
	acct, action, ok := s.signedIn(w, r, action, "Sign in to "+c.Settings.Organization.Name+" to continue connecting "+agentName(agent)+".")
	if !ok {
		return
	}
	var granted []string
	switch action {
	case "approve":
		granted = approvedScopes(r.PostForm["scope"], d.Scopes)
	case "deny":
	default:
		s.consentPage(w, r, acct, agent, d.Scopes, DisplayUserCode(code), "")
		return
	}
	decided, err := s.store.decideDevice(ctx, code, acct.ID, granted, s.now())
	switch {
	case err != nil:
		s.failPage(w, r, err)
	case !decided:
		s.deviceEntry(w, r, "", "This code is not valid or has expired. Ask your agent for a new one.")
	case len(granted) == 0:
		s.messagePage(w, r, http.StatusOK, "Request declined", agentName(agent)+" was not connected to your account. You can close this page.")
	default:
		s.messagePage(w, r, http.StatusOK, "All set", agentName(agent)+" is now connected to your "+c.Settings.Organization.Name+" account. You can close this page and return to your agent.")
	}
}

func (s *Server) deviceEntry(w http.ResponseWriter, r *http.Request, code, msg string) {
	csrf, err := s.csrfToken(w, r)
	if err != nil {
		s.failPage(w, r, err)
		return
	}
	status := http.StatusOK
	if msg != "" {
		status = http.StatusBadRequest
	}
	c := tenant.FromContext(r.Context())
	pages.Render(w, status, pages.DeviceEntry{Brand: s.brand(c), Action: s.urls.Base(c) + "/device", CSRF: csrf, UserCode: code, Error: msg})
}
