package console_test

import (
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/console"
	"github.com/poppyhost/poppyhost/internal/testkit/chrome"
)

// TestChromiumSettings changes a setting in Chromium, then enters a bad
// value and finds its error beside the input, with the value kept and
// nothing saved; it makes an API key and reads the audit log, which names
// both changes. Screenshots: settings, api-keys, audit.
func TestChromiumSettings(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	b := r.browser(t, console.RoleOwner)

	b.Load(chromedp.Navigate(r.url("/settings/organization")))
	b.Do(chromedp.Clear(`#f-organization-name`), chromedp.SendKeys(`#f-organization-name`, "Acme Parcels"))
	b.Load(chromedp.Click(`.settings-form button[type="submit"]`))
	require.Contains(t, chrome.Run(b, chromedp.Text(`#saved`)), "Saved")
	require.Equal(t, "Acme Parcels", chrome.Run(b, chromedp.Value(`#f-organization-name`)))
	require.Equal(t, "Acme Parcels", r.settings(t, r.ID).Organization.Name)

	b.Do(chromedp.Clear(`#f-organization-domain`), chromedp.SendKeys(`#f-organization-domain`, "not a host"))
	b.Load(chromedp.Click(`.settings-form button[type="submit"]`))
	require.NotEmpty(t, chrome.Run(b, chromedp.Text(`#f-organization-domain-error`)), "the error is beside the input")
	require.Equal(t, "not a host", chrome.Run(b, chromedp.Value(`#f-organization-domain`)), "the value is kept")
	require.Contains(t, chrome.Run(b, chromedp.Text(`#errors`)), "organization.domain")
	require.Equal(t, "acme.example", r.settings(t, r.ID).Organization.Domain, "nothing saved")
	r.screenshot(t, b, "settings")

	b.Load(chromedp.Navigate(r.url("/settings/api-keys")))
	b.Do(chromedp.SendKeys(`#key-name`, "Company Agent"))
	b.Load(chromedp.Click(`form[action$="/settings/api-keys"] button`))
	require.Regexp(t, `^phk_`, chrome.Run(b, chromedp.Value(`#key`)))
	r.screenshot(t, b, "api-keys")

	b.Load(chromedp.Navigate(r.url("/audit")))
	log := chrome.Run(b, chromedp.Text(`main table`))
	require.Contains(t, log, "organization.name")
	require.Contains(t, log, "POST /console/{slug}/settings/api-keys")
	r.screenshot(t, b, "audit")
}
