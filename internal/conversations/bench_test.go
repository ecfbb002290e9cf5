package conversations_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/conversations"
	"github.com/poppyhost/poppyhost/internal/testkit/peers"
	"github.com/poppyhost/poppyhost/internal/testkit/testdb"
)

// Benchmarks of the conversation endpoint (spec 8) over HTTPS, mounted as
// the platform mounts it (the rig of helpers_test.go); docs/benchmarks.md
// reports them.

const benchPkg = "github.com/poppyhost/poppyhost/internal/conversations."

// benchCompany is a Company whose conversation endpoint the benchmarks
// call as one Personal Agent User, in one Session.
type benchCompany struct {
	env      *rig
	agent    *peers.Agent
	slug     string
	endpoint string // {PUBLIC_URL}/t/{slug}/poppy/conversations
	aud      string
	sub, sid string
	// header is a Session JWT header with its delegation (pap_dlg): every
	// request reuses it, as a Personal Agent does between delegations, so
	// the server verifies one signature per request.
	header map[string]any
	n      atomic.Int64
}

// newBenchCompany creates a Company with conversations on, rate limits
// high enough never to answer 429, and settings merged in.
func newBenchCompany(b *testing.B, env *rig, agent *peers.Agent, settings map[string]any) *benchCompany {
	b.Helper()
	slug := "c" + benchRandom()[:10]
	body := map[string]any{
		"slug":         slug,
		"organization": map[string]any{"name": "Company " + slug, "domain": slug + ".example"},
		"rate_limits":  map[string]any{"per_address": 1_000_000, "per_agent": 1_000_000, "per_session": 1_000_000},
	}
	maps.Copy(body, settings)
	view := env.CreateCompany(b, body)
	c := &benchCompany{env: env, agent: agent, slug: slug, endpoint: env.PublicURL("/t/" + slug + "/poppy/conversations"),
		sub: "usr_bench", sid: benchRandom()}
	c.aud, _ = view["identifier"].(string)
	require.NotEmpty(b, c.aud)
	tok := agent.SessionJWT(b, peers.SessionClaims{Aud: c.aud, URL: c.endpoint, Sub: c.sub, SID: c.sid}, peers.SessionOptions{})
	raw, err := base64.RawURLEncoding.DecodeString(strings.Split(tok, ".")[0])
	require.NoError(b, err)
	require.NoError(b, json.Unmarshal(raw, &c.header))
	return c
}

// claims are a Session JWT's claims for method and rawURL, without the
// query (spec 5.2).
func (c *benchCompany) claims(method, rawURL string) map[string]any {
	htu, _, _ := strings.Cut(rawURL, "?")
	return map[string]any{"iss": c.agent.ClientID, "aud": c.aud, "sid": c.sid, "sub": c.sub,
		"htm": method, "htu": htu, "iat": time.Now().Unix(),
		"jti": "b" + strconv.FormatInt(c.n.Add(1), 10) + "_" + benchRandom()[:8]}
}

