package e2e

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/devca"
	"github.com/poppyhost/poppyhost/internal/testkit/peers"
	"github.com/poppyhost/poppyhost/internal/testkit/testdb"
)

// TestOperationsServerRestart: a server restart in the middle of an
// approved operation loses nothing (extension 7; DESIGN.md, the origin
// contract). The server is killed with SIGKILL while the origin holds the
// approved call, which the origin then drops; a server started again on
// the same database runs the settle job scheduled in the claim's
// transaction, which sends the same request with the same
// Idempotency-Key; the origin performed the action once, and a retry of
// the approval gets the stored answer.
func TestOperationsServerRestart(t *testing.T) {
	t.Parallel()
	requireBuilt(t)
	dbURL, caDir := testdb.NewEmptyDatabase(t), t.TempDir()
	migrateUp(t, dbURL)
	ca, err := devca.Load(caDir)
	require.NoError(t, err)

	first := startServer(t, "server", dbURL, caDir, ca)
	first.waitReady(t, 30*time.Second)
	var current atomic.Pointer[server]
	current.Store(first)

	const company = publicURL + "/t/shop"
	resp := first.admin(t, http.MethodPost, "/admin/v1/companies", map[string]any{
		"slug":         "shop",
		"organization": map[string]any{"name": "Shop", "domain": "shop.example"},
		"operations":   map[string]any{"enabled": true},
	})
	require.Equal(t, http.StatusCreated, resp.status, "create company: %s", resp.body)

	x := &heldOrigin{answers: map[string]string{}, arrived: make(chan struct{}), release: make(chan struct{})}
	origin := peers.StartOrigin(t, ca, peers.OriginOptions{Host: "localhost", Issuer: company,
		JWKSURL: company + "/oauth/jwks.json", Client: currentClient(t, ca, &current)})
	origin.Handle(http.MethodPost, "/orders/o1/exchanges", x.serve)
	resp = first.admin(t, http.MethodPut, "/admin/v1/companies/shop/apis/orders", map[string]any{
		"origin": origin.BaseURL(), "openapi": exchangeDoc(), "timeout_seconds": 2})
	require.Contains(t, []int{http.StatusOK, http.StatusCreated}, resp.status, "register API: %s", resp.body)

	agent := peers.StartAgent(t, ca, peers.AgentOptions{Host: "localhost"})
	exchange := func(approval string) *http.Request {
		req, err := http.NewRequest(http.MethodPost, company+"/api/orders/orders/o1/exchanges",
			strings.NewReader(`{"item_id": "itm_4Qa", "replacement_sku": "stormline-insulated-m"}`))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Poppy-Extensions", `"operations";v="3"`)
		if approval != "" {
			req.Header.Set("Poppy-Approval", approval)
		}
		agent.Sign(t, req, peers.SessionClaims{Aud: company, SID: "e2e-operations-restart"}, peers.SessionOptions{})
		return req
	}

	// Signed out: approval_required.
	resp = first.do(t, exchange(""))
	require.Equal(t, http.StatusForbidden, resp.status, "%s", resp.body)
	var proposed struct {
		Error     string `json:"error"`
		Operation struct {
			OperationID string `json:"operation_id"`
			Revision    string `json:"revision"`
		} `json:"operation"`
	}
	require.NoError(t, json.Unmarshal(resp.body, &proposed))
	require.Equal(t, "approval_required", proposed.Error, "%s", resp.body)
	op := proposed.Operation
	approval := fmt.Sprintf(`operation_id=%q, revision=%q, approver="user", approved_at=1791487260, input_type="tap"`,
		op.OperationID, op.Revision)

	// The approval; the origin performs it and holds the answer while
	// the server is killed.
	sent := exchange(approval)
	lost := make(chan error, 1)
	go func() {
		resp, err := first.client.Do(sent)
		if err == nil {
			resp.Body.Close()
			err = fmt.Errorf("answered %d", resp.StatusCode)
		}
		lost <- err
	}()
	select {
	case <-x.arrived:
	case <-time.After(15 * time.Second):
		t.Fatal("the approved call did not reach the origin")
	}
	require.NoError(t, first.cmd.Process.Kill())
	<-first.done
	require.Error(t, <-lost, "the Personal Agent's request dies with the server")
	close(x.release) // the origin's answer is lost: the connection drops

	second := startServer(t, "server (restarted)", dbURL, caDir, ca)
	current.Store(second)
	second.waitReady(t, 30*time.Second)
	var done *response
	deadline := time.Now().Add(40 * time.Second)
	for {
		done = second.do(t, exchange(approval))
		if done.status != http.StatusServiceUnavailable {
			break
		}
		require.NotEmpty(t, done.header.Get("Retry-After"), "%s", done.body)
		require.True(t, time.Now().Before(deadline), "the settle job did not settle the operation")
		time.Sleep(500 * time.Millisecond)
	}
	require.Equal(t, http.StatusCreated, done.status, "%s", done.body)
	require.JSONEq(t, x.answer(), string(done.body))
	require.Equal(t, "/orders/o1/exchanges/ex_1", done.header.Get("Location"))

	keys, performed := x.calls()
	require.Equal(t, 1, performed, "performed once")
	require.Len(t, keys, 2, "the held call and the settle job's")
	for _, k := range keys {
		require.Equal(t, op.OperationID+"."+op.Revision, k, "the same Idempotency-Key")
	}
	// Later retries: the stored answer, the origin not asked again.
	again := second.do(t, exchange(approval))
	require.Equal(t, http.StatusCreated, again.status)
	require.Equal(t, string(done.body), string(again.body))
	keys, _ = x.calls()
	require.Len(t, keys, 2)

	resp = second.admin(t, http.MethodGet, "/admin/v1/companies/shop/operations", nil)
	require.Equal(t, http.StatusOK, resp.status, "%s", resp.body)
	var page struct {
		Operations []struct {
			OperationID string `json:"operation_id"`
			Status      string `json:"status"`
		} `json:"operations"`
	}
	require.NoError(t, json.Unmarshal(resp.body, &page))
	require.Len(t, page.Operations, 1)
	require.Equal(t, op.OperationID, page.Operations[0].OperationID)
	require.Equal(t, "performed", page.Operations[0].Status)
}

