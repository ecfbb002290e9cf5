package conversations_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/conversations"
	"github.com/poppyhost/poppyhost/internal/testkit/peers"
)

// paFrame is one server-sent event.
type paFrame struct {
	ID, Event, Data string
	HasID           bool
}

// paStream is an open event stream (spec 8.6).
type paStream struct {
	resp   *http.Response
	frames chan paFrame
	cancel context.CancelFunc
}

// stream opens a conversation's events as SSE.
func (a *agentSide) stream(t *testing.T, id string, o paReq) *paStream {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	o.Header = append(o.Header, "Accept", "text/event-stream")
	resp, err := a.env.Client.Do(a.request(t, ctx, http.MethodGet, "/"+id+"/events", nil, o))
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))
	s := &paStream{resp: resp, frames: make(chan paFrame, 100), cancel: cancel}
	go func() {
		defer close(s.frames)
		sc := bufio.NewScanner(resp.Body)
		var f paFrame
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == "":
				if f.Data != "" {
					s.frames <- f
				}
				f = paFrame{}
			case strings.HasPrefix(line, ":"):
			case strings.HasPrefix(line, "id: "):
				f.ID, f.HasID = strings.TrimPrefix(line, "id: "), true
			case strings.HasPrefix(line, "event: "):
				f.Event = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "data: "):
				f.Data = strings.TrimPrefix(line, "data: ")
			}
		}
	}()
	t.Cleanup(s.close)
	return s
}

func (s *paStream) close() {
	s.cancel()
	s.resp.Body.Close()
}

// next returns the next frame, failing after a few seconds.
func (s *paStream) next(t *testing.T) paFrame {
	t.Helper()
	select {
	case f, ok := <-s.frames:
		require.True(t, ok, "the stream ended")
		return f
	case <-time.After(10 * time.Second):
		t.Fatal("no event on the stream")
		return paFrame{}
	}
}

// quiet checks nothing arrives for a moment.
func (s *paStream) quiet(t *testing.T) {
	t.Helper()
	select {
	case f := <-s.frames:
		t.Fatalf("unexpected frame %+v", f)
	case <-time.After(300 * time.Millisecond):
	}
}

// event decodes a frame that carries a stored event.
func (f paFrame) event(t *testing.T) map[string]any {
	t.Helper()
	require.True(t, f.HasID)
	require.Empty(t, f.Event, "stored events use the default SSE event type")
	var e map[string]any
	require.NoError(t, json.Unmarshal([]byte(f.Data), &e))
	require.Equal(t, f.ID, e["id"], "the SSE id is the event ID")
	return e
}

func TestAgentStream(t *testing.T) {
	t.Parallel()
	a := newAgentSide(t)
	id := a.start(t, paMsg("m1", "hello"), paReq{})

	s := a.stream(t, id, paReq{Query: "cursor=evt_1"})
	e := s.next(t).event(t)
	require.Equal(t, "evt_2", e["id"])
	require.Equal(t, "state", e["type"])
	s.quiet(t)

	// A text delta: event text-delta, no id, not stored.
	require.NoError(t, conversations.PublishDelta(context.Background(), a.env.Pool, conversations.Delta{
		CompanyID: a.companyID, ConversationID: id, MessageID: "msg_r2Kq", Text: "I can do that. "}))
	f := s.next(t)
	require.Equal(t, "text-delta", f.Event)
	require.False(t, f.HasID)
	require.JSONEq(t, `{"message_id":"msg_r2Kq","text":"I can do that. "}`, f.Data)
	// A delta of another conversation does not arrive.
	require.NoError(t, conversations.PublishDelta(context.Background(), a.env.Pool, conversations.Delta{
		CompanyID: a.companyID, ConversationID: "cnv_other", MessageID: "msg_x", Text: "no"}))
	s.quiet(t)
	require.Equal(t, 2, a.eventCount(t, id))

	// New events wake the stream: the Company's and the Personal Agent's.
	a.companyEvents(t, id, "", "", companyMessage("msg_r2Kq", "I can do that. Want to exchange?"))
	e = s.next(t).event(t)
	require.Equal(t, "evt_3", e["id"])
	require.Equal(t, "msg_r2Kq", e["message"].(map[string]any)["id"])
	require.Equal(t, http.StatusAccepted, a.send(t, id, paMsg("m2", "yes"), paReq{}).Status)
	e = s.next(t).event(t)
	require.Equal(t, "evt_4", e["id"])
	require.Equal(t, "m2", e["message"].(map[string]any)["id"])
	// A state change arrives as a state event.
	require.Equal(t, http.StatusAccepted, a.call(t, http.MethodPost, "/"+id+"/handoff", "{}", paReq{}).Status)
	e = s.next(t).event(t)
	require.Equal(t, "evt_5", e["id"])
	require.Equal(t, "queued", e["status"])
	s.close()

	// Reconnect with Last-Event-ID, the cursor the stream was first
	// opened with still in the URL: Last-Event-ID wins, nothing repeats.
	a.companyEvents(t, id, "idle", "human", companyMessage("msg_t8Vn", "Alex here."))
	s = a.stream(t, id, paReq{Query: "cursor=evt_1", Header: []string{"Last-Event-ID", "evt_4"}})
	var got []string
	for range 3 {
		got = append(got, s.next(t).event(t)["id"].(string))
	}
	require.Equal(t, []string{"evt_5", "evt_6", "evt_7"}, got)
	s.quiet(t)

	// A stream that starts behind by more than a page catches up in order.
	events := make([]conversations.TestEvent, 150)
	for i := range events {
		events[i] = companyMessage(fmt.Sprintf("bulk_%d", i), "x")
	}
	a.companyEvents(t, id, "", "", events...)
	for i := range 150 {
		require.Equal(t, fmt.Sprintf("evt_%d", 8+i), s.next(t).event(t)["id"])
	}
	s.quiet(t)
}

