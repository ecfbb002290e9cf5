package console

import (
	"net/http"
	"time"
)

// reauthWindow is how long after signing in a member who has a second
// factor may change their second factors (docs/decisions.md): a session
// cookie taken later is not enough to swap in someone else's TOTP or
// passkey.
const reauthWindow = 5 * time.Minute

// reauthMessage tells a member why a change of second factor is refused.
const reauthMessage = "To change your passkeys or authenticator app, sign in again: " +
	"these changes are allowed only in the 5 minutes after signing in."

// mustReauthenticate reports whether the request's member must sign in
// again before changing their second factors: they have one, and their
// session signed in more than reauthWindow ago.
func (c *Console) mustReauthenticate(r *http.Request) (bool, error) {
	if c.now().Sub(signedInAt(r.Context())) < reauthWindow {
		return false, nil
	}
	totp, passkeys, err := c.staff.factors(r.Context(), memberFrom(r.Context()))
	return totp || passkeys > 0, err
}

// recentSignIn guards the routes that change the member's second
// factors: when they must sign in again, pages are refused with the
// account page (403, nothing done) and the passkey script's requests
// with its JSON error.
func (c *Console) recentSignIn(script bool) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			must, err := c.mustReauthenticate(r)
			switch {
			case err != nil:
				c.fail(w, r, err)
			case must && script:
				passkeyError(w, http.StatusForbidden, reauthMessage)
			case must:
				c.renderAccount(w, r, http.StatusForbidden, "")
			default:
				next.ServeHTTP(w, r)
			}
		})
	}
}