// heldOrigin is the Company's origin for the exchange: it proposes a
// request without an approval, performs once per Idempotency-Key, and
// holds its answer to the first approved call until release, then drops
// the connection.
type heldOrigin struct {
	mu        sync.Mutex
	answers   map[string]string // by Idempotency-Key
	keys      []string          // of each approved call
	performed int
	arrived   chan struct{} // closed when the first approved call arrives
	release   chan struct{}
}

func (x *heldOrigin) serve(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	if peers.OriginClaims(r).OperationID == "" {
		w.Header().Set("Content-Type", "application/poppy-proposal+json")
		_, _ = io.WriteString(w, `{"action_key": "exchange o1 itm_4Qa", "summary": "Exchange the jacket, $70.00 more.",
			"terms": {"order_id": "o1", "item_id": "itm_4Qa", "replacement_sku": "stormline-insulated-m"}}`)
		return
	}
	key := r.Header.Get("Idempotency-Key")
	x.mu.Lock()
	x.keys = append(x.keys, key)
	held := len(x.keys) == 1
	answer, ok := x.answers[key]
	if !ok {
		x.performed++
		answer = fmt.Sprintf(`{"exchange_id": "ex_%d"}`, x.performed)
		x.answers[key] = answer
	}
	x.mu.Unlock()
	if held {
		close(x.arrived)
		select {
		case <-x.release:
		case <-r.Context().Done(): // the server is gone, or the test ends
		}
		panic(http.ErrAbortHandler)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Location", "/orders/o1/exchanges/ex_1")
	w.WriteHeader(http.StatusCreated)
	_, _ = io.WriteString(w, answer)
}

// calls returns the Idempotency-Key of each approved call, and how many
// times the action was performed.
func (x *heldOrigin) calls() ([]string, int) {
	x.mu.Lock()
	defer x.mu.Unlock()
	return append([]string(nil), x.keys...), x.performed
}

// answer is the answer the performed action gave.
func (x *heldOrigin) answer() string {
	x.mu.Lock()
	defer x.mu.Unlock()
	for _, a := range x.answers {
		return a
	}
	return ""
}

// currentClient reaches the platform's public host on whichever server
// current holds, as a load balancer would: the origin fetches the
// Company's key set through it before and after the restart.
func currentClient(t *testing.T, ca *devca.CA, current *atomic.Pointer[server]) *http.Client {
	t.Helper()
	tr := &http.Transport{
		TLSClientConfig:   &tls.Config{RootCAs: ca.Pool(), ServerName: publicHost, MinVersion: tls.VersionTLS12},
		DisableKeepAlives: true,
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, "127.0.0.1:"+current.Load().port)
		},
	}
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}
}

// exchangeDoc is the OpenAPI description of the exchange: signed out
// (no security requirement), a JSON body.
func exchangeDoc() map[string]any {
	return map[string]any{
		"openapi": "3.0.3",
		"info":    map[string]any{"title": "Orders", "version": "1"},
		"paths": map[string]any{"/orders/{id}/exchanges": map[string]any{
			"parameters": []any{map[string]any{"name": "id", "in": "path", "required": true,
				"schema": map[string]any{"type": "string"}}},
			"post": map[string]any{"operationId": "createExchange", "security": []any{map[string]any{}},
				"requestBody": map[string]any{"content": map[string]any{"application/json": map[string]any{
					"schema": map[string]any{"type": "object"}}}},
				"responses": map[string]any{"201": map[string]any{"description": "Created"}}},
		}},
	}
}