// TestAgentAuthorizationEvent checks spec 8.11: a read carrying an
// authorization event has the matching challenge on its 200.
func TestAgentAuthorizationEvent(t *testing.T) {
	t.Parallel()
	a := newAgentSide(t)
	id := a.start(t, paMsg("m1", "where is my order?"), paReq{})
	resp := a.call(t, http.MethodGet, "/"+id+"/events", nil, paReq{})
	require.Empty(t, resp.Header.Get("WWW-Authenticate"))

	auth := a.companyEvents(t, id, "", "", conversations.TestEvent{Type: conversations.EventAuthorization,
		Body: map[string]any{"error": "insufficient_scope", "scope": "orders:read orders:write"}})
	for _, q := range []string{"", "cursor=evt_2", "cursor=evt_2&wait=5"} {
		resp = a.call(t, http.MethodGet, "/"+id+"/events", nil, paReq{Query: q})
		require.Equal(t, http.StatusOK, resp.Status, "%s", resp.Body)
		challenge := resp.Header.Get("WWW-Authenticate")
		require.True(t, strings.HasPrefix(challenge, "Bearer "), challenge)
		require.Contains(t, challenge, `error="insufficient_scope"`)
		require.Contains(t, challenge, `scope="orders:read orders:write"`)
		rd := decodeRead(t, resp.Body)
		require.Equal(t, auth, rd.last()["id"])
		require.Equal(t, "insufficient_scope", rd.last()["error"])
		require.Equal(t, "orders:read orders:write", rd.last()["scope"])
	}
	// A read past it has no challenge.
	resp = a.call(t, http.MethodGet, "/"+id+"/events", nil, paReq{Query: "cursor=" + auth})
	require.Empty(t, resp.Header.Get("WWW-Authenticate"))
	// A POST whose read carries it: still 202, with the challenge.
	resp = a.send(t, id, paMsg("m2", "ok, signing in"), paReq{Query: "wait=0&cursor=evt_2"})
	require.Equal(t, http.StatusAccepted, resp.Status, "%s", resp.Body)
	require.Contains(t, resp.Header.Get("WWW-Authenticate"), `error="insufficient_scope"`)
	// In a stream the event itself is enough.
	s := a.stream(t, id, paReq{Query: "cursor=evt_2"})
	require.Equal(t, "authorization", s.next(t).event(t)["type"])
}

