package console_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/webauthn"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/console"
	"github.com/poppyhost/poppyhost/internal/testkit"
	"github.com/poppyhost/poppyhost/internal/testkit/chrome"
)

// addAuthenticator gives the browser a virtual platform authenticator
// (CDP WebAuthn domain) that holds passkeys and verifies its user.
func addAuthenticator(t *testing.T, b *chrome.Browser) {
	t.Helper()
	chrome.Run(b, func(ctx context.Context, tg *chromedp.Target) (webauthn.AuthenticatorID, error) {
		if _, err := cdp.Call(ctx, tg, webauthn.Enable, webauthn.EnableParams{}); err != nil {
			return "", err
		}
		res, err := cdp.Call(ctx, tg, webauthn.AddVirtualAuthenticator, webauthn.AddVirtualAuthenticatorParams{
			Options: &webauthn.VirtualAuthenticatorOptions{
				Protocol: webauthn.AuthenticatorProtocolCtap2, Ctap2version: webauthn.Ctap2versionCtap21,
				Transport: webauthn.AuthenticatorTransportInternal, HasResidentKey: true,
				HasUserVerification: true, IsUserVerified: true, AutomaticPresenceSimulation: true,
			}})
		return res.AuthenticatorID, err
	})
}

// waitLeaving waits until the browser's page is no longer at a URL
// containing path, as after a script navigates, and returns where it is.
func waitLeaving(t *testing.T, b *chrome.Browser, path string) string {
	t.Helper()
	deadline := time.Now().Add(chrome.Timeout)
	for {
		loc := chrome.Run(b, chromedp.Location())
		if !strings.Contains(loc, path) {
			return loc
		}
		if time.Now().After(deadline) {
			t.Fatalf("still at %s: %s", loc, chrome.Run(b, chromedp.Text("main")))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestChromiumPasskey adds a passkey with a virtual authenticator while
// signed in, signs out, and signs in with the passkey alone; then with
// the password, which now asks for the passkey as second factor.
func TestChromiumPasskey(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	m, password := r.member(t, console.RoleOwner)
	b := chrome.Start(t, r.env.CA, testkit.PublicHost)
	r.browserSignIn(t, b, m.Email, password)
	addAuthenticator(t, b)

	b.Load(chromedp.Navigate(r.url("/account")))
	b.Do(chromedp.Click(`#add-passkey`))
	waitLeaving(t, b, "/account/")
	b.Do(chromedp.WaitVisible(`.notice`))
	require.Contains(t, chrome.Run(b, chromedp.Text(".notice")), "The passkey is added")
	require.Contains(t, chrome.Run(b, chromedp.Text("main table")), "Passkey added")
	r.screenshot(t, b, "account")
	var email string
	require.NoError(t, r.env.Pool.QueryRow(context.Background(), `SELECT st.email FROM staff_passkeys p
		JOIN staff st ON st.id = p.staff_id WHERE p.company_id = $1`, r.ID).Scan(&email))

	b.Load(chromedp.Click(`form.signout button`))
	require.True(t, strings.HasSuffix(chrome.Run(b, chromedp.Location()), "/signin"))
	r.screenshot(t, b, "signin")
	b.Do(chromedp.Click(`#signin-passkey`))
	waitLeaving(t, b, "/signin")
	b.Load(chromedp.Navigate(r.url("/account")))
	require.Contains(t, chrome.Run(b, chromedp.Text("main")), email)
	// Its last use is recorded.
	require.Contains(t, chrome.Run(b, chromedp.Text("main table")), " UTC")
	require.NotContains(t, chrome.Run(b, chromedp.Text("main table")), "never")

	b.Load(chromedp.Click(`form.signout button`))
	b.Do(chromedp.SendKeys(`#email`, m.Email), chromedp.SendKeys(`#password`, password))
	b.Load(chromedp.Click(`button[value="signin"]`))
	require.True(t, strings.HasSuffix(chrome.Run(b, chromedp.Location()), "/signin/second"))
	b.Do(chromedp.Click(`#second-passkey`))
	waitLeaving(t, b, "/signin")
	b.Load(chromedp.Navigate(r.url("/account")))
	require.Contains(t, chrome.Run(b, chromedp.Text("main")), email)

	// Removed, the passkey is gone.
	b.Load(chromedp.Click(`main table button`))
	require.Contains(t, chrome.Run(b, chromedp.Text(".notice")), "The passkey is removed")
	require.Contains(t, chrome.Run(b, chromedp.Text("main")), "You have no passkey yet")
}

// TestChromiumPasswordAndTOTP signs in with a password at a Company that
// requires a second factor, sets up TOTP from the secret the page shows,
// then signs in again with a password and a code.
func TestChromiumPasswordAndTOTP(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	r.requireSecondFactor(t)
	m, password := r.member(t, console.RoleOwner)
	b := chrome.Start(t, r.env.CA, testkit.PublicHost)
	signIn := func() {
		b.Load(chromedp.Navigate(r.url("/signin")))
		b.Do(chromedp.SendKeys(`#email`, m.Email), chromedp.SendKeys(`#password`, password))
		b.Load(chromedp.Click(`button[value="signin"]`))
		require.True(t, strings.HasSuffix(chrome.Run(b, chromedp.Location()), "/signin/second"))
	}
	signIn()
	secret := chrome.Run(b, chromedp.Text(`#totp-secret`))
	r.screenshot(t, b, "second-factor")
	now := time.Now()
	b.Do(chromedp.SendKeys(`#code`, console.TOTPCode(secret, now)))
	b.Load(chromedp.Click(`button[value="totp"]`))
	require.NotContains(t, chrome.Run(b, chromedp.Location()), "/signin")

	// The staff page, for the guide.
	b.Load(chromedp.Navigate(r.url("/staff")))
	require.Contains(t, chrome.Run(b, chromedp.Text("main table")), m.Email)
	r.screenshot(t, b, "staff")

	b.Load(chromedp.Click(`form.signout button`))
	signIn()
	b.Do(chromedp.SendKeys(`#code`, console.TOTPCode(secret, now.Add(console.TOTPStep))))
	b.Load(chromedp.Click(`button[value="totp"]`))
	b.Load(chromedp.Navigate(r.url("/account")))
	require.Contains(t, chrome.Run(b, chromedp.Text("main")), m.Email)
}
