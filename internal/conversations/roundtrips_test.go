package conversations_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/testkit/peers"
	"github.com/poppyhost/poppyhost/internal/testkit/plancheck"
)

// TestMessageRoundTrips: a message to a conversation of a Company without
// a Company Agent is two round trips to PostgreSQL: the Session's read,
// then one statement that records the Session JWT's jti, locks and
// updates the conversation, appends the event, records the message ID and
// notifies, and commits on its own (no BEGIN, no COMMIT). Such a message
// still stores what send's transaction stores: one event, one message ID
// with its reply, the jti.
func TestMessageRoundTrips(t *testing.T) {
	pool, _, rec := plancheck.NewDatabase(t)
	a := newAgentSideOn(t, newRigOn(t, pool, false))
	const sid = "sess_trips"
	id := a.start(t, paMsg("m0", "Hello"), paReq{SID: sid})
	// Twice: the first prepares the statements on a connection.
	for round := range 2 {
		before := a.counts(t)
		var resp *peers.Response
		stmts := rec.Record(func() {
			resp = a.send(t, id, paMsg(fmt.Sprintf("m%d", round+1), "Where is my order?"), paReq{SID: sid})
		})
		require.Equal(t, http.StatusAccepted, resp.Status, "%s", resp.Body)
		require.Equal(t, map[string]any{"conversation_id": id, "status": "idle", "responder": "agent"}, resp.JSON(t))
		after := a.counts(t)
		require.Equal(t, before.Events+1, after.Events)
		require.Equal(t, before.MessageIDs+1, after.MessageIDs)
		if round == 0 {
			continue
		}
		var ours []string
		trips := map[int]bool{}
		for _, s := range stmts {
			// River's own polling shares the pool, and the rig finds the
			// Company without the platform's cache.
			if !strings.Contains(s.SQL, "river_") && !strings.Contains(s.SQL, "FROM companies c WHERE c.slug") {
				ours = append(ours, s.String())
				trips[s.Trip] = true
			}
		}
		require.Len(t, ours, 2, "%q", ours)
		require.Len(t, trips, 2, "round trips of %q", ours)
		require.True(t, strings.HasPrefix(ours[0], "SELECT NOT EXISTS (SELECT FROM session_jtis") &&
			strings.Contains(ours[0], "LEFT JOIN sessions"), "the Session's read: %q", ours[0])
		require.True(t, strings.HasPrefix(ours[1], "WITH j AS (INSERT INTO session_jtis") &&
			strings.Contains(ours[1], "UPDATE conversations") && strings.Contains(ours[1], "pg_notify("),
			"the message's statement: %q", ours[1])
	}
	// The stored reply is the one a retry gets.
	resp := a.send(t, id, paMsg("m2", "Where is my order?"), paReq{SID: sid})
	require.Equal(t, http.StatusAccepted, resp.Status, "%s", resp.Body)
	require.Equal(t, map[string]any{"conversation_id": id, "status": "idle", "responder": "agent"}, resp.JSON(t))
	var events, verified int
	require.NoError(t, pool.QueryRow(t.Context(), `SELECT count(*), count(verified -> 'client_id') FROM conversation_events
		WHERE company_id = $1 AND conversation_id = $2 AND type = 'message'`, a.companyID, id).Scan(&events, &verified))
	require.Equal(t, 3, events, "the retry added nothing")
	require.Equal(t, 3, verified, "each message keeps its request's verified facts for the webhook")
}
