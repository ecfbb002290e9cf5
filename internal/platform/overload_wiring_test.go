package platform_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/overload"
	"github.com/poppyhost/poppyhost/internal/platform"
	"github.com/poppyhost/poppyhost/internal/testkit"
)

// TestOverloadShedsBeforeAnySideEffect: a replica that counts itself
// overloaded (here any scheduling latency at all is too much) answers
// new public requests 503 unavailable with Retry-After, before anything
// runs: a Company the admin API was asked to create is not created. The
// operations listener, which probes and scrapers use, is never shed, and
// its metrics count what was shed.
func TestOverloadShedsBeforeAnySideEffect(t *testing.T) {
	t.Parallel()
	env := testkit.SetupWith(t, testkit.Options{Platform: func(o *platform.Options) {
		o.Overload = overload.Options{Delay: time.Nanosecond, Every: 10 * time.Millisecond}
	}})
	ctx := context.Background()

	var shed string
	require.Eventually(t, func() bool {
		slug := fmt.Sprintf("shed%d", time.Now().UnixNano())
		resp := env.Admin(t, http.MethodPost, "/admin/v1/companies", map[string]any{"slug": slug,
			"organization": map[string]any{"name": "Shed", "domain": slug + ".example"}})
		if resp.Status != http.StatusServiceUnavailable {
			require.Equal(t, http.StatusCreated, resp.Status, "%s", resp.Body)
			return false
		}
		require.Equal(t, "1", resp.Header.Get("Retry-After"))
		body := resp.JSON(t)
		require.Equal(t, "unavailable", body["error"], "%s", resp.Body)
		require.NotEmpty(t, body["request_id"])
		shed = slug
		return true
	}, 30*time.Second, 5*time.Millisecond, "the share shed rises while every sample is over the delay")

	var n int
	require.NoError(t, env.Pool.QueryRow(ctx, `SELECT count(*) FROM companies WHERE slug = $1`, shed).Scan(&n))
	require.Zero(t, n, "a shed request did nothing")

	get := func(path string) (int, string) {
		resp, err := http.Get(env.Ops + path)
		require.NoError(t, err)
		defer resp.Body.Close()
		raw, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, string(raw)
	}
	for range 20 {
		status, body := get("/readyz")
		require.Equal(t, http.StatusOK, status, "the operations listener is never shed: %s", body)
	}
	_, metrics := get("/metrics")
	m := regexp.MustCompile(`(?m)^poppyhost_requests_shed_total (\S+)$`).FindStringSubmatch(metrics)
	require.NotNil(t, m, "the shed count is exported")
	count, err := strconv.ParseFloat(m[1], 64)
	require.NoError(t, err)
	require.GreaterOrEqual(t, count, 1.0)
	require.Regexp(t, `(?m)^poppyhost_shed_share 0\.\d+$`, metrics)
	require.Regexp(t, `(?m)^poppyhost_scheduling_latency_p90_seconds \S+$`, metrics)
	require.Regexp(t, `(?m)^poppyhost_db_acquire_mean_seconds \S+$`, metrics)
}
