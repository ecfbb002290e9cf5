package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/poppyhost/poppyhost/internal/testkit/peers"
)

// chaosLoad is the steady load of the chaos test, of the kinds that matter
// for safety: approved operations, conversation messages with readers
// that resume with their cursor, and signed-in gateway calls. It records
// what got a success answer, for the invariants to check.
type chaosLoad struct {
	e *chaosEnv

	mu       sync.Mutex
	statuses map[string]int // "kind status" (or "kind error") -> count
	// unexpected are answers no fault explains (a 500, a refusal).
	unexpected []string
	ops        []*chaosOp
	reads      []chaosRead
	convs      []*chaosConv
}

// chaosOp is one approved operation: the order it exchanges, and what
// the Personal Agent learnt.
type chaosOp struct {
	order, sid   string
	id, revision string
	answer       string // the body of the success answer
	answered     bool   // a success answer came
}

// chaosRead is a signed-in gateway call that got a success answer.
type chaosRead struct{ path, sid string }

// chaosConv is a conversation, the messages accepted in it, and what
// each of its readers received.
type chaosConv struct {
	id       string
	mu       sync.Mutex
	accepted []string            // message IDs, in the order they were accepted
	got      map[string][]string // reader ("sse", "poll") -> event IDs received
}

func (c *chaosConv) add(reader, id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.got[reader] = append(c.got[reader], id)
}

func (c *chaosConv) received(reader string) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.got[reader])
}

// chaosReaders are the kinds of conversation reader.
var chaosReaders = []string{"sse", "poll"}

// note records an answer of kind; allowed are the statuses a fault (or
// the exchange itself) explains. It returns the answer's status, 0 for a
// transport error.
func (l *chaosLoad) note(kind string, resp *response, err error, allowed ...int) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err != nil {
		l.statuses[kind+" error"]++
		return 0
	}
	l.statuses[kind+" "+strconv.Itoa(resp.status)]++
	if !slices.Contains(allowed, resp.status) && !replayRefused(kind, resp) {
		body := resp.body
		if len(body) > 300 {
			body = body[:300]
		}
		l.unexpected = append(l.unexpected, fmt.Sprintf("%s: %d %s", kind, resp.status, body))
	}
	return resp.status
}

// replayRefused: Go's transport sends a GET again by itself when the
// connection it reused broke before the answer came (a replica killed
// after the request reached it), with the same Session JWT, which the
// platform rightly refuses as a replay (spec 5.3).
func replayRefused(kind string, resp *response) bool {
	return slices.Contains(chaosGets, kind) && resp.status == http.StatusBadRequest &&
		resp.errorCode() == "invalid_session" && bytes.Contains(resp.body, []byte("already used"))
}

// chaosGets are the kinds of load sent as GET.
var chaosGets = []string{"long-poll", "stream", "signed-in call"}

