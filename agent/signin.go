package agent

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/chromedp/chromedp"
)

// ErrSignInDeclined is returned when the User declines a sign-in.
var ErrSignInDeclined = errors.New("agent: the User declined the sign-in")

// UserStep is what the User does on the Company's sign-in page, which the
// agent has opened in its browser: sign in, then approve or decline.
type UserStep func(ctx context.Context, b *Browser) error

// PasswordUser is a UserStep for a page with username and password fields
// (if this browser is not signed in yet) and a consent form whose approve
// button is named action=approve.
func PasswordUser(username, password string) UserStep {
	return func(ctx context.Context, b *Browser) error {
		hasLogin, err := Run(ctx, b, chromedp.Evaluate[bool](`document.querySelector('input[name="password"]') !== null`))
		if err != nil {
			return err
		}
		if hasLogin {
			if err := b.Do(ctx,
				chromedp.SendKeys(`input[name="username"]`, username),
				chromedp.SendKeys(`input[name="password"]`, password),
			); err != nil {
				return err
			}
			// Press the form's own submit button, so its name and value go too.
			if _, err := b.Load(ctx, clickJS(`input[name="password"]`)); err != nil {
				return err
			}
		}
		if err := b.Do(ctx, chromedp.WaitVisible(`button[name="action"][value="approve"]`)); err != nil {
			return fmt.Errorf("consent page: %w", err)
		}
		_, err = b.Load(ctx, chromedp.Click(`button[name="action"][value="approve"]`))
		return err
	}
}

// SignInDirect signs the User in with Direct Sign-In (spec 4.2): the
// authorization code grant with PKCE, the Company's page opened in the
// agent's browser where user does the User's part, the redirect's state
// and iss checked, the code exchanged with a client assertion.
func (a *Agent) SignInDirect(ctx context.Context, c *Company, scopes []string, user UserStep) error {
	if !c.offers("authorization_code") || c.AS.AuthorizationEndpoint == "" {
		return ErrNoSignIn
	}
	a.Recorder.Note("Direct Sign-In at %s for %s (spec 4.2)", c.Issuer, strings.Join(scopes, " "))
	state := randomID(16)
	verifier := randomID(32)
	sum := sha256.Sum256([]byte(verifier))
	back := make(chan url.Values, 1)
	a.mu.Lock()
	a.callbacks[state] = back
	a.mu.Unlock()
	defer func() {
		a.mu.Lock()
		delete(a.callbacks, state)
		a.mu.Unlock()
	}()
	q := url.Values{
		"response_type":         {"code"},
		"client_id":             {a.ClientID()},
		"redirect_uri":          {a.RedirectURI()},
		"scope":                 {strings.Join(scopes, " ")},
		"state":                 {state},
		"code_challenge":        {b64.EncodeToString(sum[:])},
		"code_challenge_method": {"S256"},
	}
	authURL := c.AS.AuthorizationEndpoint + "?" + q.Encode()
	if strings.Contains(c.AS.AuthorizationEndpoint, "?") {
		authURL = c.AS.AuthorizationEndpoint + "&" + q.Encode()
	}
	b, err := a.Browser()
	if err != nil {
		return err
	}
	if _, err := b.Load(ctx, chromedp.Navigate(authURL)); err != nil {
		return fmt.Errorf("agent: open the authorization page: %w", err)
	}
	if err := user(ctx, b); err != nil {
		return fmt.Errorf("agent: the User's step: %w", err)
	}
	var got url.Values
	select {
	case got = <-back:
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(browserTimeout):
		return errors.New("agent: the browser did not come back to the redirect URI")
	}
	// RFC 9207, spec 4.2: iss on every redirect back, success or error.
	if got.Get("iss") != c.Issuer {
		return fmt.Errorf("agent: redirect iss %q is not the issuer %q", got.Get("iss"), c.Issuer)
	}
	if e := got.Get("error"); e != "" {
		if e == "access_denied" {
			return ErrSignInDeclined
		}
		return &OAuthError{Code: e, Description: got.Get("error_description")}
	}
	return c.token(ctx, url.Values{
		"grant_type":    {"authorization_code"},
		"code":          {got.Get("code")},
		"redirect_uri":  {a.RedirectURI()},
		"code_verifier": {verifier},
	}, scopes)
}

// callback receives the browser back from Direct Sign-In; only a state
// the agent is waiting for is accepted.
func (a *Agent) callback(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	a.mu.Lock()
	ch := a.callbacks[q.Get("state")]
	delete(a.callbacks, q.Get("state"))
	a.mu.Unlock()
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	if ch == nil {
		w.WriteHeader(http.StatusBadRequest)
		fmt.Fprint(w, "<!doctype html><title>Unknown sign-in</title><p>This sign-in was not started here.</p>")
		return
	}
	ch <- q
	fmt.Fprint(w, "<!doctype html><title>Signed in</title><p>You can close this page.</p>")
}

// clickJS clicks the first submit button of the form holding the element
// sel selects, or the element itself outside a form.
func clickJS(sel string) chromedp.Action[chromedp.Void] {
	expr := fmt.Sprintf(`(() => { const e = document.querySelector(%q);
		if (!e) { throw new Error("no element to click"); }
		const f = e.form;
		if (!f) { e.click(); return true; }
		const b = f.querySelector('button[type=submit], button:not([type]), input[type=submit]');
		if (b) { b.click(); } else { f.submit(); } return true; })()`, sel)
	return chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		_, err := chromedp.Evaluate[bool](expr)(ctx, t)
		return err
	})
}
