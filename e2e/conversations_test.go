package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/testkit/peers"
)

// TestConversationLongPollAcrossReplicas parks a long-poll on one replica
// and sends a message through the other: the long-poll returns the
// message's event at once, not when its wait ends, so LISTEN/NOTIFY wakes
// readers across processes (issue 9, spec 8.5).
func TestConversationLongPollAcrossReplicas(t *testing.T) {
	t.Parallel()
	rs := startReplicas(t)
	pa := rs.personalAgent(t, "shop")

	id := pa.start(t, rs.a, "m1")
	for i, dir := range []struct{ poll, send *server }{{rs.b, rs.a}, {rs.a, rs.b}} {
		// Read what is there without waiting, for the cursor.
		rd := pa.read(t, dir.poll, id, "", 0)
		require.NotEmpty(t, rd.Events)
		cursor := rd.Cursor

		polled := pa.readLater(t, dir.poll, id, cursor, 25)
		// Long enough for the request to reach its wait; nothing may
		// answer it before the message exists.
		time.Sleep(time.Second)
		select {
		case r := <-polled:
			t.Fatalf("the long-poll on %s returned before any message was sent: %+v %v", dir.poll.name, r.rd, r.err)
		default:
		}

		msgID := fmt.Sprintf("m%d", i+2)
		sent := time.Now()
		pa.send(t, dir.send, id, msgID)
		var r readResult
		select {
		case r = <-polled:
		case <-time.After(5 * time.Second):
			t.Fatalf("the long-poll on %s did not wake within 5 s of a message accepted by %s", dir.poll.name, dir.send.name)
		}
		require.NoError(t, r.err)
		t.Logf("long-poll on %s woke %s after the message was accepted by %s",
			dir.poll.name, r.at.Sub(sent).Round(time.Millisecond), dir.send.name)
		require.Len(t, r.rd.Events, 1, "%+v", r.rd)
		e := r.rd.Events[0]
		require.Equal(t, "message", e.Type)
		require.Equal(t, msgID, e.Message.ID)
		require.Equal(t, e.ID, r.rd.Cursor)
	}
}

// TestConversationStreamRollingRestart follows a conversation as server-sent
// events on replica B while messages arrive through A, then stops B with
// SIGTERM as a rolling restart does: B ends the stream cleanly and exits
// 0, the client reconnects to A with Last-Event-ID and gets exactly the
// events it had not seen, including one sent while B was going away, and
// a new B serves again (issue 9, spec 8.6).
func TestConversationStreamRollingRestart(t *testing.T) {
	t.Parallel()
	rs := startReplicas(t)
	pa := rs.personalAgent(t, "shop")

	id := pa.start(t, rs.a, "m1") // evt_1 message, evt_2 state
	var got []sseEvent
	onB := pa.stream(t, rs.b, id, "")
	got = append(got, onB.next(t, 5*time.Second), onB.next(t, 5*time.Second))

	pa.send(t, rs.a, id, "m2")
	e := onB.next(t, 5*time.Second)
	require.Equal(t, "m2", e.message(t).ID, "B's stream got the message accepted by A")
	got = append(got, e)

	// SIGTERM: the stream must end, cleanly and soon, not when the
	// shutdown timeout cuts the connection.
	select {
	case <-onB.done:
		t.Fatalf("B's stream ended before SIGTERM: %v", onB.err)
	default:
	}
	rs.b.terminate(t)
	stopped := time.Now()
	end := onB.wait(t, 10*time.Second)
	t.Logf("B's stream ended %s after SIGTERM", time.Since(stopped).Round(time.Microsecond))
	require.NoError(t, end, "B's stream ended with an error instead of EOF")
	require.False(t, onB.partial, "B's stream ended in the middle of an event")
	got = append(got, onB.rest()...)

	// A message while B is going away; then the client reconnects where
	// a load balancer sends it now, to A.
	pa.send(t, rs.a, id, "m3")
	var last string
	for _, e := range got {
		if e.id != "" { // text deltas have none
			last = e.id
		}
	}
	onA := pa.stream(t, rs.a, id, last)
	e = onA.next(t, 5*time.Second)
	require.Equal(t, "m3", e.message(t).ID, "the reconnected stream's first event")
	got = append(got, e)

	require.NoError(t, rs.b.waitExit(t, 15*time.Second), "B's exit status")
	require.Contains(t, rs.b.stderr.String(), `"msg":"stopped"`, "B logs a clean stop")

	// B comes back as a new process; a message through it reaches the
	// stream on A.
	b2 := startServer(t, "replica B (restarted)", rs.dbURL, rs.caDir, rs.ca)
	b2.waitReady(t, 30*time.Second)
	pa.send(t, b2, id, "m4")
	e = onA.next(t, 5*time.Second)
	require.Equal(t, "m4", e.message(t).ID)
	got = append(got, e)

	// Exactly the conversation's events, each once, in order.
	var ids []string
	for _, e := range got {
		ids = append(ids, e.id)
	}
	require.Equal(t, []string{"evt_1", "evt_2", "evt_3", "evt_4", "evt_5"}, ids)
	all := pa.read(t, rs.a, id, "", 0)
	require.Len(t, all.Events, len(ids))
	for i, e := range all.Events {
		require.Equal(t, e.ID, ids[i])
	}
}