// request returns a signed request; body is sent as JSON when not nil.
func (c *benchCompany) request(b testing.TB, method, rawURL string, body []byte) *http.Request {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequest(method, rawURL, rd)
	if err != nil {
		b.Fatal(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Poppy-Session", peers.SignJWT(b, "ES256", c.agent.DelegatedKey(c.sub), c.header, c.claims(method, rawURL)))
	return req
}

// do sends a signed request and returns the status and body.
func (c *benchCompany) do(b testing.TB, method, rawURL string, body []byte) (int, []byte) {
	resp, err := c.env.Client.Do(c.request(b, method, rawURL, body))
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		b.Fatal(err)
	}
	return resp.StatusCode, raw
}

// messageBody is the body of a message with a new ID.
func (c *benchCompany) messageBody() []byte {
	return fmt.Appendf(nil, `{"message":{"id":"m%d_%s","author":{"type":"agent"},"text":"Where is my order?"}}`,
		c.n.Add(1), benchRandom()[:6])
}

// start starts a conversation and returns its ID.
func (c *benchCompany) start(b testing.TB) string {
	status, raw := c.do(b, http.MethodPost, c.endpoint, c.messageBody())
	if status != http.StatusCreated {
		b.Fatalf("start: status %d: %s", status, raw)
	}
	var rep struct {
		ConversationID string `json:"conversation_id"`
	}
	if err := json.Unmarshal(raw, &rep); err != nil || rep.ConversationID == "" {
		b.Fatalf("start: %v: %s", err, raw)
	}
	return rep.ConversationID
}

// cursor returns the conversation's last event ID (a read without wait).
func (c *benchCompany) cursor(b testing.TB, id string) string {
	status, raw := c.do(b, http.MethodGet, c.endpoint+"/"+id+"/events?wait=0", nil)
	require.Equal(b, http.StatusOK, status, "%s", raw)
	var rd struct {
		Cursor string `json:"cursor"`
	}
	require.NoError(b, json.Unmarshal(raw, &rd))
	require.NotEmpty(b, rd.Cursor)
	return rd.Cursor
}

// send posts a message and fails unless it is accepted.
func (c *benchCompany) send(b testing.TB, id string) {
	if status, raw := c.do(b, http.MethodPost, c.endpoint+"/"+id+"/messages", c.messageBody()); status != http.StatusAccepted {
		b.Fatalf("send: status %d: %s", status, raw)
	}
}

// warmUp sends two messages to each conversation, all at once, so that
// the pool has opened the connections a parallel run uses (a new
// PostgreSQL backend spends its first queries loading its caches).
func (c *benchCompany) warmUp(b *testing.B, ids []string) {
	var wg sync.WaitGroup
	for _, id := range ids {
		wg.Go(func() {
			c.send(b, id)
			c.send(b, id)
		})
	}
	wg.Wait() // a failed send ended only its goroutine
	if b.Failed() {
		b.FailNow()
	}
}

func benchRandom() string { return strings.ToLower(rand.Text()) }

// stacks is a reused buffer for runtime.Stack: polling for a parked
// reader must not make garbage, or the collections it causes would fall
// into the measured latencies.
var stacks = make([]byte, 1<<20)

// parkedIn counts this process's goroutines blocked in a select directly
// in fn, a function of this package: readers waiting for the hub.
func parkedIn(fn string) int {
	all := stacks[:runtime.Stack(stacks, true)]
	frame := []byte(benchPkg + fn + "(")
	n := 0
	for len(all) > 0 {
		var g []byte
		g, all, _ = bytes.Cut(all, []byte("\n\n"))
		head, rest, _ := bytes.Cut(g, []byte("\n"))
		if bytes.Contains(head, []byte("[select")) && bytes.HasPrefix(rest, frame) {
			n++
		}
	}
	return n
}

// waitParked waits until n goroutines are parked in fn.
func waitParked(b testing.TB, fn string, n int) {
	deadline := time.Now().Add(10 * time.Second)
	for parkedIn(fn) < n {
		if time.Now().After(deadline) {
			b.Fatalf("no reader parked in %s after 10s", fn)
		}
		time.Sleep(200 * time.Microsecond)
	}
}

// reportLatencies reports the median and 99th percentile of ds, and
// returns the 99th percentile in µs.
func reportLatencies(b *testing.B, name string, ds []time.Duration) float64 {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	at := func(q float64) float64 {
		i := max(int(math.Ceil(q*float64(len(ds))))-1, 0)
		return float64(ds[i].Nanoseconds()) / 1e3
	}
	b.ReportMetric(at(0.50), name+"-p50-µs")
	b.ReportMetric(at(0.99), name+"-p99-µs")
	return at(0.99)
}

// bareListener times bare NOTIFYs: from a pg_notify's commit on the pool
// to a connection of its own that LISTENs receiving it.
type bareListener struct {
	b        *testing.B
	pool     *pgxpool.Pool
	listener *pgx.Conn
	times    []time.Duration
}

// newBareListener starts listening; it stops when the benchmark ends.
func newBareListener(b *testing.B, pool *pgxpool.Pool) *bareListener {
	ctx := context.Background()
	conn, err := pool.Acquire(ctx)
	require.NoError(b, err)
	l := &bareListener{b: b, pool: pool, listener: conn.Hijack()}
	b.Cleanup(func() { l.listener.Close(ctx) })
	_, err = l.listener.Exec(ctx, "LISTEN bench_bare_notify")
	require.NoError(b, err)
	return l
}

// once times one bare NOTIFY.
func (l *bareListener) once() {
	ctx := context.Background()
	_, err := l.pool.Exec(ctx, `SELECT pg_notify('bench_bare_notify', 'x')`)
	require.NoError(l.b, err)
	sent := time.Now()
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, err = l.listener.WaitForNotification(wctx)
	require.NoError(l.b, err)
	l.times = append(l.times, time.Since(sent))
}

// parkedBare times bare NOTIFYs as the hub hears them: from a pg_notify's
// commit on the pool (its reply read, as commitClock notes a message's) to
// a goroutine of its own, already waiting on a LISTENing connection,
// receiving it.
type parkedBare struct {
	b     *testing.B
	pool  *pgxpool.Pool
	heard chan time.Time
	times []time.Duration
}

// newParkedBare starts listening; it stops when the benchmark ends.
func newParkedBare(b *testing.B, pool *pgxpool.Pool) *parkedBare {
	ctx, cancel := context.WithCancel(context.Background())
	conn, err := pool.Acquire(ctx)
	require.NoError(b, err)
	listener := conn.Hijack()
	_, err = listener.Exec(ctx, "LISTEN bench_parked_notify")
	require.NoError(b, err)
	l := &parkedBare{b: b, pool: pool, heard: make(chan time.Time, 1)}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			if _, err := listener.WaitForNotification(ctx); err != nil {
				return
			}
			l.heard <- time.Now()
		}
	}()
	b.Cleanup(func() {
		cancel()
		<-done
		listener.Close(context.Background())
	})
	return l
}

