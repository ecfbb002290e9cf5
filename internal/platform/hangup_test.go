package platform_test

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/testkit"
	"github.com/poppyhost/poppyhost/internal/testkit/peers"
)

// TestClientHangUpIsNotAServerError: a client that cancels its request
// while the handler waits on the database (a table lock held by the test)
// is counted with status 499, and nothing is logged at ERROR level: the
// hang-up is the client's doing (issue 25, item 4).
func TestClientHangUpIsNotAServerError(t *testing.T) {
	t.Parallel()
	logs := &peers.SyncBuffer{}
	env := testkit.SetupWith(t, testkit.Options{Logs: logs, LogLevel: slog.LevelDebug})
	env.CreateCompany(t, map[string]any{"slug": "shop", "organization": map[string]any{"name": "Shop", "domain": "shop.example"},
		"feedback": map[string]any{"enabled": true}})

	ctx := context.Background()
	tx, err := env.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = tx.Exec(ctx, `LOCK TABLE feedback IN ACCESS EXCLUSIVE MODE`)
	require.NoError(t, err)

	reqCtx, cancel := context.WithCancel(ctx)
	req := peers.NewRequest(t, http.MethodGet, env.PublicURL("/admin/v1/companies/shop/feedback"), nil).WithContext(reqCtx)
	req.Header.Set("Authorization", "Bearer "+testkit.AdminToken)
	done := make(chan error, 1)
	go func() {
		resp, err := env.Client.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		done <- err
	}()
	// The handler's query waits for the lock.
	waitUntil(t, 20*time.Second, "the feedback query waits for the lock", func() bool {
		var n int
		require.NoError(t, env.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE wait_event_type = 'Lock' AND query LIKE '%FROM feedback%'`).Scan(&n))
		return n > 0
	})
	cancel()
	require.ErrorIs(t, <-done, context.Canceled)
	waitUntil(t, 20*time.Second, "the cancelled request's access log", func() bool {
		return strings.Contains(logs.String(), `"status":499`)
	})
	require.NoError(t, tx.Rollback(ctx))

	for _, line := range strings.Split(logs.String(), "\n") {
		require.NotContains(t, line, `"level":"ERROR"`, "a hang-up logged as an error")
	}
	metrics := env.Probe(t, "/metrics")
	require.Contains(t, string(metrics.Body),
		`poppyhost_http_requests_total{method="GET",route="/admin/v1/companies/{slug}/feedback",status="499"} 1`)
	require.NotContains(t, string(metrics.Body), `status="500"`)
}

// TestReadyzCancelledIsNotDatabaseDown: a readiness check whose prober has
// hung up says nothing about the database, and does not log that it is
// unreachable.
func TestReadyzCancelledIsNotDatabaseDown(t *testing.T) {
	t.Parallel()
	logs := &peers.SyncBuffer{}
	env := testkit.SetupWith(t, testkit.Options{Logs: logs, LogLevel: slog.LevelDebug})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	req := httptest.NewRequest(http.MethodGet, env.Ops+"/readyz", nil).WithContext(ctx)
	rec := httptest.NewRecorder()
	env.Platform.OpsHandler().ServeHTTP(rec, req)
	require.Equal(t, 499, rec.Code, "%s", rec.Body)
	require.NotContains(t, logs.String(), "database unreachable")
	require.NotContains(t, logs.String(), `"level":"ERROR"`)
	require.NotContains(t, logs.String(), `"level":"WARN"`)

	// The same check with the client still there is ready.
	resp := env.Probe(t, "/readyz")
	require.Equal(t, http.StatusOK, resp.Status, "%s", resp.Body)
}

func waitUntil(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s", what, within)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
