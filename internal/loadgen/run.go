package loadgen

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"
)

// Options configure a run.
type Options struct {
	Setup
	// Rate is the requests per second of all kinds together.
	Rate float64
	// Duration is how long the load runs.
	Duration time.Duration
	// Mix is each kind's share of Rate; nil is DefaultMix. A kind left
	// out is not sent.
	Mix map[Kind]float64
	// Users is how many Users are signed in for SignedIn [20], and
	// Chains how many separate sign-ins Refresh rotates through [32].
	Users, Chains int
	// Sessions is how many signed-out Sessions SignedOut and MCP use [50].
	Sessions int
	// Conversations is how many conversations Message sends to, each with
	// one reader long-polling its events [10].
	Conversations int
	// Lead is how far ahead targets are signed [3 s].
	Lead time.Duration
	// Sample is how often the servers' CPU and RSS are read [1 s].
	Sample time.Duration
	// Warmup runs the load this long before Duration, its figures left
	// out: connections are opened and caches filled then [0].
	Warmup time.Duration
}

func (o *Options) defaults() {
	if o.Mix == nil {
		o.Mix = DefaultMix
	}
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&o.Users, 20)
	def(&o.Chains, 32)
	def(&o.Sessions, 50)
	def(&o.Conversations, 10)
	if o.Lead <= 0 {
		o.Lead = 3 * time.Second
	}
	if o.Sample <= 0 {
		o.Sample = time.Second
	}
}

// Run starts the platform as Setup says, prepares the Users, Sessions and
// conversations, runs the load and returns the report.
func Run(ctx context.Context, o Options) (*Report, error) {
	o.defaults()
	if o.Rate <= 0 || o.Duration <= 0 {
		return nil, errors.New("loadgen: Rate and Duration must be positive")
	}
	e, err := start(ctx, o.Setup)
	if err != nil {
		return nil, err
	}
	defer e.close()
	p, err := e.prepare(ctx, o)
	if err != nil {
		return nil, err
	}
	return e.attack(ctx, o, p)
}

// prepare signs the Users in, makes the Sessions and starts the
// conversations.
func (e *env) prepare(ctx context.Context, o Options) (*pools, error) {
	p := &pools{refresh: make(chan string, o.Chains)}
	for range o.Sessions {
		u, err := e.agent.newUser(issuer)
		if err != nil {
			return nil, err
		}
		p.signedOut = append(p.signedOut, u)
	}
	for i := range o.Users + o.Chains {
		g, err := e.signIn(ctx, i)
		if err != nil {
			return nil, fmt.Errorf("sign-in %d: %w", i, err)
		}
		if i >= o.Users {
			p.refresh <- g.RefreshToken
			continue
		}
		u, err := e.agent.newUser(issuer)
		if err != nil {
			return nil, err
		}
		p.signedIn = append(p.signedIn, signedIn{user: u, token: g.AccessToken})
	}
	for range o.Conversations {
		u, err := e.agent.newUser(issuer)
		if err != nil {
			return nil, err
		}
		var started struct {
			ConversationID string `json:"conversation_id"`
		}
		body := map[string]any{"message": map[string]any{"id": firstMessage, "author": map[string]string{"type": "human"},
			"text": "Hello"}}
		if err := e.signedJSON(ctx, u, http.MethodPost, issuer+"/poppy/conversations", body, &started); err != nil {
			return nil, fmt.Errorf("start a conversation: %w", err)
		}
		p.convs = append(p.convs, &conversation{id: started.ConversationID, user: u})
	}
	return p, nil
}

// firstMessage is the ID of the message that starts each conversation.
const firstMessage = "m0"

// signedJSON sends a JSON request with a Session JWT and decodes a 2xx
// answer into out.
func (e *env) signedJSON(ctx context.Context, u *user, method, target string, body, out any) error {
	raw, err := json.Marshal(body)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, method, target, bytes.NewReader(raw))
	if err != nil {
		return err
	}
	return e.sendSigned(u, req, out)
}

func (e *env) sendSigned(u *user, req *http.Request, out any) error {
	jwt, err := u.sessionJWT(req.Method, req.URL.Scheme+"://"+req.URL.Host+req.URL.EscapedPath(), "")
	if err != nil {
		return err
	}
	req.Header.Set("Poppy-Session", jwt)
	req.Header.Set("Poppy-Version", "1.0")
	if req.Body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	return e.doJSON(req, out)
}