// once times one bare NOTIFY.
func (l *parkedBare) once() {
	_, err := l.pool.Exec(context.Background(), `SELECT pg_notify('bench_parked_notify', 'x')`)
	require.NoError(l.b, err)
	sent := time.Now()
	select {
	case at := <-l.heard:
		l.times = append(l.times, at.Sub(sent))
	case <-time.After(10 * time.Second):
		l.b.Fatal("no bare notification after 10s")
	}
}

// bareNotify is the floor under a reader's wake-up, measured in the same
// run: n bare NOTIFYs one after another.
func bareNotify(b *testing.B, pool *pgxpool.Pool, n int) []time.Duration {
	l := newBareListener(b, pool)
	for range n {
		l.once()
	}
	return l.times
}

// reportAgainstBare reports a wake-up's p99 over a bare NOTIFY's, measured
// after it in the same process (x-bare-p99), and over that of the bare
// NOTIFYs interleaved with the wake-ups, one after each, which saw the
// same load (x-ibare-p99).
//
// Those compare unlike points: the wake-up is timed from the POST's answer,
// which the client reads after the message's commit, the bare NOTIFY from
// its commit's reply, and the bare listener reads on the timing goroutine
// itself, often a notification already in its socket. So it also reports
// the wake-up timed from the message's commit, as the server's pool read
// its reply (cwake), over a bare NOTIFY timed from its commit's reply to a
// goroutine already waiting on the LISTENing connection, as the hub's
// listener waits, one after each wake-up (pbare): x-pbare-p99.
func reportAgainstBare(b *testing.B, pool *pgxpool.Pool, wakeP99 float64, n int, interleaved *bareListener,
	cwake []time.Duration, parked *parkedBare) {
	if ibare := reportLatencies(b, "ibare", interleaved.times); ibare > 0 {
		b.ReportMetric(wakeP99/ibare, "x-ibare-p99")
	}
	cwakeP99 := reportLatencies(b, "cwake", cwake)
	if pbare := reportLatencies(b, "pbare", parked.times); pbare > 0 {
		b.ReportMetric(cwakeP99/pbare, "x-pbare-p99")
	}
	// One listener at a time, as before the interleaved ones.
	require.NoError(b, interleaved.listener.Close(context.Background()))
	bare := reportLatencies(b, "bare", bareNotify(b, pool, max(n, 100)))
	if bare > 0 {
		b.ReportMetric(wakeP99/bare, "x-bare-p99")
	}
}

// BenchmarkWakeLongPoll measures how fast a waiting long-poll (GET events
// with wait=25) learns of a message: each iteration parks a reader on the
// conversation, posts a message, and takes the time from the POST's
// response to the long-poll's response (wake), and from the message's
// commit (cwake; reportAgainstBare). That path is the commit's NOTIFY,
// the hub's LISTEN connection, the events it carried, and the JSON answer
// over HTTP/2. Client and server share the process and one
// HTTP/2 connection; ns/op also counts waiting for the reader to park, so
// read the wake-* figures, not ns/op.
func BenchmarkWakeLongPoll(b *testing.B) {
	env := newBenchRig(b)
	benchWakeLongPoll(b, env, env.Client)
}

// BenchmarkWakeLongPollAcross is BenchmarkWakeLongPoll with the reader on
// a second replica (its own hub, pool and listener, in this process): the
// message reaches it only by the NOTIFY.
func BenchmarkWakeLongPollAcross(b *testing.B) {
	env := newBenchRig(b)
	benchWakeLongPoll(b, env, secondInstance(b, env))
}

