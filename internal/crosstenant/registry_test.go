package crosstenant_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/registry"
)

func TestGateway(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	store := registry.NewStore(w.pool)
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	api := &registry.API{Name: "orders", Origin: "https://alpha.example", Description: "A's orders",
		OpenAPI: json.RawMessage(`{"openapi": "3.1.0"}`), TimeoutSeconds: 10, MaxRequestBytes: 1 << 20,
		MaxResponseBytes: 1 << 20}
	_, err := store.PutAPI(w.ctx, w.a.ID, api, t0)
	require.NoError(t, err)
	tool := &registry.Tool{Name: "track", Description: "A's tracking", InputSchema: json.RawMessage(`{"type": "object"}`),
		Scopes: []string{"orders"}, URL: "https://alpha.example/track", TimeoutSeconds: 10}
	_, err = store.PutTool(w.ctx, w.a.ID, tool, t0)
	require.NoError(t, err)

	// keptA checks, as A, that A's API and tool are as made.
	keptA := func(t *testing.T) {
		t.Helper()
		got, err := store.GetAPI(w.ctx, w.a.ID, "orders")
		require.NoError(t, err)
		require.Equal(t, api.Origin, got.Origin)
		require.Equal(t, api.Description, got.Description)
		require.True(t, t0.Equal(got.UpdatedAt))
		gotTool, err := store.GetTool(w.ctx, w.a.ID, "track")
		require.NoError(t, err)
		require.Equal(t, tool.URL, gotTool.URL)
		require.Equal(t, tool.Description, gotTool.Description)
		require.True(t, t0.Equal(gotTool.UpdatedAt))
	}

	for _, c := range []struct {
		method string
		call   func() error
	}{
		{"GetAPI", func() error { _, err := store.GetAPI(w.ctx, w.b.ID, "orders"); return err }},
		{"APIUpdatedAt", func() error { _, err := store.APIUpdatedAt(w.ctx, w.b.ID, "orders"); return err }},
		{"DeleteAPI", func() error { return store.DeleteAPI(w.ctx, w.b.ID, "orders") }},
		{"GetTool", func() error { _, err := store.GetTool(w.ctx, w.b.ID, "track"); return err }},
		{"DeleteTool", func() error { return store.DeleteTool(w.ctx, w.b.ID, "track") }},
	} {
		t.Run("registry.Store/"+c.method, func(t *testing.T) {
			require.ErrorIs(t, c.call(), registry.ErrNotFound)
			keptA(t)
		})
	}
	for _, c := range []struct {
		method string
		count  func() (int, error)
	}{
		{"ListAPIs", func() (int, error) { l, err := store.ListAPIs(w.ctx, w.b.ID); return len(l), err }},
		{"ListAPINames", func() (int, error) { l, err := store.ListAPINames(w.ctx, w.b.ID); return len(l), err }},
		{"ListTools", func() (int, error) { l, err := store.ListTools(w.ctx, w.b.ID); return len(l), err }},
		{"HasTools", func() (int, error) {
			has, err := store.HasTools(w.ctx, w.b.ID)
			if has {
				return 1, err
			}
			return 0, err
		}},
	} {
		t.Run("registry.Store/"+c.method, func(t *testing.T) {
			n, err := c.count()
			require.NoError(t, err)
			require.Zero(t, n, "none of A's")
			keptA(t)
		})
	}
	// Before B has registrations of its own: the conditional puts see
	// none, never A's.
	t.Run("registry.Store/PutAPIIf", func(t *testing.T) {
		b := *api
		b.Origin, b.Description = "https://bravo.example", "B's orders"
		created, err := store.PutAPIIf(w.ctx, w.b.ID, &b, t0.Add(time.Hour), func(cur *registry.API) error {
			require.Nil(t, cur, "A's API seen as B's")
			return nil
		})
		require.NoError(t, err)
		require.True(t, created, "B's own API, not a replacement of A's")
		keptA(t)
	})
	t.Run("registry.Store/PutToolIf", func(t *testing.T) {
		b := *tool
		b.URL, b.Description = "https://bravo.example/track", "B's tracking"
		created, err := store.PutToolIf(w.ctx, w.b.ID, &b, t0.Add(time.Hour), func(cur *registry.Tool) error {
			require.Nil(t, cur, "A's tool seen as B's")
			return nil
		})
		require.NoError(t, err)
		require.True(t, created, "B's own tool, not a replacement of A's")
		keptA(t)
	})
	require.NoError(t, store.DeleteAPI(w.ctx, w.b.ID, "orders"))
	require.NoError(t, store.DeleteTool(w.ctx, w.b.ID, "track"))
	t.Run("registry.Store/PutAPI", func(t *testing.T) {
		b := *api
		b.Origin, b.Description = "https://bravo.example", "B's orders"
		created, err := store.PutAPI(w.ctx, w.b.ID, &b, t0.Add(time.Hour))
		require.NoError(t, err)
		require.True(t, created, "B's own API, not a replacement of A's")
		keptA(t)
	})
	t.Run("registry.Store/PutTool", func(t *testing.T) {
		b := *tool
		b.URL, b.Description = "https://bravo.example/track", "B's tracking"
		created, err := store.PutTool(w.ctx, w.b.ID, &b, t0.Add(time.Hour))
		require.NoError(t, err)
		require.True(t, created, "B's own tool, not a replacement of A's")
		keptA(t)
	})
}
