package httpx

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"sync/atomic"
	"time"
)

// Defaults of BodyTimeouts.
const (
	DefaultBodyGrace   = 10 * time.Second
	DefaultBodyMinRate = 1 << 10 // bytes a second
)

// BodyTimeouts bound how long a request body may take to arrive, so that a
// client sending a byte a second cannot hold a connection, a handler and
// whatever the handler holds. A body has Grace, then must keep an average
// of MinRate bytes a second since the request began: by any moment t, at
// least (t - start - Grace) × MinRate bytes. The deadline moves on as bytes
// arrive, so a long upload at the minimum rate or better (a streaming
// upload through the gateway) is never cut, and a body of n bytes never
// takes longer than Grace + n/MinRate; with a route's body limit that is
// the route's longest wait.
type BodyTimeouts struct {
	// Grace is the time any body has before the rate counts; zero means
	// DefaultBodyGrace (10 s, as for request headers).
	Grace time.Duration
	// MinRate is the average rate in bytes a second a body must keep
	// after Grace; zero means DefaultBodyMinRate (1 KiB/s).
	MinRate int64
}

func (o BodyTimeouts) withDefaults() BodyTimeouts {
	if o.Grace <= 0 {
		o.Grace = DefaultBodyGrace
	}
	if o.MinRate <= 0 {
		o.MinRate = DefaultBodyMinRate
	}
	return o
}

type bodyKey struct{}

// bodyState is what PaceBodies learns about a request's body.
type bodyState struct{ timedOut atomic.Bool }

// BodyTimedOut reports whether r's body was cut off for arriving too
// slowly (PaceBodies).
func BodyTimedOut(r *http.Request) bool {
	st, ok := r.Context().Value(bodyKey{}).(*bodyState)
	return ok && st.timedOut.Load()
}

// PaceBodies returns middleware that holds every request body to opts,
// with read deadlines (http.ResponseController.SetReadDeadline) that move
// on as bytes arrive. A read past the deadline fails; WriteError then
// answers request_timeout (408). Requests without a body are untouched,
// so long-polls and event streams keep their connection as long as they
// need.
func PaceBodies(opts BodyTimeouts) func(http.Handler) http.Handler {
	opts = opts.withDefaults()
	// The deadline moves in steps of this much: for HTTP/2 each move is
	// a message to the connection's goroutine.
	slack := min(time.Second, opts.Grace/4)
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Body == nil || r.Body == http.NoBody || r.ContentLength == 0 {
				next.ServeHTTP(w, r)
				return
			}
			st := &bodyState{}
			b := &pacedBody{rc: r.Body, ctl: http.NewResponseController(w), opts: opts, slack: slack,
				start: time.Now(), state: st}
			b.set = b.start.Add(opts.Grace)
			if b.ctl.SetReadDeadline(b.set) != nil {
				// No deadlines here (not a net/http server): nothing to pace.
				next.ServeHTTP(w, r)
				return
			}
			r = r.WithContext(context.WithValue(r.Context(), bodyKey{}, st))
			r.Body = b
			next.ServeHTTP(w, r)
		})
	}
}

// pacedBody moves the read deadline on as its bytes arrive.
type pacedBody struct {
	rc    io.ReadCloser
	ctl   *http.ResponseController
	opts  BodyTimeouts
	slack time.Duration
	start time.Time
	state *bodyState

	n    int64
	set  time.Time // the deadline in force
	done bool
}

func (b *pacedBody) Read(p []byte) (int, error) {
	if b.done {
		return b.rc.Read(p)
	}
	due := b.start.Add(b.opts.Grace + time.Duration(float64(b.n)/float64(b.opts.MinRate)*float64(time.Second)))
	if due.After(b.set) {
		// Ahead by slack, so the deadline in force is never earlier
		// than due and moves at most once per slack of progress.
		b.set = due.Add(b.slack)
		_ = b.ctl.SetReadDeadline(b.set)
	}
	n, err := b.rc.Read(p)
	b.n += int64(n)
	switch {
	case errors.Is(err, io.EOF):
		// The whole body is in: lift the deadline, which would
		// otherwise also end net/http's watch for the client's
		// hang-up on HTTP/1 connections, and a long answer with it.
		b.done = true
		_ = b.ctl.SetReadDeadline(time.Time{})
	case errors.Is(err, os.ErrDeadlineExceeded):
		b.state.timedOut.Store(true)
	}
	return n, err
}

func (b *pacedBody) Close() error { return b.rc.Close() }

// BufferBody returns middleware that reads the whole request body, at most
// limit bytes, before next runs, so that next's side effects (a Session's
// first use, say) happen only for a body that arrived whole and in time.
// A longer body is refused with tooLarge (nil: request_too_large, 413);
// a slow one with request_timeout (408, PaceBodies).
func BufferBody(limit int64, tooLarge error) func(http.Handler) http.Handler {
	if tooLarge == nil {
		tooLarge = Errorf(CodeRequestTooLarge, "the body is larger than %d bytes", limit)
	}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Body == nil || r.Body == http.NoBody {
				next.ServeHTTP(w, r)
				return
			}
			if r.ContentLength > limit {
				WriteError(w, r, tooLarge)
				return
			}
			raw, err := io.ReadAll(io.LimitReader(r.Body, limit+1))
			switch {
			case err != nil:
				WriteError(w, r, &Error{Code: CodeInvalidRequest, Description: "the body could not be read", Cause: err})
				return
			case int64(len(raw)) > limit:
				WriteError(w, r, tooLarge)
				return
			}
			_ = r.Body.Close()
			r.Body = io.NopCloser(bytes.NewReader(raw))
			r.ContentLength = int64(len(raw))
			next.ServeHTTP(w, r)
		})
	}
}

// ReadAhead returns middleware that reads up to n bytes of the request
// body before next runs, so that next's side effects (a Session's first
// use, say) happen only once a small body has arrived whole, or a large
// one its first n bytes. A body too slow to get there is refused here
// (408, PaceBodies); next reads the same bytes, then the rest, as if
// nothing had been read, and judges the body itself.
func ReadAhead(n int64) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Body == nil || r.Body == http.NoBody || r.ContentLength == 0 {
				next.ServeHTTP(w, r)
				return
			}
			head, err := io.ReadAll(io.LimitReader(r.Body, n))
			if err != nil {
				WriteError(w, r, &Error{Code: CodeInvalidRequest, Description: "the body could not be read", Cause: err})
				return
			}
			r.Body = readAhead{io.MultiReader(bytes.NewReader(head), r.Body), r.Body}
			next.ServeHTTP(w, r)
		})
	}
}

// readAhead is a body whose start was read ahead.
type readAhead struct {
	io.Reader
	io.Closer
}
