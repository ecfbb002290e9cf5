package issuer_test

import (
	"crypto/rand"
	"io"
	"net/http"
	"net/netip"
	"net/url"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/accounts"
	"github.com/poppyhost/poppyhost/internal/httpx"
	"github.com/poppyhost/poppyhost/internal/issuer"
	"github.com/poppyhost/poppyhost/internal/testkit/peers"
)

// TestLoginFloodStaysBounded: one client floods Company alpha's sign-in
// page with wrong passwords for made-up usernames, from many connections
// at once. The excess is refused before any hashing, 503 with Retry-After
// while hashing is at its limit and 429 with Retry-After once the address
// is over its rate; meanwhile Company beta's poppy.json and a correct
// sign-in at beta are answered, and the process's memory grows by about
// the bounded hashes' 64 MiB each. The latency bounds are generous for a
// loaded 2-core machine; what fails without the limits is the flood being
// answered 400 throughout, and the memory.
//
// Not parallel: it reads the process's memory.
func TestLoginFloodStaysBounded(t *testing.T) {
	const hashes = 2
	env := newEnv(t, options{
		PasswordHashes: accounts.Limits{Hashes: hashes, Queue: 2, PerCompany: 3, MaxWait: 20 * time.Second},
		LoginRates:     issuer.LoginRates{PerAddress: 40},
	})
	for _, slug := range []string{"alpha", "beta"} {
		env.CreateCompany(t, map[string]any{
			"slug":         slug,
			"organization": map[string]any{"name": "Company " + slug, "domain": slug + ".test"},
			"auth":         map[string]any{"scopes": map[string]any{"orders:read": "See your orders"}},
		})
		resp := env.Admin(t, http.MethodPost, "/admin/v1/companies/"+slug+"/accounts",
			map[string]any{"username": testUser, "password": testPassword})
		require.Equal(t, http.StatusCreated, resp.Status, "%s", resp.Body)
	}
	alphaPage, betaPage := env.PublicURL("/t/alpha/account"), env.PublicURL("/t/beta/account")

	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)

	// Each attacker is a browser with the login form's CSRF token, then
	// posts as fast as it is answered, without waiting for Retry-After.
	const attackers, attempts = 12, 8
	type answer struct {
		status     int
		retryAfter string
	}
	answers := make(chan answer, attackers*attempts)
	var flood sync.WaitGroup
	for range attackers {
		b := env.Browser(t)
		login := b.Get(alphaPage)
		require.Equal(t, http.StatusOK, login.Status, "%s", login.Body)
		csrf := login.Field("csrf")
		flood.Go(func() {
			for range attempts {
				resp, err := b.Client.PostForm(alphaPage, url.Values{"csrf": {csrf}, "action": {"login"},
					"username": {rand.Text()}, "password": {"wrong password"}})
				if err != nil {
					answers <- answer{status: -1, retryAfter: err.Error()}
					continue
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				answers <- answer{status: resp.StatusCode, retryAfter: resp.Header.Get("Retry-After")}
			}
		})
	}

	// Meanwhile, beta: its poppy.json, and then a sign-in.
	var slowest time.Duration
	for range 20 {
		start := time.Now()
		resp := env.Do(t, http.MethodGet, env.URL("beta.test", "/.well-known/poppy.json"), nil)
		slowest = max(slowest, time.Since(start))
		require.Equal(t, http.StatusOK, resp.Status, "%s", resp.Body)
	}
	b := env.Browser(t)
	login := b.Get(betaPage)
	require.Equal(t, http.StatusOK, login.Status, "%s", login.Body)
	start := time.Now()
	signedIn := b.Submit(login, "login", map[string][]string{"username": {testUser}, "password": {testPassword}})
	betaLogin := time.Since(start)
	require.Equal(t, http.StatusOK, signedIn.Status, "%s", signedIn.Body)
	require.Contains(t, signedIn.Body, `value="signout"`, "beta's account page, signed in")

	flood.Wait()
	close(answers)
	var runtimeAfter runtime.MemStats
	runtime.ReadMemStats(&runtimeAfter)

	count := map[int]int{}
	for a := range answers {
		count[a.status]++
		switch a.status {
		case http.StatusBadRequest:
		case http.StatusTooManyRequests, http.StatusServiceUnavailable:
			secs, err := strconv.Atoi(a.retryAfter)
			require.NoError(t, err, "Retry-After on a %d", a.status)
			require.Positive(t, secs)
		default:
			t.Fatalf("a flood attempt answered %d (%s)", a.status, a.retryAfter)
		}
	}
	grew := (runtimeAfter.Sys - before.Sys) >> 20
	t.Logf("flood answers by status %v; beta's poppy.json at most %v, its sign-in %v; Sys grew %d MiB",
		count, slowest, betaLogin, grew)

	require.Positive(t, count[http.StatusServiceUnavailable], "attempts beyond the hashing limit are shed")
	require.Positive(t, count[http.StatusTooManyRequests], "attempts beyond the address's rate are refused")
	require.LessOrEqual(t, count[http.StatusBadRequest], 40, "no more attempts checked than the address's rate")
	require.Less(t, slowest, 5*time.Second, "beta's poppy.json during the flood")
	require.Less(t, betaLogin, 15*time.Second, "beta's sign-in during the flood")
	// Each running hash holds 64 MiB and the collector lets the heap reach
	// twice what is live: allow three times, and 128 MiB for the server and
	// clients. Unbounded, twelve attackers' hashes hold 768 MiB.
	require.Less(t, grew, uint64(3*hashes*64+128), "memory grew (MiB)")

	// The metrics say what happened.
	metrics := env.Do(t, http.MethodGet, env.PublicURL("/metrics"), nil)
	require.Equal(t, http.StatusOK, metrics.Status)
	for _, line := range []string{
		`poppyhost_login_rate_limited_total{limit="address"}`,
		`poppyhost_password_hashes_shed_total{reason="company"}`,
		`poppyhost_password_hashes_in_flight 0`,
	} {
		require.Contains(t, string(metrics.Body), line)
	}
	require.False(t, strings.Contains(string(metrics.Body), `poppyhost_login_rate_limited_total{limit="address"} 0`))
}