// attack runs every kind of the mix at its share of the rate, the
// readers and the sampler, until Duration has passed.
func (e *env) attack(ctx context.Context, o Options, p *pools) (*Report, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	rep := &Report{Rate: o.Rate, Duration: o.Duration, Replicas: len(e.addrs), LoadBefore: loadAverage()}
	measureFrom := time.Now().Add(o.Warmup)
	readers := e.startReaders(ctx, p, measureFrom)
	var sampler *sampler
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		select {
		case <-time.After(o.Warmup):
			sampler = startSampler(append(e.pids(), os.Getpid()), databaseName(o.DatabaseURL), o.Sample)
		case <-ctx.Done():
		}
	}()

	tl := &timeline{from: measureFrom}
	makers := e.makers(p)
	var wg sync.WaitGroup
	results := make([]*KindReport, 0, len(Kinds))
	for _, k := range Kinds {
		share := o.Mix[k]
		if share <= 0 {
			continue
		}
		rate := o.Rate * share
		kr := newKindReport(k, rate)
		results = append(results, kr)
		client := e.client
		if k == Message {
			client = &http.Client{Transport: acceptedTransport{base: e.client.Transport, sent: &p.sent},
				Timeout: e.client.Timeout, CheckRedirect: e.client.CheckRedirect}
		}
		atk := vegeta.NewAttacker(vegeta.Client(client), vegeta.Workers(uint64(max(4, math.Ceil(rate/20)))))
		// Freq hits every Per: rate per second, also below one.
		pacer := vegeta.ConstantPacer{Freq: int(math.Round(rate * 1000)), Per: 1000 * time.Second}
		// A refresh carries no Session JWT and takes a refresh token only
		// when it is sent; every other kind is signed ahead.
		tr := vegeta.Targeter(makers[k])
		if k != Refresh {
			tr = presign(ctx, makers[k], rate, o.Lead.Seconds())
		}
		wg.Go(func() {
			for r := range atk.Attack(tr, pacer, o.Warmup+o.Duration, string(k)) {
				if kr.add(r, p, !r.Timestamp.Before(measureFrom)) {
					tl.add(r, r.Code == 0)
				}
			}
		})
	}
	wg.Wait()
	rep.Elapsed = time.Since(measureFrom)
	<-sampled
	cancel()
	if sampler == nil {
		return nil, ctx.Err()
	}
	rep.Readers = readers.wait()
	rep.Timeline = tl.seconds
	procs, db := sampler.stop()
	rep.Database = db
	rep.Servers, rep.Generator = procs[:len(procs)-1], procs[len(procs)-1]
	rep.MachineBusy = sampler.machineBusy()
	rep.CPUs = runtime.NumCPU()
	rep.LoadAfter = loadAverage()
	for _, kr := range results {
		kr.close()
		rep.Kinds = append(rep.Kinds, *kr)
	}
	return rep, nil
}

// databaseName is the database of a postgres:// URL ("" if none).
func databaseName(u string) string {
	parsed, err := url.Parse(u)
	if err != nil {
		return ""
	}
	return strings.TrimPrefix(parsed.Path, "/")
}

// sentTimes matches messages accepted with messages read, for the time
// from one to the other.
type sentTimes struct {
	mu    sync.Mutex
	at    map[string]time.Time // accepted, not read yet
	early map[string]bool      // read before the acceptance's answer came
}

func (s *sentTimes) accepted(id string, at time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.early[id] {
		delete(s.early, id)
		return
	}
	if s.at == nil {
		s.at = map[string]time.Time{}
	}
	s.at[id] = at
}

// delivered returns how long after its acceptance a message reached its
// reader: 0 when the reader was faster than the acceptance's answer.
func (s *sentTimes) delivered(id string, at time.Time) time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	if t, ok := s.at[id]; ok {
		delete(s.at, id)
		return max(at.Sub(t), 0)
	}
	if s.early == nil {
		s.early = map[string]bool{}
	}
	s.early[id] = true
	return 0
}

// acceptedTransport notes when the platform answered each message sent
// through it.
type acceptedTransport struct {
	base http.RoundTripper
	sent *sentTimes
}

