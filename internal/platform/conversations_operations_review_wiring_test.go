package platform_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/registry"
)

// TestOperationsConversationNotAllowed: the request a proposal names must
// be one the gateway would forward for the approving Session; one needing
// a scope the Session lacks ends as not_allowed, the origin never called,
// the job not retried.
func TestOperationsConversationNotAllowed(t *testing.T) {
	t.Parallel()
	s := newConvOpsSide(t, "conv-not-allowed", convOpsOptions{})
	token := s.signIn(t, "ada") // orders:write only
	id := s.start(t, convOpsReq{Token: token})
	refund := convProposal("stormline-insulated-m")
	refund["action_key"] = "refund o1"
	refund["perform"].(map[string]any)["path"] = "/orders/o1/refunds"
	op := s.propose(t, id, refund)

	resp := s.pa(t, http.MethodPost, "/"+id+"/messages", convApprovalMsg("msg_ok", op, nil), convOpsReq{Token: token})
	require.Equal(t, http.StatusAccepted, resp.Status, "%s", resp.Body)
	out := s.outcomes(t, 1)[0]
	require.Equal(t, "not_allowed", out["status"], "%v", out)
	require.Contains(t, out["description"], "scopes")
	require.Nil(t, out["response"])
	require.Empty(t, s.origin.Received(), "the origin was not called")
	s.settled(t, 1)
	var attempts int
	require.NoError(t, s.env.Pool.QueryRow(context.Background(), `SELECT attempt FROM river_job
		WHERE kind = 'conversations_perform_operation'`).Scan(&attempts))
	require.Equal(t, 1, attempts, "refused at once, not retried")
}

// TestOperationsConversationDeclaredByHeader: Poppy-Extensions declares
// the extension in a conversation as client metadata does (extension 2),
// in its one form, "operations";v="3": a Token name or an Integer version
// declares nothing (RFC 9651 §3.3), so the Company cannot propose.
func TestOperationsConversationDeclaredByHeader(t *testing.T) {
	t.Parallel()
	s := newConvOpsSide(t, "conv-header", convOpsOptions{undeclared: true})
	for i, form := range []string{"operations;v=3", `operations;v="3"`, `"operations";v=3`} {
		id := s.startWith(t, map[string]any{"message": convPAMsg("msg_form"+strconv.Itoa(i), "I'd like the insulated jacket instead.")},
			convOpsReq{Header: []string{"Poppy-Extensions", form}})
		resp := s.api(t, http.MethodPost, "/"+id+"/messages", convOfferMsg("", map[string]any{"proposal": convProposal("stormline-insulated-m")}))
		require.Equal(t, http.StatusConflict, resp.Status, "%s: %s", form, resp.Body)
		require.Contains(t, string(resp.Body), "does not declare the Operations extension", form)
	}

	declared := convOpsReq{Header: []string{"Poppy-Extensions", `"operations";v="3"`}}
	id := s.start(t, declared)
	op := s.propose(t, id, convProposal("stormline-insulated-m"))
	resp := s.pa(t, http.MethodPost, "/"+id+"/messages", convApprovalMsg("msg_ok", op, nil), declared)
	require.Equal(t, http.StatusAccepted, resp.Status, "%s", resp.Body)
	out := s.outcomes(t, 1)[0]
	require.Equal(t, "performed", out["status"], "%v", out)
	require.Equal(t, int32(1), s.x.performed.Load())

}

// TestOperationsConversationRejectedKeepsRevision: a proposal whose
// message is refused (too large with its operation) proposes nothing: the
// revision sent before stays current and its approval performs.
func TestOperationsConversationRejectedKeepsRevision(t *testing.T) {
	t.Parallel()
	s := newConvOpsSide(t, "conv-rejected", convOpsOptions{})
	id := s.start(t, convOpsReq{})
	op := s.propose(t, id, convProposal("stormline-insulated-m"))
	events := s.eventCount(t, id)

	// Other terms in a message just small enough as sent, and too large
	// once its operation replaces the proposal.
	other := convProposal("stormline-parka-m")
	other["action_key"], other["perform"].(map[string]any)["body"] = "x", nil
	msg := convOfferMsg("", map[string]any{"proposal": other})
	raw, err := json.Marshal(msg)
	require.NoError(t, err)
	var resp map[string]any
	for n := 32<<10 - len(raw) + 300; n > 0; n-- {
		msg["message"].(map[string]any)["text"] = strings.Repeat("a", n)
		r := s.api(t, http.MethodPost, "/"+id+"/messages", msg)
		require.Equal(t, http.StatusBadRequest, r.Status, "text of %d bytes: accepted", n)
		resp = r.JSON(t)
		if !strings.Contains(resp["error_description"].(string), "the message is larger") {
			break
		}
	}
	require.Contains(t, resp["error_description"], "with its operation")
	require.Equal(t, events, s.eventCount(t, id), "nothing stored")
	var revisions int
	require.NoError(t, s.env.Pool.QueryRow(context.Background(), `SELECT count(*) FROM operation_revisions
		WHERE company_id = $1`, s.id).Scan(&revisions))
	require.Equal(t, 1, revisions, "nothing proposed")

	require.Equal(t, http.StatusAccepted, s.pa(t, http.MethodPost, "/"+id+"/messages", convApprovalMsg("msg_ok", op, nil), convOpsReq{}).Status)
	out := s.outcomes(t, 1)[0]
	require.Equal(t, "performed", out["status"], "%v", out)
}

