package mcpserver

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/httpx"
	"github.com/poppyhost/poppyhost/internal/registry"
	"github.com/poppyhost/poppyhost/internal/tenant"
)

func testTools(updated time.Time) []*registry.Tool {
	var tools []*registry.Tool
	for _, n := range []string{"search_products", "size_help", "exchange_item"} {
		tools = append(tools, &registry.Tool{Name: n, Description: "d", UpdatedAt: updated,
			InputSchema: json.RawMessage(`{"type":"object","properties":{"q":{"type":"string","maxLength":200},"n":{"type":"integer","minimum":1}},"required":["q"]}`)})
	}
	return tools
}

// TestServersKeptPerToolSet: one server per Company and tool set, built
// again when a tool changes, and bounded.
func TestServersKeptPerToolSet(t *testing.T) {
	t.Parallel()
	var s servers
	a, b := &tenant.Company{ID: 1, Slug: "a"}, &tenant.Company{ID: 2, Slug: "b"}
	t0 := time.Unix(1_800_000_000, 0)
	warn := func(name string, err error) { t.Errorf("tool %s refused: %v", name, err) }
	first := s.get(a, testTools(t0), warn)
	require.Same(t, first, s.get(a, testTools(t0), warn))
	require.NotSame(t, first, s.get(b, testTools(t0), warn), "each Company its own")
	changed := s.get(a, testTools(t0.Add(time.Second)), warn)
	require.NotSame(t, first, changed, "a changed tool builds the server again")
	require.Same(t, changed, s.get(a, testTools(t0.Add(time.Second)), warn))
	for i := range maxServers + 5 {
		s.get(&tenant.Company{ID: int64(100 + i)}, testTools(t0), warn)
		require.LessOrEqual(t, len(s.m), maxServers)
	}
}

// BenchmarkMCPServer is what a request's SDK server costs (docs/
// benchmarks.md): built for the request, as before, or kept for the
// Company's tool set.
func BenchmarkMCPServer(b *testing.B) {
	co := &tenant.Company{ID: 1, Slug: "shop"}
	tools := testTools(time.Unix(1_800_000_000, 0))
	warn := func(string, error) {}
	b.Run("built", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var s servers
			s.get(co, tools, warn)
		}
	})
	b.Run("kept", func(b *testing.B) {
		var s servers
		s.get(co, tools, warn)
		b.ReportAllocs()
		for b.Loop() {
			s.get(co, tools, warn)
		}
	})
}

// TestRequestLog: the servers' log goes to the request's logger, with the
// attributes and groups the SDK adds to it.
func TestRequestLog(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	ctx := httpx.WithLogger(context.Background(), slog.New(slog.NewJSONHandler(&buf, nil)).With("request_id", "r1"))
	log := slog.New(requestLog{}).With("sdk", "go").WithGroup("g")
	log.InfoContext(ctx, "hello", "k", "v")
	require.JSONEq(t, `{"level":"INFO","msg":"hello","request_id":"r1","sdk":"go","g":{"k":"v"}}`,
		regexp.MustCompile(`"time":"[^"]*",`).ReplaceAllString(buf.String(), ""))
}