// benchWakeLongPoll runs BenchmarkWakeLongPoll with the reader on reader's
// server.
func benchWakeLongPoll(b *testing.B, env *rig, reader *http.Client) {
	c := newBenchCompany(b, env, env.StartAgent(b, ""), nil)
	id := c.start(b)
	cursor := c.cursor(b, id)

	type answer struct {
		at     time.Time
		cursor string
		events int
		err    error
	}
	poll := func(cursor string, out chan<- answer) {
		resp, err := reader.Do(c.request(b, http.MethodGet, c.endpoint+"/"+id+"/events?wait=25&cursor="+cursor, nil))
		if err != nil {
			out <- answer{err: err}
			return
		}
		defer resp.Body.Close()
		var rd struct {
			Cursor string            `json:"cursor"`
			Events []json.RawMessage `json:"events"`
		}
		err = json.NewDecoder(resp.Body).Decode(&rd)
		at := time.Now()
		if err == nil && resp.StatusCode != http.StatusOK {
			err = fmt.Errorf("long-poll: status %d", resp.StatusCode)
		}
		out <- answer{at: at, cursor: rd.Cursor, events: len(rd.Events), err: err}
	}

	var wake, post, cwake []time.Duration
	out := make(chan answer, 1)
	bare, parked := newBareListener(b, env.Pool), newParkedBare(b, env.Pool)
	for b.Loop() {
		go poll(cursor, out)
		waitParked(b, "(*reader).read", 1)
		sent := time.Now()
		c.send(b, id)
		accepted := time.Now()
		a := <-out
		if a.err != nil {
			b.Fatal(a.err)
		}
		if a.events != 1 {
			b.Fatalf("long-poll answered %d events, want 1", a.events)
		}
		wake = append(wake, a.at.Sub(accepted))
		cwake = append(cwake, a.at.Sub(env.Commits.At()))
		post = append(post, accepted.Sub(sent))
		cursor = a.cursor
		bare.once()
		parked.once()
	}
	n := len(wake)
	p99 := reportLatencies(b, "wake", wake)
	reportLatencies(b, "post", post)
	reportAgainstBare(b, env.Pool, p99, n, bare, cwake, parked)
}

// BenchmarkWakeSSE is BenchmarkWakeLongPoll with one open server-sent
// events stream: the time from the POST's response (and from the
// message's commit) to the event's data: line arriving.
func BenchmarkWakeSSE(b *testing.B) {
	env := newBenchRig(b)
	benchWakeSSE(b, env, env.Client)
}

// BenchmarkWakeSSEAcross is BenchmarkWakeSSE with the stream on a second
// replica, as BenchmarkWakeLongPollAcross.
func BenchmarkWakeSSEAcross(b *testing.B) {
	env := newBenchRig(b)
	benchWakeSSE(b, env, secondInstance(b, env))
}

// benchWakeSSE runs BenchmarkWakeSSE with the stream on reader's server.
func benchWakeSSE(b *testing.B, env *rig, reader *http.Client) {
	c := newBenchCompany(b, env, env.StartAgent(b, ""), nil)
	id := c.start(b)
	cursor := c.cursor(b, id)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req := c.request(b, http.MethodGet, c.endpoint+"/"+id+"/events?cursor="+cursor, nil).WithContext(ctx)
	req.Header.Set("Accept", "text/event-stream")
	resp, err := reader.Do(req)
	require.NoError(b, err)
	defer resp.Body.Close()
	require.Equal(b, http.StatusOK, resp.StatusCode)
	require.Equal(b, "text/event-stream", resp.Header.Get("Content-Type"))
	data := make(chan time.Time, 16)
	go func() {
		defer close(data)
		lines := bufio.NewReader(resp.Body)
		for {
			line, err := lines.ReadString('\n')
			if err != nil {
				return
			}
			if strings.HasPrefix(line, "data:") {
				data <- time.Now()
			}
		}
	}()

	var wake, post, cwake []time.Duration
	bare, parked := newBareListener(b, env.Pool), newParkedBare(b, env.Pool)
	for b.Loop() {
		waitParked(b, "(*eventStream).wait", 1)
		sent := time.Now()
		c.send(b, id)
		accepted := time.Now()
		at, ok := <-data
		if !ok {
			b.Fatal("the stream ended")
		}
		wake = append(wake, at.Sub(accepted))
		cwake = append(cwake, at.Sub(env.Commits.At()))
		post = append(post, accepted.Sub(sent))
		bare.once()
		parked.once()
	}
	n := len(wake)
	p99 := reportLatencies(b, "wake", wake)
	reportLatencies(b, "post", post)
	reportAgainstBare(b, env.Pool, p99, n, bare, cwake, parked)
}