// TestAgentNoLostWakeUp races long-polls against the messages they wait for:
// every long-poll must return its event, none time out.
func TestAgentNoLostWakeUp(t *testing.T) {
	t.Parallel()
	a := newAgentSide(t)
	const n = 50
	ids := make([]string, n)
	for i := range ids {
		ids[i] = a.start(t, paMsg(fmt.Sprintf("first-%d", i), "hello"), paReq{})
	}
	type result struct {
		i       int
		status  int
		events  int
		elapsed time.Duration
		err     error
	}
	results := make(chan result, n)
	sendErrs := make(chan error, n)
	var wg sync.WaitGroup
	for i, id := range ids {
		poll := a.request(t, context.Background(), http.MethodGet, "/"+id+"/events", nil, paReq{Query: "cursor=evt_2&wait=25"})
		msg := a.request(t, context.Background(), http.MethodPost, "/"+id+"/messages",
			map[string]any{"message": paMsg(fmt.Sprintf("race-%d", i), "now")}, paReq{})
		wg.Add(2)
		go func() {
			defer wg.Done()
			began := time.Now()
			resp, err := a.env.Client.Do(poll)
			if err != nil {
				results <- result{i: i, err: err}
				return
			}
			defer resp.Body.Close()
			var rd paRead
			err = json.NewDecoder(resp.Body).Decode(&rd)
			results <- result{i: i, status: resp.StatusCode, events: len(rd.Events), elapsed: time.Since(began), err: err}
		}()
		go func() {
			defer wg.Done()
			// Spread the messages over the moments before, during and
			// after the polls' first reads.
			time.Sleep(time.Duration(i) * 4 * time.Millisecond)
			resp, err := a.env.Client.Do(msg)
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode != http.StatusAccepted {
					err = fmt.Errorf("message %d: status %d", i, resp.StatusCode)
				}
			}
			sendErrs <- err
		}()
	}
	wg.Wait()
	close(results)
	close(sendErrs)
	for err := range sendErrs {
		require.NoError(t, err)
	}
	for r := range results {
		require.NoError(t, r.err)
		require.Equal(t, http.StatusOK, r.status, "poll %d", r.i)
		require.Equal(t, 1, r.events, "poll %d timed out after %s", r.i, r.elapsed)
		require.Less(t, r.elapsed, 20*time.Second, "poll %d", r.i)
	}
}

// TestAgentTwoInstances runs a second server on the same database: a long-poll
// and a stream on one are woken by a message the other accepts.
func TestAgentTwoInstances(t *testing.T) {
	t.Parallel()
	a := newAgentSide(t)
	other := secondInstance(t, a.env)
	id := a.start(t, paMsg("m1", "hello"), paReq{})

	// The other instance serves the conversation too.
	resp := a.callVia(t, other, http.MethodGet, "/"+id+"/events", nil, paReq{})
	require.Equal(t, http.StatusOK, resp.Status, "%s", resp.Body)

	s := a.stream(t, id, paReq{Query: "cursor=evt_2"})
	for i, c := range []struct {
		poll, send *http.Client
	}{{a.env.Client, other}, {other, a.env.Client}} {
		poll := a.request(t, context.Background(), http.MethodGet, "/"+id+"/events", nil,
			paReq{Query: fmt.Sprintf("cursor=evt_%d&wait=25", 2+i)})
		done := make(chan *http.Response, 1)
		errs := make(chan error, 1)
		began := time.Now()
		go func() {
			resp, err := c.poll.Do(poll)
			if err != nil {
				errs <- err
				return
			}
			done <- resp
		}()
		time.Sleep(500 * time.Millisecond)
		resp := a.callVia(t, c.send, http.MethodPost, "/"+id+"/messages", map[string]any{"message": paMsg(fmt.Sprintf("m-%d", i), "hi")}, paReq{})
		require.Equal(t, http.StatusAccepted, resp.Status, "%s", resp.Body)
		select {
		case err := <-errs:
			t.Fatal(err)
		case r := <-done:
			defer r.Body.Close()
			require.Equal(t, http.StatusOK, r.StatusCode)
			var rd paRead
			require.NoError(t, json.NewDecoder(r.Body).Decode(&rd))
			require.Len(t, rd.Events, 1)
			require.Less(t, time.Since(began), 10*time.Second)
		case <-time.After(20 * time.Second):
			t.Fatal("the long-poll was not woken by the other instance")
		}
		require.Equal(t, fmt.Sprintf("evt_%d", 3+i), s.next(t).event(t)["id"])
	}
}

// secondInstance serves another replica on env's database and public
// URL, as a second server behind the same name, and returns a client that
// reaches it.
func secondInstance(t testing.TB, env *rig) *http.Client {
	t.Helper()
	h, _, _ := env.replica(t)
	return peers.StartSite(t, env.CA, h).Client
}