// convApprovalHook is a Company's approval hook: it declines, fails or lets
// approvals through.
type convApprovalHook struct {
	mode  atomic.Value // "ok", "decline" or "fail"
	calls atomic.Int32
}

func (h *convApprovalHook) serve(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	h.calls.Add(1)
	switch h.mode.Load() {
	case "decline":
		w.Header().Set("Content-Type", "application/poppy-decline+json")
		_, _ = io.WriteString(w, `{"reason": "Exchanges over $50 need a store manager."}`)
	case "fail":
		w.WriteHeader(http.StatusInternalServerError)
	default:
		w.WriteHeader(http.StatusNoContent)
	}
}

// TestOperationsConversationApprovalHook: the Company's approval hook is
// asked about a conversation's approval: a decline is a declined outcome
// with its reason; a hook that keeps failing ends in failed_to_check.
// Nothing reaches the origin either way.
func TestOperationsConversationApprovalHook(t *testing.T) {
	t.Parallel()
	s := newConvOpsSide(t, "conv-hook", convOpsOptions{})
	h := &convApprovalHook{}
	h.mode.Store("decline")
	hook := s.env.StartOrigin(t, "hook-conv-hook.test", s.issuer, s.issuer)
	hook.Handle(http.MethodPost, "/", h.serve)
	patched := s.env.Admin(t, http.MethodPatch, "/admin/v1/companies/"+convOpsSlug,
		map[string]any{"operations": map[string]any{"enabled": true, "approval_hook": hook.BaseURL()}})
	require.Equal(t, http.StatusOK, patched.Status, "%s", patched.Body)

	id := s.start(t, convOpsReq{})
	op := s.propose(t, id, convProposal("stormline-insulated-m"))
	require.Equal(t, http.StatusAccepted, s.pa(t, http.MethodPost, "/"+id+"/messages", convApprovalMsg("msg_declined", op, nil), convOpsReq{}).Status)
	out := s.outcomes(t, 1)[0]
	require.Equal(t, "declined", out["status"], "%v", out)
	require.Equal(t, map[string]any{"reason": "Exchanges over $50 need a store manager."}, out["decline"])

	h.mode.Store("fail")
	parka := convProposal("stormline-parka-m")
	parka["action_key"] = "exchange o1 parka"
	op2 := s.propose(t, id, parka)
	started := time.Now()
	require.Equal(t, http.StatusAccepted, s.pa(t, http.MethodPost, "/"+id+"/messages", convApprovalMsg("msg_failed", op2, nil), convOpsReq{}).Status)
	got := convByMessage(s.outcomes(t, 2))
	require.Equal(t, "failed_to_check", got["msg_failed"]["status"], "%v", got["msg_failed"])
	require.NotEmpty(t, got["msg_failed"]["description"])
	require.Greater(t, h.calls.Load(), int32(2), "the hook was retried")
	require.Less(t, time.Since(started), 40*time.Second)
	require.Empty(t, s.origin.Received(), "nothing performed")

	// The approval was not used up: once the hook answers, it performs.
	h.mode.Store("ok")
	require.Equal(t, http.StatusAccepted, s.pa(t, http.MethodPost, "/"+id+"/messages", convApprovalMsg("msg_ok", op2, nil), convOpsReq{}).Status)
	got = convByMessage(s.outcomes(t, 3))
	require.Equal(t, "performed", got["msg_ok"]["status"], "%v", got["msg_ok"])
}

// TestOperationsConversationAPIRemoved: an approval whose API was removed
// after the proposal is not lost: not_allowed at once, saying why,
// nothing performed.
func TestOperationsConversationAPIRemoved(t *testing.T) {
	t.Parallel()
	s := newConvOpsSide(t, "conv-api-removed", convOpsOptions{})
	id := s.start(t, convOpsReq{})
	op := s.propose(t, id, convProposal("stormline-insulated-m"))
	require.NoError(t, registry.NewStore(s.env.Pool).DeleteAPI(context.Background(), s.id, "orders"))
	require.Equal(t, http.StatusAccepted, s.pa(t, http.MethodPost, "/"+id+"/messages", convApprovalMsg("msg_ok", op, nil), convOpsReq{}).Status)
	out := s.outcomes(t, 1)[0]
	require.Equal(t, "not_allowed", out["status"], "%v", out)
	require.Contains(t, out["description"], "no longer offered", "%v", out)
	require.Empty(t, s.origin.Received())
}
