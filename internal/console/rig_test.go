package console_test

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/accounts"
	"github.com/poppyhost/poppyhost/internal/console"
	"github.com/poppyhost/poppyhost/internal/issuer"
	"github.com/poppyhost/poppyhost/internal/platform"
	"github.com/poppyhost/poppyhost/internal/testkit"
	"github.com/poppyhost/poppyhost/internal/testkit/chrome"
)

// rig is the platform over HTTPS on its own database with one Company,
// for the console's tests.
type rig struct {
	env *testkit.Env
	// Slug and ID are the Company's.
	Slug  string
	ID    int64
	staff *console.Store
	n     atomic.Int64
}

// rigSlug is the rig's Company.
const rigSlug = "acme"

// newRig starts the platform with a Company, rigSlug.
func newRig(t *testing.T) *rig {
	t.Helper()
	return newRigWith(t, nil)
}

// newRigWith is newRig with the platform's options changed by change.
func newRigWith(t *testing.T, change func(*platform.Options)) *rig {
	t.Helper()
	env := testkit.SetupWith(t, testkit.Options{Platform: func(o *platform.Options) {
		o.PasswordHashes = accounts.Limits{Queue: 1000, PerCompany: 1000, MaxWait: time.Minute}
		o.LoginRates = issuer.LoginRates{PerAddress: 10000, PerCompany: 10000}
		if change != nil {
			change(o)
		}
	}})
	r := &rig{env: env, staff: console.NewStore(env.Pool, env.Platform.Accounts)}
	r.Slug, r.ID = r.company(t, rigSlug)
	return r
}

// company creates another Company and returns its slug and id.
func (r *rig) company(t *testing.T, slug string) (string, int64) {
	t.Helper()
	r.env.CreateCompany(t, map[string]any{"slug": slug,
		"organization": map[string]any{"name": "Company " + slug, "domain": slug + ".example"}})
	var id int64
	require.NoError(t, r.env.Pool.QueryRow(context.Background(), `SELECT id FROM companies WHERE slug = $1`, slug).Scan(&id))
	return slug, id
}

// url is the https URL of path under the rig Company's console.
func (r *rig) url(path string) string { return r.env.PublicURL("/console/" + r.Slug + path) }

// member adds a staff member with role to the rig's Company and returns
// it with its password.
func (r *rig) member(t *testing.T, role console.Role) (console.Member, string) {
	t.Helper()
	return r.memberOf(t, r.ID, role)
}

// memberOf adds a staff member with role to the Company companyID.
func (r *rig) memberOf(t *testing.T, companyID int64, role console.Role) (console.Member, string) {
	t.Helper()
	n := r.n.Add(1)
	password := fmt.Sprintf("correct horse %d battery", n)
	m, err := r.staff.Create(context.Background(), companyID, fmt.Sprintf("%s%d@staff.example", role, n),
		fmt.Sprintf("%s %d", role, n), role, password)
	require.NoError(t, err)
	return m, password
}

// client is a cookie-keeping client of the platform that follows no
// redirects.
func (r *rig) client(t *testing.T) *http.Client {
	t.Helper()
	return r.env.Browser(t).Client
}

// signIn returns a client signed in as a new member with role.
func (r *rig) signIn(t *testing.T, role console.Role) *http.Client {
	t.Helper()
	m, password := r.member(t, role)
	return r.signInWith(t, m.Email, password)
}

// signInWith returns a client signed in with email and password, which need
// no second factor.
func (r *rig) signInWith(t *testing.T, email, password string) *http.Client {
	t.Helper()
	c := r.client(t)
	resp := r.passwordSignIn(t, c, email, password)
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	require.Equal(t, "/console/"+r.Slug+"/", resp.Header.Get("Location"))
	return c
}

// get fetches path of the console with c and returns the answer with its
// body read.
func (r *rig) get(t *testing.T, c *http.Client, path string) (*http.Response, string) {
	t.Helper()
	resp, err := c.Get(r.url(path))
	require.NoError(t, err)
	return resp, readBody(t, resp)
}

// post sends form to path of the console with the CSRF token of c's
// session (or pre-session) added, as the console's own forms do.
func (r *rig) post(t *testing.T, c *http.Client, path string, form url.Values) *http.Response {
	t.Helper()
	if form == nil {
		form = url.Values{}
	}
	form.Set("csrf", r.csrf(t, c))
	return r.postRaw(t, c, path, form)
}