// BenchmarkSendMessage posts messages through POST .../messages with
// 4×GOMAXPROCS clients, each on its own conversation, over one HTTP/2
// connection: the messages a process accepts per second. Each message is
// one transaction: the conversation locked, the message ID checked and
// recorded, the event appended with its NOTIFY, and the Company Agent's
// delivery job inserted (River's InsertTx). jobs/op counts the River jobs
// added. Nothing works the jobs in the test server, and a delivery job is
// unique per conversation while it waits, so:
//
//   - webhook=off: the Company has no conversations.agent_webhook;
//   - webhook=on/waiting: it has one, and each message finds its
//     conversation's job still waiting (River's unique insert adds no row),
//     as in a burst of messages on one conversation;
//   - webhook=on/new: a goroutine completes the waiting jobs every 10 ms,
//     as a worker that keeps up would, so each message inserts a new job.
func BenchmarkSendMessage(b *testing.B) {
	env := newBenchRig(b)
	agent := env.StartAgent(b, "")
	agent.Serve("/webhook", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) })
	webhook := map[string]any{"conversations": map[string]any{
		"enabled": true, "access": "session", "agent_webhook": agent.URL("/webhook")}}
	for _, bc := range []struct {
		name     string
		settings map[string]any
		complete bool
	}{
		{"webhook=off", nil, false},
		{"webhook=on/waiting", webhook, false},
		{"webhook=on/new", webhook, true},
	} {
		b.Run(bc.name, func(b *testing.B) {
			c := newBenchCompany(b, env, agent, bc.settings)
			ids := c.sendConversations(b)
			if bc.complete {
				defer completeJobs(b, env)()
			}
			sendParallel(b, env, ids, func(id string) error { return c.post(b, id) })
		})
	}
}

// BenchmarkSendMessageRounds is BenchmarkSendMessage's webhook=off case
// five times back to back on one database that is never analyzed (the
// test server runs without autovacuum): every round's events and message
// IDs stay, so a plan that read a Company's conversations or events
// instead of one would slow each round down (issue 24). x-round1 is a
// round's ns/op over the first round's.
func BenchmarkSendMessageRounds(b *testing.B) {
	env := newBenchRig(b)
	agent := env.StartAgent(b, "")
	c := newBenchCompany(b, env, agent, nil)
	ids := c.sendConversations(b)
	var first float64
	for i := 1; i <= 5; i++ {
		var nsPerOp float64
		b.Run("round="+strconv.Itoa(i), func(b *testing.B) {
			sendParallel(b, env, ids, func(id string) error { return c.post(b, id) })
			nsPerOp = float64(b.Elapsed().Nanoseconds()) / float64(b.N)
			if first > 0 {
				b.ReportMetric(nsPerOp/first, "x-round1")
			}
		})
		if i == 1 {
			first = nsPerOp
		}
	}
}

// sendPerProc is how many sending clients per GOMAXPROCS.
const sendPerProc = 4

// sendConversations starts one conversation per client of sendParallel,
// warmed up.
func (c *benchCompany) sendConversations(b *testing.B) []string {
	ids := make([]string, sendPerProc*runtime.GOMAXPROCS(0))
	for i := range ids {
		ids[i] = c.start(b)
	}
	c.warmUp(b, ids)
	return ids
}

