package conversations_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/testkit/peers"
)

// messageWithJWT is POST .../{id}/messages with body, carrying the Session
// JWT header jwt as it is.
func (a *agentSide) messageWithJWT(t *testing.T, id, jwt string, body any) *http.Request {
	t.Helper()
	req := peers.NewRequest(t, http.MethodPost, a.endpoint+"/"+id+"/messages", body)
	req.Header.Set("Poppy-Session", jwt)
	return req
}

// sessionJWT is a new Session JWT for POST .../{id}/messages in Session
// sid.
func (a *agentSide) sessionJWT(t *testing.T, id, sid string) string {
	t.Helper()
	return a.agent.SessionJWT(t, peers.SessionClaims{Aud: a.env.PublicURL("/t/" + paSlug),
		URL: a.endpoint + "/" + id + "/messages", Method: http.MethodPost, SID: sid}, peers.SessionOptions{})
}

// A message records its Session JWT's jti in its own transaction (one
// commit), and a JWT sent many times at once stores exactly one message:
// every other copy is refused as a replay (invalid_session), whether it
// carries the same message or another, and none of them stores anything.
// Each round's JWT starts a new Session, which its copies create at once.
func TestAgentMessageReplayedAtOnce(t *testing.T) {
	a := newAgentSide(t)
	id := a.start(t, paMsg("m0", "Hello"), paReq{SID: "sess_replay"})

	var lastJWT string
	for round := range 3 {
		before := a.counts(t)
		jwt := a.sessionJWT(t, id, fmt.Sprintf("sess_replay_%d", round))
		lastJWT = jwt
		const copies = 16
		reqs := make([]*http.Request, copies)
		for i := range reqs {
			// Half the copies carry one message, the rest a message each:
			// the JWT does not cover the body, so a replay may change it.
			msgID := fmt.Sprintf("r%d", round)
			if i%2 == 1 {
				msgID = fmt.Sprintf("r%d_%d", round, i)
			}
			reqs[i] = a.messageWithJWT(t, id, jwt, map[string]any{"message": paMsg(msgID, "Where is my order?")})
		}
		accepted := 0
		for _, resp := range peers.SendAll(t, a.env.Client, reqs) {
			if resp.Status == http.StatusAccepted {
				accepted++
				continue
			}
			requireError(t, resp, http.StatusBadRequest, "invalid_session")
			require.Contains(t, string(resp.Body), "jti was already used")
		}
		require.Equal(t, 1, accepted, "round %d", round)
		after := a.counts(t)
		require.Equal(t, before.Events+1, after.Events, "round %d: one message event", round)
		require.Equal(t, before.MessageIDs+1, after.MessageIDs, "round %d: one message ID", round)

		// Later, the JWT is refused before anything is read.
		requireError(t, peers.Send(t, a.env.Client, a.messageWithJWT(t, id, jwt,
			map[string]any{"message": paMsg(fmt.Sprintf("late%d", round), "Again")})), http.StatusBadRequest, "invalid_session")
		require.Equal(t, after, a.counts(t))
	}

	// The jti and the message are one transaction's rows.
	var same bool
	require.NoError(t, a.env.Pool.QueryRow(context.Background(), `SELECT
		(SELECT xmin::text FROM conversation_message_ids WHERE company_id = $1 AND (message_id = 'r2' OR message_id LIKE 'r2\_%'))
		= (SELECT xmin::text FROM session_jtis WHERE company_id = $1 AND jti = $2)`,
		a.companyID, jtiOf(t, lastJWT)).Scan(&same))
	require.True(t, same, "the message's jti is recorded in the message's transaction")
}

// jtiOf is a JWT's jti claim.
func jtiOf(t *testing.T, jwt string) string {
	t.Helper()
	parts := strings.Split(jwt, ".")
	require.Len(t, parts, 3)
	raw, err := base64.RawURLEncoding.DecodeString(parts[1])
	require.NoError(t, err)
	var claims struct {
		JTI string `json:"jti"`
	}
	require.NoError(t, json.Unmarshal(raw, &claims))
	require.NotEmpty(t, claims.JTI)
	return claims.JTI
}

// A message refused for what it carries still uses its Session JWT: sent
// again, even with a good message, the JWT is refused as a replay and
// stores nothing, as when the Session check recorded the jti up front.
func TestAgentMessageRefusedUsesItsJWT(t *testing.T) {
	a := newAgentSide(t)
	const sid = "sess_refused"
	id := a.start(t, paMsg("m0", "Hello"), paReq{SID: sid})
	for _, bad := range []struct {
		name string
		body any
		code string
	}{
		{"no message", map[string]any{}, "invalid_request"},
		{"not JSON", "{", "invalid_request"},
	} {
		t.Run(bad.name, func(t *testing.T) {
			jwt := a.sessionJWT(t, id, sid)
			requireError(t, peers.Send(t, a.env.Client, a.messageWithJWT(t, id, jwt, bad.body)), http.StatusBadRequest, bad.code)
			before := a.counts(t)
			requireError(t, peers.Send(t, a.env.Client, a.messageWithJWT(t, id, jwt,
				map[string]any{"message": paMsg("after_"+bad.code, "Fine now")})), http.StatusBadRequest, "invalid_session")
			require.Equal(t, before, a.counts(t))
		})
	}

	// Refused in the message's transaction (the conversation is closed):
	// the same.
	require.Equal(t, http.StatusOK, a.call(t, http.MethodPost, "/"+id+"/close", map[string]any{}, paReq{SID: sid}).Status)
	jwt := a.sessionJWT(t, id, sid)
	requireError(t, peers.Send(t, a.env.Client, a.messageWithJWT(t, id, jwt,
		map[string]any{"message": paMsg("closed1", "Anyone?")})), http.StatusConflict, "conversation_closed")
	requireError(t, peers.Send(t, a.env.Client, a.messageWithJWT(t, id, jwt,
		map[string]any{"message": paMsg("closed2", "Anyone?")})), http.StatusBadRequest, "invalid_session")
}