// personalAgent creates the Company slug (conversations are on by default)
// and returns a test Personal Agent with one Session at it.
func (rs *replicas) personalAgent(t *testing.T, slug string) *convAgent {
	t.Helper()
	resp := rs.a.admin(t, http.MethodPost, "/admin/v1/companies", companyBody(slug))
	require.Equal(t, http.StatusCreated, resp.status, "create company: %s", resp.body)
	return &convAgent{
		agent:    peers.StartAgent(t, rs.ca, peers.AgentOptions{Host: "localhost"}),
		company:  publicURL + "/t/" + slug,
		endpoint: publicURL + "/t/" + slug + "/poppy/conversations",
		sid:      "e2e-conversations-" + slug,
	}
}

// convAgent is a Personal Agent using the conversation endpoint, each
// request signed with a fresh Session JWT of one Session.
type convAgent struct {
	agent             *peers.Agent
	company, endpoint string
	sid               string
}

func (p *convAgent) request(t *testing.T, method, url string, body any) *http.Request {
	t.Helper()
	var rd io.Reader
	if body != nil {
		raw, err := json.Marshal(body)
		require.NoError(t, err)
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequest(method, url, rd)
	require.NoError(t, err)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	p.agent.Sign(t, req, peers.SessionClaims{Aud: p.company, SID: p.sid}, peers.SessionOptions{})
	return req
}

func message(id string) map[string]any {
	return map[string]any{"message": map[string]any{"id": id, "author": map[string]string{"type": "human"}, "text": "text of " + id}}
}

// start starts a conversation on s with message msgID and returns its ID.
func (p *convAgent) start(t *testing.T, s *server, msgID string) string {
	t.Helper()
	resp := s.do(t, p.request(t, http.MethodPost, p.endpoint, message(msgID)))
	require.Equal(t, http.StatusCreated, resp.status, "start on %s: %s", s.name, resp.body)
	var rep struct {
		ConversationID string `json:"conversation_id"`
	}
	require.NoError(t, json.Unmarshal(resp.body, &rep))
	require.NotEmpty(t, rep.ConversationID)
	return rep.ConversationID
}

// send sends message msgID on s.
func (p *convAgent) send(t *testing.T, s *server, id, msgID string) {
	t.Helper()
	resp := s.do(t, p.request(t, http.MethodPost, p.endpoint+"/"+id+"/messages", message(msgID)))
	require.Equal(t, http.StatusAccepted, resp.status, "send %s on %s: %s", msgID, s.name, resp.body)
}

// conversationRead is a read of events (spec 8.5), with what the tests
// look at.
type conversationRead struct {
	Events []struct {
		ID      string `json:"id"`
		Type    string `json:"type"`
		Message struct {
			ID string `json:"id"`
		} `json:"message"`
	} `json:"events"`
	Cursor string `json:"cursor"`
}

func (p *convAgent) eventsURL(id, cursor string, wait int) string {
	return fmt.Sprintf("%s/%s/events?cursor=%s&wait=%d", p.endpoint, id, cursor, wait)
}

// read reads the events after cursor on s, waiting up to wait seconds.
func (p *convAgent) read(t *testing.T, s *server, id, cursor string, wait int) *conversationRead {
	t.Helper()
	resp := s.do(t, p.request(t, http.MethodGet, p.eventsURL(id, cursor, wait), nil))
	require.Equal(t, http.StatusOK, resp.status, "read on %s: %s", s.name, resp.body)
	var rd conversationRead
	require.NoError(t, json.Unmarshal(resp.body, &rd), "%s", resp.body)
	return &rd
}

// readLater starts a read on s in the background (signed now, on this
// goroutine) and returns where its result will arrive.
func (p *convAgent) readLater(t *testing.T, s *server, id, cursor string, wait int) <-chan readResult {
	t.Helper()
	req := p.request(t, http.MethodGet, p.eventsURL(id, cursor, wait), nil)
	out := make(chan readResult, 1)
	go func() {
		r := readResult{}
		defer func() { r.at = time.Now(); out <- r }()
		resp, err := s.client.Do(req)
		if err != nil {
			r.err = err
			return
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		switch {
		case err != nil:
			r.err = err
		case resp.StatusCode != http.StatusOK:
			r.err = fmt.Errorf("read on %s: %d %s", s.name, resp.StatusCode, body)
		default:
			r.rd = new(conversationRead)
			r.err = json.Unmarshal(body, r.rd)
		}
	}()
	return out
}

// readResult is the outcome of a background read.
type readResult struct {
	rd  *conversationRead
	err error
	at  time.Time // when it returned
}

// stream opens a server-sent event stream of the conversation on s, from
// lastEventID when set.
func (p *convAgent) stream(t *testing.T, s *server, id, lastEventID string) *sseStream {
	t.Helper()
	req := p.request(t, http.MethodGet, p.endpoint+"/"+id+"/events", nil)
	req.Header.Set("Accept", "text/event-stream")
	if lastEventID != "" {
		req.Header.Set("Last-Event-ID", lastEventID)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	// s.client's Timeout would cut a stream: the same transport without.
	c := &http.Client{Transport: s.client.Transport}
	resp, err := c.Do(req.WithContext(ctx))
	require.NoError(t, err, "stream on %s", s.name)
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		t.Fatalf("stream on %s: %d %s", s.name, resp.StatusCode, body)
	}
	require.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))
	st := &sseStream{name: s.name, events: make(chan sseEvent, 100), done: make(chan struct{})}
	go st.read(resp.Body)
	return st
}

