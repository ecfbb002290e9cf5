package browserjoin

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/tenant"
	"github.com/poppyhost/poppyhost/internal/testkit/testdb"
)

// newTestStore returns a Store on a fresh database and the IDs of two
// Companies on it.
func newTestStore(t *testing.T) (s *Store, shop, mall int64) {
	t.Helper()
	pool := testdb.NewPool(t)
	tenants := tenant.NewStore(pool)
	ids := make([]int64, 2)
	for i, slug := range []string{"shop", "mall"} {
		settings := tenant.DefaultSettings()
		settings.Organization = tenant.Organization{Name: slug, Domain: slug + ".example"}
		c, err := tenants.Create(context.Background(), slug, settings)
		require.NoError(t, err)
		ids[i] = c.ID
	}
	return NewStore(pool), ids[0], ids[1]
}

// TestCodeIsUsedOnce holds the store to spec 6's code rules: step 2
// authorizes a code once, while unexpired, for the domain it was issued
// for and at its own Company; step 3 uses it up whatever happens and
// returns the grant only for the browser it is tied to, on that domain,
// once authorized and before it expires.
func TestCodeIsUsedOnce(t *testing.T) {
	t.Parallel()
	s, shop, mall := newTestStore(t)
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Microsecond)
	grant := &Grant{ClientID: "https://agent.test/agent.json", SID: "sid-1", AccountID: 0,
		Scopes: []string{"orders:read"}, Extensions: map[string]string{"a.test/x": "1"}}

	type step struct {
		company         int64
		domain, browser string
		at              time.Duration
	}
	ok := step{shop, "shop.example", "browser-1", time.Second}
	tests := []struct {
		name      string
		authorize *step // nil: never authorized
		submit    step
		authOK    bool
		joined    bool
	}{
		{name: "authorized, then submitted by its browser", authorize: &ok, submit: ok, authOK: true, joined: true},
		{name: "never authorized", submit: ok},
		{name: "authorized for another domain", authorize: &step{shop, "www.shop.example", "", time.Second}, submit: ok},
		{name: "authorized at another Company", authorize: &step{mall, "shop.example", "", time.Second}, submit: ok},
		{name: "authorized after it expired", authorize: &step{shop, "shop.example", "", 2 * time.Minute}, submit: ok},
		{name: "submitted by another browser", authorize: &ok, authOK: true, submit: step{shop, "shop.example", "browser-2", time.Second}},
		{name: "submitted without a browser", authorize: &ok, authOK: true, submit: step{shop, "shop.example", "", time.Second}},
		{name: "submitted on another domain", authorize: &ok, authOK: true, submit: step{shop, "www.shop.example", "browser-1", time.Second}},
		{name: "submitted at another Company", authorize: &ok, authOK: true, submit: step{mall, "shop.example", "browser-1", time.Second}},
		{name: "submitted after it expired", authorize: &ok, authOK: true, submit: step{shop, "shop.example", "browser-1", time.Minute}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code := "code-" + tt.name
			require.NoError(t, s.newCode(ctx, shop, code, "shop.example", "browser-1", now, now.Add(time.Minute)))
			if tt.authorize != nil {
				a := tt.authorize
				done, err := s.authorize(ctx, a.company, code, a.domain, grant, now.Add(a.at))
				require.NoError(t, err)
				require.Equal(t, tt.authOK, done)
				if done {
					again, err := s.authorize(ctx, shop, code, "shop.example", grant, now.Add(a.at))
					require.NoError(t, err)
					require.False(t, again, "a code is authorized once")
				}
			}
			sub := tt.submit
			g, err := s.submit(ctx, sub.company, code, sub.domain, sub.browser, now.Add(sub.at))
			if !tt.joined {
				require.ErrorIs(t, err, errCode)
				require.Nil(t, g)
			} else {
				require.NoError(t, err)
				require.Equal(t, &Grant{ClientID: grant.ClientID, SID: grant.SID, Scopes: grant.Scopes,
					Extensions: grant.Extensions}, g)
			}
			// Used up whatever happened, when it was submitted at its
			// Company.
			if sub.company == shop {
				_, err = s.submit(ctx, shop, code, "shop.example", "browser-1", now.Add(time.Second))
				require.ErrorIs(t, err, errCode, "a code is submitted once")
			}
		})
	}
}

// TestSweepDeletesExpiredCodes: the sweep deletes the codes that expired
// before its cutoff, at every Company, and no other.
func TestSweepDeletesExpiredCodes(t *testing.T) {
	t.Parallel()
	s, shop, mall := newTestStore(t)
	ctx := context.Background()
	now := time.Now()
	codes := []struct {
		company int64
		code    string
		expires time.Time
		kept    bool
	}{
		{shop, "shop-stale", now.Add(-2 * time.Hour), false},
		{mall, "mall-stale", now.Add(-90 * time.Minute), false},
		{shop, "shop-recent", now.Add(-30 * time.Minute), true},
		{shop, "shop-live", now.Add(time.Minute), true},
	}
	for _, c := range codes {
		require.NoError(t, s.newCode(ctx, c.company, c.code, "shop.example", "b", now.Add(-3*time.Hour), c.expires))
	}
	n, err := Sweeps(s)[0].Run(ctx, now.Add(-time.Hour))
	require.NoError(t, err)
	require.EqualValues(t, 2, n)
	for _, c := range codes {
		var left int
		require.NoError(t, s.pool.QueryRow(ctx, `SELECT count(*) FROM browser_join_codes WHERE company_id = $1 AND code = $2`,
			c.company, hash(c.code)).Scan(&left))
		require.Equal(t, c.kept, left == 1, c.code)
	}
}