// postRaw sends form to path as it is, from the console's origin.
func (r *rig) postRaw(t *testing.T, c *http.Client, path string, form url.Values) *http.Response {
	t.Helper()
	resp, err := c.PostForm(r.url(path), form)
	require.NoError(t, err)
	readBody(t, resp)
	return resp
}

var csrfField = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// csrf is the CSRF token of c's session, read from the account page's
// forms (or the second factor's, while the session waits for it), or of
// its pre-session, from the sign-in page's when c is signed out.
func (r *rig) csrf(t *testing.T, c *http.Client) string {
	t.Helper()
	var body string
	for _, path := range []string{"/account", "/signin/second", "/signin"} {
		var resp *http.Response
		if resp, body = r.get(t, c, path); resp.StatusCode == http.StatusOK {
			break
		}
	}
	m := csrfField.FindStringSubmatch(body)
	require.NotNil(t, m, "no CSRF token in %s", body)
	return m[1]
}

// browser returns Chromium signed in as a new member with role, showing
// the console's home page.
func (r *rig) browser(t *testing.T, role console.Role) *chrome.Browser {
	t.Helper()
	m, password := r.member(t, role)
	b := chrome.Start(t, r.env.CA, testkit.PublicHost)
	r.browserSignIn(t, b, m.Email, password)
	return b
}

// browserSignIn signs b in with email and password on the sign-in page;
// they need no second factor.
func (r *rig) browserSignIn(t *testing.T, b *chrome.Browser, email, password string) {
	t.Helper()
	b.Load(chromedp.Navigate(r.url("/signin")))
	b.Do(chromedp.SendKeys(`#email`, email), chromedp.SendKeys(`#password`, password))
	b.Load(chromedp.Click(`button[value="signin"]`))
	require.NotContains(t, chrome.Run(b, chromedp.Location()), "/signin")
}

// EnvScreenshots names the directory where the Chromium tests write their
// screenshots (docs/console to refresh the guide's).
const EnvScreenshots = "POPPYHOST_CONSOLE_SCREENSHOTS"

// screenshot writes a PNG of b's whole page as name.png into
// $POPPYHOST_CONSOLE_SCREENSHOTS, or a temporary directory (logged).
func (r *rig) screenshot(t *testing.T, b *chrome.Browser, name string) {
	t.Helper()
	dir := os.Getenv(EnvScreenshots)
	if dir == "" {
		dir = t.TempDir()
	}
	png := chrome.Run(b, chromedp.FullScreenshot(100))
	require.Less(t, len(png), 300<<10, "screenshot %s is too large", name)
	path := filepath.Join(dir, name+".png")
	require.NoError(t, os.WriteFile(path, png, 0o644))
	t.Logf("screenshot: %s", path)
}

// signedIn reports whether c holds a session cookie of the rig Company.
func (r *rig) signedIn(c *http.Client) bool {
	u, _ := url.Parse(r.url("/"))
	for _, ck := range c.Jar.Cookies(u) {
		if ck.Name == "__Host-console-s-"+r.Slug {
			return true
		}
	}
	return false
}

// requireSecondFactor turns on the Company setting that requires a second
// factor of password sign-ins.
func (r *rig) requireSecondFactor(t *testing.T) {
	t.Helper()
	resp := r.env.Admin(t, http.MethodPatch, "/admin/v1/companies/"+r.Slug,
		map[string]any{"console": map[string]any{"require_second_factor": true}})
	require.Equal(t, http.StatusOK, resp.Status, "%s", resp.Body)
}

// passwordSignIn posts the sign-in form with c and returns the answer.
func (r *rig) passwordSignIn(t *testing.T, c *http.Client, email, password string) *http.Response {
	t.Helper()
	return r.post(t, c, "/signin", url.Values{"email": {email}, "password": {password}})
}

// auditActions lists the actions of the rig Company's audit log entries
// made by staff member id, oldest first.
func (r *rig) auditActions(t *testing.T, id int64) []string {
	t.Helper()
	var out []string
	rows, err := r.env.Pool.Query(context.Background(), `SELECT action FROM audit_log
		WHERE company_id = $1 AND actor_kind = 'staff' AND actor_id = $2 ORDER BY id`, r.ID, id)
	require.NoError(t, err)
	defer rows.Close()
	for rows.Next() {
		var a string
		require.NoError(t, rows.Scan(&a))
		out = append(out, a)
	}
	require.NoError(t, rows.Err())
	return out
}