// TestDrainEndsWaits: a draining hub ends long-polls with an empty read
// and ends streams, so they do not hold a shutdown.
func TestAgentDrainEndsWaits(t *testing.T) {
	t.Parallel()
	a := newAgentSide(t)
	id := a.start(t, paMsg("m1", "hello"), paReq{})
	s := a.stream(t, id, paReq{Query: "cursor=evt_2"})
	poll := a.request(t, context.Background(), http.MethodGet, "/"+id+"/events", nil, paReq{Query: "cursor=evt_2&wait=25"})
	done := make(chan *http.Response, 1)
	go func() {
		resp, err := a.env.Client.Do(poll)
		if err == nil {
			done <- resp
		}
		close(done)
	}()
	time.Sleep(500 * time.Millisecond)
	began := time.Now()
	a.env.Hub.Drain()
	resp, ok := <-done
	require.True(t, ok, "the long-poll failed")
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var rd paRead
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&rd))
	require.Empty(t, rd.Events)
	require.Equal(t, "evt_2", *rd.Cursor)
	require.Less(t, time.Since(began), 5*time.Second)
	select {
	case _, open := <-s.frames:
		require.False(t, open, "the stream ends")
	case <-time.After(5 * time.Second):
		t.Fatal("the stream did not end")
	}
	// Reads that need no wait still answer.
	a.read(t, id, "", paReq{})
}

// TestAgentLongPollsFollowEveryChange races long-polls that follow their
// cursors against messages and state changes written from both sides:
// every reader gets every event once, in order, without a gap, and each
// read that has no more to give reports the status and responder as of
// its last event (a woken long-poll reads only the events and takes the
// state from its state events).
func TestAgentLongPollsFollowEveryChange(t *testing.T) {
	t.Parallel()
	a := newAgentSide(t)
	id := a.start(t, paMsg("m0", "hello"), paReq{})
	const changes = 45
	final := make(chan int64, 1)
	writeErrs := make(chan error, changes)
	go func() {
		last := int64(2) // the first message and the first state event
		states := [][2]string{{"working", "agent"}, {"idle", "human"}, {"idle", "agent"}}
		for i := range changes {
			// Readers park between some writes and not others.
			time.Sleep(time.Duration(i%4) * 3 * time.Millisecond)
			if i%3 == 0 {
				s := states[(i/3)%len(states)]
				_, err := conversations.AppendTestEvents(context.Background(), a.env.Pool, a.companyID, id, s[0], s[1],
					companyMessage(fmt.Sprintf("r%d", i), "on it"))
				writeErrs <- err
				last += 2 // the message and the state event
				continue
			}
			resp, err := a.env.Client.Do(a.request(t, context.Background(), http.MethodPost, "/"+id+"/messages",
				map[string]any{"message": paMsg(fmt.Sprintf("m%d", i+1), "more")}, paReq{}))
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode != http.StatusAccepted {
					err = fmt.Errorf("message %d: status %d", i, resp.StatusCode)
				}
			}
			writeErrs <- err
			last++
		}
		final <- last
	}()

	type outcome struct {
		seqs []int64
		err  error
	}
	follow := func(out chan<- outcome) {
		var (
			seqs              []int64
			status, responder = "idle", "agent"
			cursor            = "evt_2"
			finalSeq          = int64(-1)
			readErr           error
		)
		for readErr == nil && (finalSeq < 0 || len(seqs) == 0 || seqs[len(seqs)-1] < finalSeq) {
			select {
			case finalSeq = <-final:
				final <- finalSeq // for the other reader
			default:
			}
			resp, err := a.env.Client.Do(a.request(t, context.Background(), http.MethodGet, "/"+id+"/events", nil,
				paReq{Query: "wait=2&cursor=" + cursor}))
			if err != nil {
				readErr = err
				break
			}
			var rd paRead
			err = json.NewDecoder(resp.Body).Decode(&rd)
			resp.Body.Close()
			if err != nil || resp.StatusCode != http.StatusOK {
				readErr = fmt.Errorf("read after %s: status %d, %v", cursor, resp.StatusCode, err)
				break
			}
			for _, e := range rd.Events {
				var seq int64
				if _, err := fmt.Sscanf(e["id"].(string), "evt_%d", &seq); err != nil {
					readErr = err
					break
				}
				seqs = append(seqs, seq)
				if e["type"] == "state" {
					status, responder = e["status"].(string), e["responder"].(string)
				}
			}
			if !*rd.HasMore && (rd.Status != status || rd.Responder != responder) && readErr == nil {
				readErr = fmt.Errorf("read after %s ending at %s says %s/%s, its events %s/%s",
					cursor, *rd.Cursor, rd.Status, rd.Responder, status, responder)
			}
			cursor = *rd.Cursor
		}
		out <- outcome{seqs: seqs, err: readErr}
	}
	outs := make(chan outcome, 2)
	go follow(outs)
	go follow(outs)
	for range changes {
		require.NoError(t, <-writeErrs)
	}
	for range 2 {
		o := <-outs
		require.NoError(t, o.err)
		require.NotEmpty(t, o.seqs)
		for i, seq := range o.seqs {
			require.Equal(t, int64(3+i), seq, "event %d of %v", i, o.seqs)
		}
	}
}
