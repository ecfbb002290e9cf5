package agent

import (
	"context"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// fake is a Company on an httptest TLS server reached as example.com.
type fake struct {
	srv   *httptest.Server
	mux   *http.ServeMux
	agent *Agent
	ctx   context.Context
}

// newFake starts a Company whose poppy.json, resource metadata and
// issuer metadata edit can change, and an agent that trusts it. A
// "_status" member of the resource metadata is the status it answers
// with instead.
func newFake(t *testing.T, edit func(doc, prm, as map[string]any)) *fake {
	t.Helper()
	mux := http.NewServeMux()
	srv := httptest.NewUnstartedServer(mux)
	srv.EnableHTTP2 = true
	srv.StartTLS()
	t.Cleanup(srv.Close)
	base := "https://example.com:" + srv.URL[strings.LastIndex(srv.URL, ":")+1:]
	issuer := base + "/t/shop"
	doc := map[string]any{
		"protocol_version": "0.3",
		"organization":     map[string]any{"name": "Stormline Outfitters", "domain": "example.com"},
		"agent":            map[string]any{"protocols": []any{map[string]any{"type": "poppy", "endpoint": base + "/poppy/conversations"}}},
		"apis":             []any{map[string]any{"type": "openapi", "url": base + "/openapi.json"}},
		"extensions":       map[string]any{"operations": map[string]any{"version": "3", "endpoint": base + "/poppy/operations"}},
	}
	prm := map[string]any{"resource": "https://example.com", "authorization_servers": []any{issuer}}
	as := map[string]any{
		"issuer":                 issuer,
		"token_endpoint":         issuer + "/oauth/token",
		"revocation_endpoint":    issuer + "/oauth/revoke",
		"authorization_endpoint": issuer + "/oauth/authorize",
		"grant_types_supported":  []any{"authorization_code", "refresh_token"},
		"protected_resources":    []any{"https://example.com"},
	}
	if edit != nil {
		edit(doc, prm, as)
	}
	mux.HandleFunc("GET /.well-known/poppy.json", func(w http.ResponseWriter, _ *http.Request) { writeJSON(w, doc) })
	mux.HandleFunc("GET /.well-known/oauth-protected-resource", func(w http.ResponseWriter, _ *http.Request) {
		if status, ok := prm["_status"].(int); ok { // an edit's failing answer
			http.Error(w, "unavailable", status)
			return
		}
		writeJSON(w, prm)
	})
	mux.HandleFunc("GET /.well-known/oauth-authorization-server/t/shop", func(w http.ResponseWriter, _ *http.Request) { writeJSON(w, as) })

	caPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	a, err := New(Options{
		Host:         "127.0.0.1",
		TLS:          srv.TLS.Clone(),
		CAPEM:        caPEM,
		HostMap:      map[string]string{"example.com": srv.Listener.Addr().String()},
		AllowPrivate: true,
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = a.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return &fake{srv: srv, mux: mux, agent: a, ctx: ctx}
}

// domain is the host and port the agent discovers.
func (f *fake) domain() string {
	return "example.com:" + f.srv.URL[strings.LastIndex(f.srv.URL, ":")+1:]
}

// url is a URL on the fake Company.
func (f *fake) url(path string) string { return "https://" + f.domain() + path }