// sendParallel sends messages from one client per conversation of ids,
// each with send, and reports the counters of benchCounters.
func sendParallel(b *testing.B, env *rig, ids []string, send func(id string) error) {
	before := benchCounters(b, env)
	var next atomic.Int64
	b.SetParallelism(sendPerProc)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		id := ids[int(next.Add(1)-1)%len(ids)]
		for pb.Next() {
			if err := send(id); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.StopTimer()
	before.report(b, benchCounters(b, env))
}

// post posts a message to conversation id through POST .../messages.
func (c *benchCompany) post(b *testing.B, id string) error {
	status, raw := c.do(b, http.MethodPost, c.endpoint+"/"+id+"/messages", c.messageBody())
	if status != http.StatusAccepted {
		return fmt.Errorf("send: status %d: %s", status, raw)
	}
	return nil
}

// BenchmarkStoreSend is the transaction of BenchmarkSendMessage alone:
// Store.Send with 4×GOMAXPROCS goroutines, each on its own conversation,
// without HTTP, Session verification or JSON. job=none is a Store without
// an Enqueuer; job=waiting and job=new are the Store with River's delivery
// job, as in BenchmarkSendMessage.
func BenchmarkStoreSend(b *testing.B) {
	env := newBenchRig(b)
	agent := env.StartAgent(b, "")
	c := newBenchCompany(b, env, agent, nil)
	ctx := context.Background()
	var companyID int64
	require.NoError(b, env.Pool.QueryRow(ctx, `SELECT id FROM companies WHERE slug = $1`, c.slug).Scan(&companyID))
	delivery := conversations.NewDelivery(conversations.DeliveryOptions{Pool: env.Pool, Sealer: testdb.Sealer(env.Pool), Jobs: testdb.Inserter(b, env.Pool)})
	owner := conversations.Owner{ClientID: agent.ClientID, UserID: c.sub}
	text := "Where is my order?"
	for _, bc := range []struct {
		name     string
		enqueue  conversations.Enqueuer
		complete bool
	}{
		{"job=none", nil, false},
		{"job=waiting", delivery, false},
		{"job=new", delivery, true},
	} {
		b.Run(bc.name, func(b *testing.B) {
			store := conversations.NewStore(env.Pool, conversations.StoreOptions{Enqueue: bc.enqueue})
			ids := c.sendConversations(b)
			if bc.complete {
				defer completeJobs(b, env)()
			}
			sendParallel(b, env, ids, func(id string) error {
				m := &conversations.Message{ID: "s" + strconv.FormatInt(c.n.Add(1), 10) + "_" + benchRandom()[:6],
					Author: conversations.Author{Type: conversations.ResponderAgent}, Text: &text}
				_, err := store.Send(ctx, companyID, owner, id, m, conversations.Policy{})
				return err
			})
		})
	}
}

// sendCounters are what a run of messages used: River's jobs, the CPU
// time of this process (client and server) and of the test database's
// PostgreSQL backends, by pid.
type sendCounters struct {
	jobs    int64
	cpu     time.Duration
	backend map[int32]time.Duration
}

func benchCounters(b *testing.B, env *rig) sendCounters {
	var pids []int32
	c := sendCounters{cpu: processTime(), backend: map[int32]time.Duration{}}
	require.NoError(b, env.Pool.QueryRow(context.Background(), `SELECT (SELECT count(*) FROM river_job),
		(SELECT array_agg(pid) FROM pg_stat_activity WHERE datname = current_database())`).Scan(&c.jobs, &pids))
	for _, pid := range pids {
		c.backend[pid] = backendTime(pid)
	}
	return c
}

// report reports messages per second and, per message, the jobs added and
// the CPU time used: in Go (client and server share the process; under
// load these are steadier than the times) and in PostgreSQL (backends
// opened during the run count whole).
func (c sendCounters) report(b *testing.B, after sendCounters) {
	n := float64(b.N)
	b.ReportMetric(n/b.Elapsed().Seconds(), "msgs/s")
	b.ReportMetric(float64(after.jobs-c.jobs)/n, "jobs/op")
	b.ReportMetric(float64((after.cpu-c.cpu).Microseconds())/n, "go-cpu-µs/op")
	var pg time.Duration
	for pid, t := range after.backend {
		pg += t - c.backend[pid]
	}
	if pg > 0 {
		b.ReportMetric(float64(pg.Microseconds())/n, "pg-cpu-µs/op")
	}
}

// processTime is the CPU time this process has used.
func processTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// backendTime is a process's user and system time from /proc/{pid}/stat,
// in clock ticks of 10 ms; zero when it cannot be read (PostgreSQL on
// another machine).
func backendTime(pid int32) time.Duration {
	raw, err := os.ReadFile("/proc/" + strconv.Itoa(int(pid)) + "/stat")
	if err != nil {
		return 0
	}
	// utime and stime are fields 14 and 15, counted from after the
	// command name, which ends with the last ')'.
	f := strings.Fields(string(raw[bytes.LastIndexByte(raw, ')')+1:]))
	if len(f) < 13 {
		return 0
	}
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(utime+stime) * 10 * time.Millisecond
}

// completeJobs marks waiting jobs completed every 10 ms until stop is
// called, which frees their conversations' unique key for a new job.
func completeJobs(b *testing.B, env *rig) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			if _, err := env.Pool.Exec(ctx, `UPDATE river_job SET state = 'completed', finalized_at = now()
				WHERE state = 'available'`); err != nil && ctx.Err() == nil {
				b.Error(err)
				return
			}
		}
	}()
	return func() {
		cancel()
		<-done
	}
}

// streamClientEnv makes the test binary a stream client for
// BenchmarkIdleStreams (TestIdleStreamsClient).
const streamClientEnv = "POPPY_BENCH_STREAM_CLIENT"

// streamClientConfig is what BenchmarkIdleStreams sends its client.
type streamClientConfig struct {
	Addr string
	CA   []byte
	// Each: one connection per stream; otherwise streams share HTTP/2
	// connections, as many as the server's stream limit requires.
	Each bool
	URLs []string
	// Header and Claims make the Session JWTs, signed with Key (PKCS#8).
	Header map[string]any
	Claims map[string]any
	Key    []byte
}

