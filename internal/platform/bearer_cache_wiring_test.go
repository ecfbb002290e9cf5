package platform_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/bearer"
	"github.com/poppyhost/poppyhost/internal/dpop"
	"github.com/poppyhost/poppyhost/internal/issuer"
	"github.com/poppyhost/poppyhost/internal/notify"
	"github.com/poppyhost/poppyhost/internal/sessions"
	"github.com/poppyhost/poppyhost/internal/signing"
	"github.com/poppyhost/poppyhost/internal/testkit/testdb"
)

// cachedReplica is one replica's Validator with its cache of verified
// tokens, its own listener and metrics, and the rig's routes on it.
type cachedReplica struct {
	routes http.Handler
	reg    *prometheus.Registry
	store  *issuer.Store
}

func (g *bearerRig) cachedReplica(t *testing.T) *cachedReplica {
	t.Helper()
	store := issuer.NewStore(g.env.Pool)
	v := bearer.New(signing.NewKeys(g.env.Pool, testdb.Sealer(g.env.Pool), signing.Options{}), store, sessions.NewStore(g.env.Pool),
		dpop.New(dpop.NewStore(g.env.Pool), dpop.Options{}), g.env.URLs, nil)
	l := notify.New(g.env.Pool, nil)
	r := &cachedReplica{reg: prometheus.NewRegistry(), store: store}
	require.NoError(t, v.CacheTokens(l, notify.CacheOptions{TTL: time.Hour}, r.reg))
	store.OnAccessRevoked(v.ForgetCompany)
	t.Cleanup(l.Start(context.Background()))
	require.Eventually(t, l.Connected, 10*time.Second, 10*time.Millisecond)
	r.routes = g.routesWith(v)
	return r
}

func (r *cachedReplica) hits(t *testing.T) float64 {
	t.Helper()
	mfs, err := r.reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			if mf.GetName() == "poppyhost_access_token_cache_lookups_total" && m.GetLabel()[0].GetValue() == "hit" {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

// call is g.call on the replica's routes.
func (r *cachedReplica) call(t *testing.T, g *bearerRig, sid, token string) int {
	t.Helper()
	saved := g.routes
	g.routes = r.routes
	defer func() { g.routes = saved }()
	return g.call(t, g.agent, "stormline", "/orders", sid, token).Code
}

// TestBearerTokenCacheAcrossReplicas: a replica verifies a token once and
// then serves it from its cache; a revocation made anywhere reaches every
// replica's cache by notification, and the replica whose store made it
// drops the Company's tokens when it commits; the other tokens of the
// account keep working.
func TestBearerTokenCacheAcrossReplicas(t *testing.T) {
	t.Parallel()
	g := setupBearerRig(t)
	a, b := g.cachedReplica(t), g.cachedReplica(t)
	ada := g.signIn(t, g.agent, "ada", []string{"orders:read"}, "")
	bob := g.signIn(t, g.agent, "bob", []string{"orders:read"}, "")
	for range 3 {
		require.Equal(t, http.StatusOK, a.call(t, g, sessID(), ada.AccessToken))
		require.Equal(t, http.StatusOK, b.call(t, g, sessID(), ada.AccessToken))
		require.Equal(t, http.StatusOK, b.call(t, g, sessID(), bob.AccessToken))
	}
	require.Equal(t, 2.0, a.hits(t), "verified once, then from the cache")
	require.Equal(t, 4.0, b.hits(t))

	// Revoked through the platform's issuer, which neither replica's
	// store saw: the notification tells both.
	g.revoke(t, g.agent, ada.RefreshToken)
	for _, r := range []*cachedReplica{a, b} {
		require.Eventually(t, func() bool {
			return r.call(t, g, sessID(), ada.AccessToken) == http.StatusUnauthorized
		}, 5*time.Second, 5*time.Millisecond, "the revocation reached the replica's cache")
	}
	require.Equal(t, http.StatusOK, b.call(t, g, sessID(), bob.AccessToken), "bob's token is untouched")

	// A revocation committed through replica a's own store takes effect
	// there at once.
	ctx := context.Background()
	require.Equal(t, http.StatusOK, a.call(t, g, sessID(), bob.AccessToken))
	require.NoError(t, a.store.Disconnect(ctx, g.companyID(t, "stormline"), g.accountID(t, "bob"), g.agent.ClientID))
	require.Equal(t, http.StatusUnauthorized, a.call(t, g, sessID(), bob.AccessToken), "refused on the next request")
	require.Eventually(t, func() bool {
		return b.call(t, g, sessID(), bob.AccessToken) == http.StatusUnauthorized
	}, 5*time.Second, 5*time.Millisecond)
}

// TestRevocationHookAfterCommit: OnAccessRevoked hears of a revocation only
// once it committed, so a cache that reloads then reads it as revoked.
func TestRevocationHookAfterCommit(t *testing.T) {
	t.Parallel()
	g := setupBearerRig(t)
	ada := g.signIn(t, g.agent, "ada", []string{"orders:read"}, "")
	store := issuer.NewStore(g.env.Pool)
	company := g.companyID(t, "stormline")
	heard := 0
	store.OnAccessRevoked(func(id int64) {
		heard++
		require.Equal(t, company, id)
		active, err := store.AccessTokenActive(context.Background(), id, issuer.Signature(ada.AccessToken), time.Now())
		require.NoError(t, err)
		require.False(t, active, "told before the revocation committed")
	})
	require.NoError(t, store.Disconnect(context.Background(), company, g.accountID(t, "ada"), g.agent.ClientID))
	require.Equal(t, 1, heard)
}

// companyID is the ID of the Company with slug.
func (g *bearerRig) companyID(t *testing.T, slug string) int64 {
	t.Helper()
	var id int64
	require.NoError(t, g.env.Pool.QueryRow(context.Background(), `SELECT id FROM companies WHERE slug = $1`, slug).Scan(&id))
	return id
}
