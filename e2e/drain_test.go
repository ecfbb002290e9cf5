package e2e

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/devca"
	"github.com/poppyhost/poppyhost/internal/testkit/testdb"
)

// TestDrainDelay: with POPPYHOST_DRAIN_DELAY, a server told to stop
// answers /readyz 503 at once on its operations listener and keeps serving
// requests on its public listener for the delay,
// for load balancers that poll readiness, then stops listening and exits
// cleanly (docs/operations.md, "Graceful shutdown").
func TestDrainDelay(t *testing.T) {
	requireBuilt(t)
	dbURL := testdb.NewEmptyDatabase(t)
	migrateUp(t, dbURL)
	caDir := t.TempDir()
	ca, err := devca.Load(caDir)
	require.NoError(t, err)
	s := startServerEnv(t, "server", dbURL, caDir, ca, map[string]string{"POPPYHOST_DRAIN_DELAY": "3s"})
	s.waitReady(t, 30*time.Second)
	resp := s.admin(t, http.MethodPost, "/admin/v1/companies", companyBody("shop"))
	require.Equal(t, http.StatusCreated, resp.status, "%s", resp.body)
	// Readiness is the operations listener's, not the public one's.
	public := s.do(t, mustRequest(t, http.MethodGet, publicURL+"/readyz", nil))
	require.Equal(t, http.StatusNotFound, public.status, "%s", public.body)

	stopped := time.Now()
	s.terminate(t)
	waitFor(t, 2*time.Second, "/readyz 503 once told to stop", func() bool {
		return s.probe("/readyz") == http.StatusServiceUnavailable
	})
	// Still serving while the delay runs.
	got := s.admin(t, http.MethodGet, "/admin/v1/companies/shop", nil)
	require.Equal(t, http.StatusOK, got.status, "%s", got.body)
	require.Less(t, time.Since(stopped), 3*time.Second, "the checks ran within the delay")
	require.NoError(t, s.waitExit(t, 20*time.Second))
	require.GreaterOrEqual(t, time.Since(stopped), 3*time.Second, "the listener stayed open for the delay")
}