// BenchmarkIdleStreams opens N idle server-sent events streams, each on
// its own conversation, and measures what the server holds for them: heap
// (live after GC) and goroutine stacks per stream, and goroutines per
// stream. The streams are opened by a child process (this test binary
// running TestIdleStreamsClient), so the figures are the server's alone.
// shared: the streams share HTTP/2 connections (the server allows 250
// streams on one); each: one TLS connection per stream. Run it with
// -benchtime=1x: an iteration is the whole measurement. The server's
// middleware chain is the platform's, with conversations.ParkStreams
// outermost but for the instrumentation.
func BenchmarkIdleStreams(b *testing.B) {
	env := newBenchRig(b)
	c := newBenchCompany(b, env, env.StartAgent(b, ""), nil)
	var ids []string
	for _, n := range []int{1000, 5000, 20000} {
		for _, mode := range []string{"shared", "each"} {
			if mode == "each" && n > 5000 {
				continue // a TLS connection each: 5,000 say enough
			}
			b.Run(fmt.Sprintf("%s/streams=%d", mode, n), func(b *testing.B) {
				ids = benchConversations(b, c, ids, n)
				var heap, stack, goroutines, conns float64
				iterations := 0
				for b.Loop() {
					m := measureStreams(b, c, ids[:n], mode == "each")
					heap += m.heap
					stack += m.stack
					goroutines += m.goroutines
					conns += m.conns
					iterations++
				}
				k := float64(iterations * n)
				b.ReportMetric(heap/k, "heap-B/stream")
				b.ReportMetric(stack/k, "stack-B/stream")
				b.ReportMetric((heap+stack)/k, "B/stream")
				b.ReportMetric(goroutines/k, "goroutines/stream")
				b.ReportMetric(conns/float64(iterations), "conns")
			})
		}
	}
}

// benchConversations starts conversations until there are n, 8 at a time.
func benchConversations(b *testing.B, c *benchCompany, ids []string, n int) []string {
	if len(ids) >= n {
		return ids
	}
	more := make([]string, n-len(ids))
	var next atomic.Int64
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for i := next.Add(1) - 1; i < int64(len(more)); i = next.Add(1) - 1 {
				more[i] = c.start(b)
			}
		})
	}
	wg.Wait() // a failed start ended only its goroutine
	if b.Failed() {
		b.FailNow()
	}
	return append(ids, more...)
}

type streamFigures struct{ heap, stack, goroutines, conns float64 }

// serverMemory is the live heap and goroutine stacks after a collection.
func serverMemory() (heap, stack uint64, goroutines int) {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc, ms.StackInuse, runtime.NumGoroutine()
}

// streamsOpen counts the server's stream handlers, parked or not.
func streamsOpen() int {
	var buf bytes.Buffer
	_ = pprof.Lookup("goroutine").WriteTo(&buf, 1)
	// The profile starts "goroutine profile: total N", then the records,
	// each "{count} @ {pcs}" and its frames, separated by blank lines.
	_, profile, _ := strings.Cut(buf.String(), "\n")
	n := 0
	for rec := range strings.SplitSeq(profile, "\n\n") {
		if !strings.Contains(rec, benchPkg+"(*eventStream).wait+") {
			continue
		}
		count, _, _ := strings.Cut(rec, " ")
		k, _ := strconv.Atoi(count)
		n += k
	}
	return n
}

// measureStreams has a child process open a stream on each conversation
// and returns the server's growth while they are open.
func measureStreams(b *testing.B, c *benchCompany, ids []string, each bool) streamFigures {
	b.Helper()
	// Warm up the Session's caches (client metadata, delegation) first,
	// so that they are not counted.
	c.cursor(b, ids[0])
	heap0, stack0, g0 := serverMemory()

	key, err := x509.MarshalPKCS8PrivateKey(c.agent.DelegatedKey(c.sub))
	require.NoError(b, err)
	cfg := streamClientConfig{Addr: "127.0.0.1:" + c.env.Port, CA: c.env.CA.CertPEM(), Each: each,
		Header: c.header, Claims: c.claims(http.MethodGet, c.endpoint), Key: key}
	for _, id := range ids {
		cfg.URLs = append(cfg.URLs, c.endpoint+"/"+id+"/events?cursor=evt_2")
	}
	exe, err := os.Executable()
	require.NoError(b, err)
	cmd := exec.Command(exe, "-test.run=^TestIdleStreamsClient$", "-test.count=1")
	cmd.Env = append(os.Environ(), streamClientEnv+"=1")
	stdin, err := cmd.StdinPipe()
	require.NoError(b, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(b, err)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	require.NoError(b, cmd.Start())
	defer func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	}()
	require.NoError(b, json.NewEncoder(stdin).Encode(cfg))

	ready := make(chan string, 1)
	go func() {
		lines := bufio.NewScanner(stdout)
		for lines.Scan() {
			if strings.HasPrefix(lines.Text(), "ready ") {
				ready <- lines.Text()
			}
		}
		close(ready)
	}()
	var line string
	select {
	case line = <-ready:
	case <-time.After(3 * time.Minute):
	}
	var opened, conns int
	if _, err := fmt.Sscanf(line, "ready %d %d", &opened, &conns); err != nil || opened != len(ids) {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		b.Fatalf("stream client: %q, %v: %s", line, err, stderr.String())
	}
	for deadline := time.Now().Add(time.Minute); streamsOpen() < len(ids); {
		if time.Now().After(deadline) {
			b.Fatalf("%d of %d streams open on the server", streamsOpen(), len(ids))
		}
		time.Sleep(10 * time.Millisecond)
	}
	heap1, stack1, g1 := serverMemory()

	stdin.Close()
	if err := cmd.Wait(); err != nil {
		b.Fatalf("stream client: %v: %s", err, stderr.String())
	}
	for deadline := time.Now().Add(time.Minute); streamsOpen() > 0; {
		if time.Now().After(deadline) {
			b.Fatalf("%d streams still open after the client left", streamsOpen())
		}
		time.Sleep(10 * time.Millisecond)
	}
	return streamFigures{heap: float64(int64(heap1) - int64(heap0)), stack: float64(int64(stack1) - int64(stack0)),
		goroutines: float64(g1 - g0), conns: float64(conns)}
}