// sseEvent is one dispatched server-sent event.
type sseEvent struct {
	id, event, data string
}

// message decodes a message event's message.
func (e sseEvent) message(t *testing.T) (m struct {
	ID string `json:"id"`
}) {
	t.Helper()
	var v struct {
		Type    string `json:"type"`
		Message *struct {
			ID string `json:"id"`
		} `json:"message"`
	}
	require.NoError(t, json.Unmarshal([]byte(e.data), &v), "%s", e.data)
	require.Equal(t, "message", v.Type, "%s", e.data)
	require.NotNil(t, v.Message, "%s", e.data)
	return *v.Message
}

// sseStream reads a text/event-stream body in the background.
type sseStream struct {
	name   string
	events chan sseEvent // closed at the end of the body
	done   chan struct{} // closed after err and partial are set
	// err is how the body ended: nil for a clean EOF.
	err error
	// partial: the body ended inside an event (fields or a line without
	// the blank line that dispatches it).
	partial bool
}

func (st *sseStream) read(body io.ReadCloser) {
	defer close(st.done)
	defer close(st.events)
	defer body.Close()
	br := bufio.NewReader(body)
	var cur sseEvent
	pending := false
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			st.partial = pending || line != ""
			if !errors.Is(err, io.EOF) {
				st.err = err
			}
			return
		}
		line = strings.TrimSuffix(strings.TrimSuffix(line, "\n"), "\r")
		if line == "" {
			if cur.data != "" {
				st.events <- cur
			}
			cur, pending = sseEvent{}, false
			continue
		}
		if strings.HasPrefix(line, ":") {
			continue // a comment: keep-alive
		}
		name, value, _ := strings.Cut(line, ":")
		value = strings.TrimPrefix(value, " ")
		pending = true
		switch name {
		case "id":
			cur.id = value
		case "event":
			cur.event = value
		case "data":
			if !json.Valid([]byte(value)) {
				st.err = fmt.Errorf("a data line that is not JSON: %q", value)
				return
			}
			if cur.data != "" {
				cur.data += "\n"
			}
			cur.data += value
		}
	}
}

// next returns the next event, failing the test when the stream ends or
// none comes within the time given.
func (st *sseStream) next(t *testing.T, within time.Duration) sseEvent {
	t.Helper()
	select {
	case e, ok := <-st.events:
		if !ok {
			<-st.done
			t.Fatalf("the stream on %s ended (err %v, partial %v) before the next event", st.name, st.err, st.partial)
		}
		return e
	case <-time.After(within):
		t.Fatalf("no event on the stream on %s within %s", st.name, within)
		return sseEvent{}
	}
}

// wait waits for the stream to end and returns how it ended.
func (st *sseStream) wait(t *testing.T, within time.Duration) error {
	t.Helper()
	select {
	case <-st.done:
		return st.err
	case <-time.After(within):
		t.Fatalf("the stream on %s still open after %s", st.name, within)
		return nil
	}
}

// rest returns the events of an ended stream not yet taken by next.
func (st *sseStream) rest() []sseEvent {
	<-st.done
	var out []sseEvent
	for e := range st.events {
		out = append(out, e)
	}
	return out
}
