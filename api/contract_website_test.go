package api

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	webops "github.com/poppyhost/poppyhost/internal/operations"
	"github.com/poppyhost/poppyhost/internal/testkit/peers"
)

// contractWebsiteOperations drives the operations of a Company's website.
func contractWebsiteOperations(t *testing.T, c *contract, f *fixture) {
	env, agent := f.env, f.agent

	t.Run("website operations", func(t *testing.T) {
		// A Company whose website uses operations (Operations extension 4,
		// 6, "Websites"); the operations its website would return are made
		// in its store, as the website proxy makes them.
		c.do(t, call{method: post, path: "/admin/v1/companies", token: admin, want: 201, body: map[string]any{
			"slug": "webops", "organization": map[string]any{"name": "Web Ops", "domain": "webops.example"},
			"web":        map[string]any{"browser_join": true, "origin": "https://www.webops.example"},
			"operations": map[string]any{"enabled": true, "web": true},
		}})
		ctx := context.Background()
		webIssuer, path := env.PublicURL("/t/webops"), "/t/webops/poppy/operations"
		in := func(req *http.Request) {
			agent.Sign(t, req, peers.SessionClaims{Aud: webIssuer, SID: "contract-webops"}, peers.SessionOptions{})
			if req.Header.Get("Poppy-Extensions") == "" {
				req.Header.Set("Poppy-Extensions", `"operations";v="3"`)
			}
		}
		var companyID int64
		require.NoError(t, env.Pool.QueryRow(ctx, `SELECT id FROM companies WHERE slug = 'webops'`).Scan(&companyID))
		store := webops.NewStore(env.Pool)
		propose := func(key string, account int64) (*webops.Operation, string) {
			op, err := store.Propose(ctx, companyID, webops.Owner{ClientID: agent.ClientID, UserID: "usr_test", AccountID: account},
				webops.InterfaceWeb, "web", &webops.Proposal{ActionKey: key, Terms: json.RawMessage(`{"sku": "m"}`)},
				&webops.Request{Method: post, Path: "/orders/o1/exchange", Body: []byte("sku=m")}, "", time.Now())
			require.NoError(t, err)
			return op, webops.Ref(op.OperationID, op.Revision)
		}
		approve := func(op *webops.Operation) map[string]string {
			return map[string]string{"Poppy-Approval": fmt.Sprintf(`operation_id=%q, revision=%q, approver="user"`, op.OperationID, op.Revision)}
		}
		refBody := func(ref string) map[string]string { return map[string]string{"ref": ref} }

		op, ref := propose("exchange", 0)
		r := c.do(t, call{method: post, path: path, session: in, body: refBody(ref), want: 403})
		assert.Equal(t, op.OperationID, r.JSON(t)["operation"].(map[string]any)["operation_id"])
		r = c.do(t, call{method: post, path: path, session: in, body: refBody(op.OperationID + ".nosuch"), want: 400})
		// Undeclared: no operation (Operations extension 2).
		undeclared := func(req *http.Request) {
			req.Header.Set("Poppy-Extensions", `"gift-wrap";v="1"`)
			in(req)
		}
		assert.Equal(t, "extension_required", c.do(t, call{method: post, path: path, session: undeclared, body: refBody(ref),
			want: 403}).JSON(t)["error"])
		assert.Equal(t, "invalid_request", r.JSON(t)["error"])
		c.do(t, call{method: post, path: path, session: in, body: refBody(ref), header: map[string]string{"Poppy-Approval": `operation_id="x"`}, want: 400})
		c.do(t, call{method: post, path: path, session: in, body: padded(t, refBody(ref), 8<<10), want: 413})
		c.do(t, call{method: post, path: path, session: in, body: `{"ref":"x"}`, ctype: "text/plain", want: 415, docRejects: true})
		c.do(t, call{method: post, path: path, session: in, body: refBody(ref), header: approve(op), want: 204})
		r = c.do(t, call{method: post, path: path, session: in, body: refBody(ref), want: 200})
		assert.Equal(t, map[string]any{"operation_id": op.OperationID, "status": "approved"}, r.JSON(t))
		// An account's operation, signed out: a challenge.
		_, accountRef := propose("close", 7)
		r = c.do(t, call{method: post, path: path, session: in, body: refBody(accountRef), want: 401})
		assert.NotEmpty(t, r.Header.Get("WWW-Authenticate"))

		// The approval hook declines, or cannot be reached: nothing recorded.
		hook := env.StartOrigin(t, "hook-webops.test", webIssuer, webIssuer)
		hook.Handle(post, "/", func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/poppy-decline+json")
			_, _ = io.WriteString(w, `{"reason": "Not online."}`)
		})
		for _, h := range []struct {
			url        string
			want, then int // the approval's answer, then the ref's
		}{{hook.BaseURL(), 403, 403}, {"https://down.test/hook", 502, 403}} {
			c.do(t, call{method: patch, path: "/admin/v1/companies/webops", token: admin, want: 200,
				body: map[string]any{"operations": map[string]any{"enabled": true, "web": true, "approval_hook": h.url}}})
			op, ref := propose("return "+h.url, 0)
			c.do(t, call{method: post, path: path, session: in, body: refBody(ref), header: approve(op), want: h.want})
			c.do(t, call{method: post, path: path, session: in, body: refBody(ref), want: h.then})
		}
		doc := c.do(t, call{method: get, host: "webops.example", path: "/.well-known/poppy.json", want: 200}).JSON(t)
		assert.Equal(t, map[string]any{"version": "3", "endpoint": webIssuer + "/poppy/operations"},
			doc["extensions"].(map[string]any)["operations"])

		// Off: 404, and poppy.json lists no endpoint.
		c.do(t, call{method: patch, path: "/admin/v1/companies/webops", token: admin, want: 200,
			body: map[string]any{"operations": map[string]any{"enabled": true, "web": false}}})
		c.do(t, call{method: post, path: path, session: in, body: refBody(ref), want: 404})
		doc = c.do(t, call{method: get, host: "webops.example", path: "/.well-known/poppy.json", want: 200}).JSON(t)
		assert.Equal(t, map[string]any{"version": "3"}, doc["extensions"].(map[string]any)["operations"])
	})
}