// TestIdleStreamsClient is BenchmarkIdleStreams's client, run in a child
// process: it reads a streamClientConfig from stdin, opens every stream,
// prints "ready {streams} {connections}", and holds them until stdin
// closes.
func TestIdleStreamsClient(t *testing.T) {
	if os.Getenv(streamClientEnv) == "" {
		t.Skip("the client half of BenchmarkIdleStreams")
	}
	in := bufio.NewReader(os.Stdin)
	var cfg streamClientConfig
	require.NoError(t, json.NewDecoder(in).Decode(&cfg))
	der, _ := pem.Decode(cfg.CA)
	require.NotNil(t, der)
	caCert, err := x509.ParseCertificate(der.Bytes)
	require.NoError(t, err)
	roots := x509.NewCertPool()
	roots.AddCert(caCert)
	parsed, err := x509.ParsePKCS8PrivateKey(cfg.Key)
	require.NoError(t, err)
	key, ok := parsed.(crypto.Signer)
	require.True(t, ok)

	var conns atomic.Int64
	newTransport := func() *http.Transport {
		return &http.Transport{
			TLSClientConfig:   &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12},
			ForceAttemptHTTP2: true,
			DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
				var d net.Dialer
				conn, err := d.DialContext(ctx, network, cfg.Addr)
				if err != nil {
					return nil, err
				}
				conns.Add(1)
				return &countedConn{Conn: conn, open: &conns}, nil
			},
		}
	}
	shared := newTransport()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
		next atomic.Int64
	)
	for range 32 {
		wg.Go(func() {
			for i := next.Add(1) - 1; i < int64(len(cfg.URLs)); i = next.Add(1) - 1 {
				tr := shared
				if cfg.Each {
					tr = newTransport()
				}
				if err := openStream(ctx, t, cfg, key, cfg.URLs[i], tr); err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
					return
				}
			}
		})
	}
	wg.Wait()
	require.NoError(t, errors.Join(errs...))
	fmt.Printf("ready %d %d\n", len(cfg.URLs), conns.Load())
	_, _ = io.Copy(io.Discard, in)
}

// openStream opens one stream and reads it in the background until ctx
// ends.
func openStream(ctx context.Context, t *testing.T, cfg streamClientConfig, key crypto.Signer, rawURL string, tr *http.Transport) error {
	claims := maps.Clone(cfg.Claims)
	htu, _, _ := strings.Cut(rawURL, "?")
	claims["htu"], claims["iat"], claims["jti"] = htu, time.Now().Unix(), benchRandom()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, rawURL, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Poppy-Session", peers.SignJWT(t, "ES256", key, cfg.Header, claims))
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return fmt.Errorf("%s: status %d: %s", rawURL, resp.StatusCode, raw)
	}
	go func() {
		defer resp.Body.Close()
		_, _ = io.Copy(io.Discard, resp.Body)
	}()
	return nil
}

// countedConn keeps open counting the open connections: the transport
// closes the extra connections that concurrent requests dial before
// HTTP/2 is negotiated.
type countedConn struct {
	net.Conn
	open *atomic.Int64
	once sync.Once
}

func (c *countedConn) Close() error {
	c.once.Do(func() { c.open.Add(-1) })
	return c.Conn.Close()
}