// TestLoginRates: sign-in attempts are counted per client address (the
// one a trusted proxy names; an IPv6 /64 is one address) and per Company,
// before any password is checked, and answered 429 with Retry-After over
// either rate. One address's excess does not use up the Company's budget,
// and another Company's budget is its own.
func TestLoginRates(t *testing.T) {
	t.Parallel()
	env := newEnv(t, options{
		LoginRates: issuer.LoginRates{PerAddress: 2, PerCompany: 5},
		Proxies:    httpx.Proxies{Trusted: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}},
	})
	for _, slug := range []string{"alpha", "beta"} {
		env.CreateCompany(t, map[string]any{
			"slug":         slug,
			"organization": map[string]any{"name": "Company " + slug, "domain": slug + ".test"},
		})
	}
	b := env.Browser(t)
	pages := map[string]*peers.Page{}
	for _, slug := range []string{"alpha", "beta"} {
		pages[slug] = b.Get(env.PublicURL("/t/" + slug + "/account"))
		require.Equal(t, http.StatusOK, pages[slug].Status, "%s", pages[slug].Body)
	}
	attempt := func(slug, from string) int {
		t.Helper()
		form := url.Values{"csrf": {pages[slug].Field("csrf")}, "action": {"login"},
			"username": {"nobody"}, "password": {"wrong password"}}
		req, err := http.NewRequest(http.MethodPost, env.PublicURL("/t/"+slug+"/account"), strings.NewReader(form.Encode()))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("X-Forwarded-For", from)
		resp, err := b.Client.Do(req)
		require.NoError(t, err)
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusTooManyRequests {
			require.Equal(t, "60", resp.Header.Get("Retry-After"))
		}
		return resp.StatusCode
	}
	// One address: two attempts, then 429; its excess is not counted
	// against the Company.
	require.Equal(t, http.StatusBadRequest, attempt("alpha", "203.0.113.1"))
	require.Equal(t, http.StatusBadRequest, attempt("alpha", "203.0.113.1"))
	require.Equal(t, http.StatusTooManyRequests, attempt("alpha", "203.0.113.1"))
	require.Equal(t, http.StatusTooManyRequests, attempt("alpha", "203.0.113.1"))
	// An IPv6 /64 is one address.
	require.Equal(t, http.StatusBadRequest, attempt("alpha", "2001:db8:1:2::1"))
	require.Equal(t, http.StatusBadRequest, attempt("alpha", "2001:db8:1:2::ffff"))
	require.Equal(t, http.StatusTooManyRequests, attempt("alpha", "2001:db8:1:2::abcd"))
	// The fifth counted attempt uses up the Company's budget; whoever asks
	// next is refused.
	require.Equal(t, http.StatusBadRequest, attempt("alpha", "198.51.100.7"))
	require.Equal(t, http.StatusTooManyRequests, attempt("alpha", "2001:db8:1:3::1"))
	// Another Company's budget is its own, for the same addresses too.
	require.Equal(t, http.StatusBadRequest, attempt("beta", "203.0.113.1"))
	require.Equal(t, http.StatusBadRequest, attempt("beta", "198.51.100.7"))

	metrics := string(env.Do(t, http.MethodGet, env.PublicURL("/metrics"), nil).Body)
	require.Contains(t, metrics, `poppyhost_login_rate_limited_total{limit="address"} 3`)
	require.Contains(t, metrics, `poppyhost_login_rate_limited_total{limit="company"} 1`)
}
