package console_test

import (
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/console"
	"github.com/poppyhost/poppyhost/internal/testkit/chrome"
)

// TestChromiumSignIn signs in with a password in Chromium (rig.browser)
// and finds the member's account page.
func TestChromiumSignIn(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	b := r.browser(t, console.RoleAuditor)
	b.Load(chromedp.Navigate(r.url("/account")))
	require.Contains(t, chrome.Run(b, chromedp.Text("main")), "auditor")
	r.screenshot(t, b, "account")
}
