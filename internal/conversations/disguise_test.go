package conversations_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestFreeTextCannotDisguise: every free text of a conversation that the
// Company's people, its Company Agent or the User read is refused, with
// nothing stored, when it holds a code point that can make it read
// otherwise than it is (httpx.Disguising): from the Company side and from
// the Personal Agent's.
func TestFreeTextCannotDisguise(t *testing.T) {
	t.Parallel()
	cs := newCompanySide(t, companyOptions{})
	id := cs.paStart(t, "msg_1", "I need a person")
	require.Equal(t, http.StatusAccepted, cs.pa(t, http.MethodPost, "/"+id+"/handoff", map[string]any{}).Status)
	cursor := func() any { return cs.api(t, http.MethodGet, "/"+id, nil).JSON(t)["cursor"] }
	before := cursor()

	for _, bad := range []string{"Refund: \u202e001$", "pay\u200bpal", "ok\U000E0049\U000E0047", "a\u2066b\u2069"} {
		for name, req := range map[string]struct {
			path string
			body any
		}{
			"message text":        {"/messages", map[string]any{"message": map[string]any{"author": map[string]any{"type": "agent"}, "text": bad}}},
			"message author name": {"/messages", map[string]any{"message": map[string]any{"author": map[string]any{"type": "human", "name": bad}, "text": "Hi"}}},
			"message author id":   {"/messages", map[string]any{"message": map[string]any{"author": map[string]any{"type": "human", "id": bad}, "text": "Hi"}}},
			"delta text":          {"/deltas", map[string]any{"message_id": "msg_d", "text": bad}},
			"join text":           {"/join", map[string]any{"text": bad}},
			"join author name":    {"/join", map[string]any{"author": map[string]any{"name": bad}}},
			"handoff-unavailable": {"/handoff-unavailable", map[string]any{"text": bad}},
			"user-requested":      {"/user-requested", map[string]any{"reason": bad}},
		} {
			resp := cs.api(t, http.MethodPost, "/"+id+req.path, req.body)
			requireCode(t, resp, http.StatusBadRequest, "invalid_request")
			require.Contains(t, resp.JSON(t)["error_description"], "must not contain U+", name)
		}
		// The Personal Agent's message text and context.
		for name, m := range map[string]map[string]any{
			"text":                {"id": "msg_x", "author": map[string]any{"type": "human"}, "text": bad},
			"context value":       {"id": "msg_x", "author": map[string]any{"type": "human"}, "text": "Hi", "context": map[string]any{"order": bad}},
			"nested context":      {"id": "msg_x", "author": map[string]any{"type": "human"}, "text": "Hi", "context": map[string]any{"cart": []any{map[string]any{"note": bad}}}},
			"context member name": {"id": "msg_x", "author": map[string]any{"type": "human"}, "text": "Hi", "context": map[string]any{bad: "x"}},
		} {
			resp := cs.pa(t, http.MethodPost, "/"+id+"/messages", map[string]any{"message": m})
			requireCode(t, resp, http.StatusBadRequest, "invalid_request")
			require.Contains(t, resp.JSON(t)["error_description"], "U+", name)
		}
	}
	require.Equal(t, before, cursor(), "nothing was stored")
	require.Equal(t, "queued", cs.api(t, http.MethodGet, "/"+id, nil).JSON(t)["status"])

	// Context the scripts of the world need is kept.
	resp := cs.pa(t, http.MethodPost, "/"+id+"/messages", map[string]any{"message": map[string]any{"id": "msg_ok",
		"author": map[string]any{"type": "human"}, "text": "سلام", "context": map[string]any{"note": "می\u200cخواهم", "locale": "fa-IR"}}})
	require.Equal(t, http.StatusAccepted, resp.Status, "%s", resp.Body)
}