// request is a request signed by the Personal Agent in Session sid, with
// the access token when token is set.
func (l *chaosLoad) request(ctx context.Context, method, url string, body any, sid, token string) *http.Request {
	t := l.e.t
	var raw []byte
	if body != nil {
		var err error
		if raw, err = json.Marshal(body); err != nil {
			panic(err)
		}
	}
	req, err := http.NewRequestWithContext(ctx, method, url, bytes.NewReader(raw))
	if err != nil {
		panic(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	l.e.agent.Sign(t, req, peers.SessionClaims{Aud: chaosIssuer, SID: sid, AccessToken: token}, peers.SessionOptions{})
	return req
}

// pause waits d, or less when ctx ends.
func pause(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// operations runs approved operations one after another until stop
// closes, each until it gets a success answer or hard ends.
func (l *chaosLoad) operations(stop <-chan struct{}, hard context.Context, name string) {
	for n := 0; ; n++ {
		select {
		case <-stop:
			return
		default:
		}
		op := &chaosOp{order: fmt.Sprintf("%s-%d", name, n), sid: "chaos-operations-" + name}
		l.perform(hard, op)
		l.mu.Lock()
		l.ops = append(l.ops, op)
		l.mu.Unlock()
	}
}

// perform proposes the exchange and approves it, sending the same
// approval again until it gets a success answer (extension 7), and
// following a new revision when one is proposed.
func (l *chaosLoad) perform(ctx context.Context, op *chaosOp) {
	url := chaosIssuer + "/api/" + chaosAPI + "/orders/" + op.order + "/exchanges"
	body := map[string]string{"replacement_sku": "stormline-insulated-m"}
	for ctx.Err() == nil {
		req := l.request(ctx, http.MethodPost, url, body, op.sid, "")
		req.Header.Set("Poppy-Extensions", `"operations";v="3"`)
		kind := "propose"
		if op.id != "" {
			kind = "approve"
			req.Header.Set("Poppy-Approval", fmt.Sprintf(
				`operation_id=%q, revision=%q, approver="user", approved_at=%d, input_type="tap"`,
				op.id, op.revision, time.Now().Unix()))
		}
		resp, err := l.e.lb.do(req)
		switch l.note(kind, resp, err, http.StatusCreated, http.StatusForbidden, http.StatusServiceUnavailable,
			http.StatusBadGateway, http.StatusGatewayTimeout) {
		case http.StatusCreated:
			if kind == "approve" {
				op.answer, op.answered = string(resp.body), true
				return
			}
		case http.StatusForbidden:
			var proposed struct {
				Error     string `json:"error"`
				Operation struct {
					ID       string `json:"operation_id"`
					Revision string `json:"revision"`
				} `json:"operation"`
			}
			if json.Unmarshal(resp.body, &proposed) == nil && proposed.Error == "approval_required" &&
				proposed.Operation.ID != "" {
				op.id, op.revision = proposed.Operation.ID, proposed.Operation.Revision
				continue
			}
		}
		pause(ctx, 200*time.Millisecond)
	}
}

// messages sends messages to the conversations in turn until stop
// closes, each again with the same ID until it is accepted or hard ends.
func (l *chaosLoad) messages(stop <-chan struct{}, hard context.Context, name string) {
	for n := 0; ; n++ {
		select {
		case <-stop:
			return
		default:
		}
		c := l.convs[n%len(l.convs)]
		id := fmt.Sprintf("%s-%d", name, n)
		msg := map[string]any{"message": map[string]any{"id": id, "author": map[string]string{"type": "human"},
			"text": "Where is my order? " + id}}
		for hard.Err() == nil {
			req := l.request(hard, http.MethodPost, chaosIssuer+"/poppy/conversations/"+c.id+"/messages", msg,
				"chaos-conversations", "")
			resp, err := l.e.lb.do(req)
			if l.note("message", resp, err, http.StatusAccepted, http.StatusServiceUnavailable) == http.StatusAccepted {
				c.mu.Lock()
				c.accepted = append(c.accepted, id)
				c.mu.Unlock()
				break
			}
			pause(hard, 200*time.Millisecond)
		}
		pause(hard, 50*time.Millisecond)
	}
}

// signedIn sends signed-in gateway calls until stop closes.
func (l *chaosLoad) signedIn(stop <-chan struct{}, hard context.Context, name string) {
	sid := "chaos-signed-in-" + name
	for n := 0; ; n++ {
		select {
		case <-stop:
			return
		default:
		}
		path := fmt.Sprintf("/orders/%s-%d", name, n)
		resp, err := l.e.lb.do(l.request(hard, http.MethodGet, chaosIssuer+"/api/"+chaosAPI+path, nil, sid, l.e.token))
		if l.note("signed-in call", resp, err, http.StatusOK, http.StatusServiceUnavailable, http.StatusBadGateway,
			http.StatusGatewayTimeout) == http.StatusOK {
			if !bytes.Contains(resp.body, []byte(fmt.Sprintf("%q", name+"-"+strconv.Itoa(n)))) {
				l.mu.Lock()
				l.unexpected = append(l.unexpected, fmt.Sprintf("signed-in call %s: answered %s", path, resp.body))
				l.mu.Unlock()
			}
			l.mu.Lock()
			l.reads = append(l.reads, chaosRead{path: path, sid: sid})
			l.mu.Unlock()
		}
		pause(hard, 30*time.Millisecond)
	}
}

// startConversation starts a conversation before any fault.
func (l *chaosLoad) startConversation(n int) *chaosConv {
	t := l.e.t
	id := fmt.Sprintf("start-%d", n)
	msg := map[string]any{"message": map[string]any{"id": id, "author": map[string]string{"type": "human"}, "text": "Hello"}}
	resp, err := l.e.lb.do(l.request(context.Background(), http.MethodPost, chaosIssuer+"/poppy/conversations", msg,
		"chaos-conversations", ""))
	if err != nil || resp.status != http.StatusCreated {
		t.Fatalf("start a conversation: %v %+v", err, resp)
	}
	var rep struct {
		ConversationID string `json:"conversation_id"`
	}
	if err := json.Unmarshal(resp.body, &rep); err != nil || rep.ConversationID == "" {
		t.Fatalf("start a conversation: %s", resp.body)
	}
	return &chaosConv{id: rep.ConversationID, accepted: []string{id}, got: map[string][]string{}}
}

// stream follows c as server-sent events until ctx ends, connecting again
// with Last-Event-ID after every end of the stream: the server's, a
// fault's, or its own after a random while (so that it resumes often, on
// either replica).
func (l *chaosLoad) stream(ctx context.Context, c *chaosConv) {
	last := ""
	for ctx.Err() == nil {
		l.streamOnce(ctx, c, &last)
	}
}

// streamOnce reads one stream of c from *last, keeping *last up to date.
func (l *chaosLoad) streamOnce(ctx context.Context, c *chaosConv, last *string) {
	ctx, cancel := context.WithTimeout(ctx, time.Second+rand.N(4*time.Second))
	defer cancel()
	req := l.request(ctx, http.MethodGet, chaosIssuer+"/poppy/conversations/"+c.id+"/events", nil,
		"chaos-conversations", "")
	req.Header.Set("Accept", "text/event-stream")
	if *last != "" {
		req.Header.Set("Last-Event-ID", *last)
	}
	resp, err := l.e.lb.stream.Do(req)
	if err != nil || resp.StatusCode != http.StatusOK {
		var r *response
		if err == nil {
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
			resp.Body.Close()
			r = &response{status: resp.StatusCode, body: body}
		}
		if ctx.Err() == nil {
			l.note("stream", r, err, http.StatusServiceUnavailable)
		}
		pause(ctx, 100*time.Millisecond)
		return
	}
	l.note("stream", &response{status: resp.StatusCode}, nil, http.StatusOK)
	st := &sseStream{name: "stream", events: make(chan sseEvent, 100), done: make(chan struct{})}
	go st.read(resp.Body)
	for e := range st.events {
		if e.id != "" { // text deltas have none
			c.add("sse", e.id)
			*last = e.id
		}
	}
}

// poll follows c with long-polls until ctx ends, each from the cursor
// the last one returned, each on a connection the balancer picks.
func (l *chaosLoad) poll(ctx context.Context, c *chaosConv) {
	cursor := ""
	for ctx.Err() == nil {
		// A wait of 0 to 3 seconds: some reads return at once, some wait.
		url := fmt.Sprintf("%s/poppy/conversations/%s/events?wait=%d&cursor=%s", chaosIssuer, c.id, rand.IntN(4), cursor)
		resp, err := l.e.lb.do(l.request(ctx, http.MethodGet, url, nil, "chaos-conversations", ""))
		if ctx.Err() != nil {
			return
		}
		if l.note("long-poll", resp, err, http.StatusOK, http.StatusServiceUnavailable) != http.StatusOK {
			// A refused replay included: the read is sent again, newly signed.
			pause(ctx, 100*time.Millisecond)
			continue
		}
		var rd conversationRead
		if err := json.Unmarshal(resp.body, &rd); err != nil {
			l.note("long-poll body", &response{status: -1, body: resp.body}, nil)
			continue
		}
		for _, e := range rd.Events {
			c.add("poll", e.ID)
		}
		if rd.Cursor != "" {
			cursor = rd.Cursor
		}
	}
}