func (t acceptedTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.base.RoundTrip(req)
	if err == nil && resp.StatusCode/100 == 2 {
		t.sent.accepted(req.Header.Get(messageHeader), time.Now())
	}
	return resp, err
}

// readers long-poll each conversation's events while the load runs.
type readers struct {
	wg     sync.WaitGroup
	mu     sync.Mutex
	report ReaderReport
	lat    vegeta.LatencyMetrics
	from   time.Time // what comes before is the warm-up's
}

func (e *env) startReaders(ctx context.Context, p *pools, measureFrom time.Time) *readers {
	rs := &readers{from: measureFrom}
	rs.report.Readers = len(p.convs)
	for _, c := range p.convs {
		rs.wg.Go(func() { rs.read(ctx, e, p, c) })
	}
	return rs
}

// read long-polls c's events from the end of what is there, counting the
// messages that arrive.
func (rs *readers) read(ctx context.Context, e *env, p *pools, c *conversation) {
	cursor := ""
	for ctx.Err() == nil {
		u := issuer + "/poppy/conversations/" + c.id + "/events?wait=20"
		if cursor != "" {
			u += "&cursor=" + cursor
		}
		var page struct {
			Events []struct {
				Type    string `json:"type"`
				Message struct {
					ID string `json:"id"`
				} `json:"message"`
			} `json:"events"`
			Cursor string `json:"cursor"`
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
		if err == nil {
			err = e.sendSigned(c.user, req, &page)
		}
		now := time.Now()
		rs.mu.Lock()
		switch {
		case ctx.Err() != nil:
		case now.Before(rs.from):
			for _, ev := range page.Events {
				p.sent.delivered(ev.Message.ID, now)
			}
			if page.Cursor != "" {
				cursor = page.Cursor
			}
		case err != nil:
			rs.report.Errors++
			rs.report.LastError = err.Error()
		default:
			rs.report.Polls++
			for _, ev := range page.Events {
				if ev.Type != "message" || ev.Message.ID == firstMessage {
					continue
				}
				rs.report.Messages++
				rs.lat.Add(p.sent.delivered(ev.Message.ID, now))
			}
			if page.Cursor != "" {
				cursor = page.Cursor
			}
		}
		rs.mu.Unlock()
		if err != nil && ctx.Err() == nil {
			time.Sleep(100 * time.Millisecond)
		}
	}
}

func (rs *readers) wait() ReaderReport {
	rs.wg.Wait()
	rs.mu.Lock()
	defer rs.mu.Unlock()
	rs.report.DeliveryP50 = rs.lat.Quantile(0.50)
	rs.report.DeliveryP99 = rs.lat.Quantile(0.99)
	return rs.report
}

// add counts one result of the kind in its figures when measured (after
// the warm-up); a refresh's new token, or the one it sent when it was
// refused unused, goes back to the pool either way.
// It reports whether it counted the result, whose Code it leaves 0 when
// the request failed.
func (kr *KindReport) add(r *vegeta.Result, p *pools, measured bool) bool {
	failure := ""
	if kr.Kind == Refresh {
		// Refused before it was used (over a rate, or shed): the token
		// still works, and a Personal Agent sends it again.
		if rt := p.sentRefresh(r); rt != "" && (r.Code == http.StatusTooManyRequests || r.Code == http.StatusServiceUnavailable) {
			p.refresh <- rt
		}
	}
	switch {
	case r.Code == 0 && strings.HasPrefix(r.Error, errNoChain):
		failure = "no_refresh_token"
	case r.Code == 0:
		failure = "transport"
	case r.Code/100 != 2:
		failure = strconv.Itoa(int(r.Code))
	case kr.Kind == MCP && mcpFailed(r.Body):
		failure = "tool_error"
	case kr.Kind == Refresh:
		if err := refreshed(p, r.Body); err != nil {
			failure = "no_tokens"
		}
	}
	if !measured {
		return false
	}
	if failure != "" {
		r.Code = 0 // vegeta's Success counts only the requests left as they are
		if kr.Errors == nil {
			kr.Errors = map[string]int{}
		}
		kr.Errors[failure]++
		if r.Error != "" && kr.LastError == "" {
			kr.LastError = r.Error
		}
	}
	kr.metrics.Add(r)
	return true
}
