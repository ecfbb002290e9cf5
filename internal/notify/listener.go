package notify

import (
	"context"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Listener delivers the notifications of the channels it was told to
// handle, over one connection it takes from the pool for good.
type Listener struct {
	pool   *pgxpool.Pool
	logger *slog.Logger

	mu        sync.Mutex
	handlers  map[string]func(payload string)
	onConnect []func()
	started   bool

	connected atomic.Bool
}

// New returns a Listener on pool; logger may be nil.
func New(pool *pgxpool.Pool, logger *slog.Logger) *Listener {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Listener{pool: pool, logger: logger, handlers: map[string]func(string){}}
}

// Handle has h called, one call at a time in the order they were sent,
// with the payload of every notification on channel. Register before
// Start; h must not block.
func (l *Listener) Handle(channel string, h func(payload string)) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.started {
		panic("notify: Handle after Start")
	}
	l.handlers[channel] = h
}

// OnConnect has f called after every connection and reconnection, once
// the channels are listened to: what was sent while the Listener was not
// listening is lost, and f makes up for it. Register before Start.
func (l *Listener) OnConnect(f func()) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.started {
		panic("notify: OnConnect after Start")
	}
	l.onConnect = append(l.onConnect, f)
}

// Connected reports whether the Listener is listening now, so a cache kept
// fresh by notifications can be trusted.
func (l *Listener) Connected() bool { return l.connected.Load() }

// Start runs the Listener in the background until stop is called; stop
// waits for its connection to close.
func (l *Listener) Start(ctx context.Context) (stop func()) {
	l.begin()
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		l.Run(ctx)
	}()
	return func() {
		cancel()
		<-done
	}
}

// Run listens until ctx ends, reconnecting after failures with a backoff
// from 100 ms to 5 s.
func (l *Listener) Run(ctx context.Context) {
	l.begin()
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		err := l.listen(ctx)
		l.connected.Store(false)
		if ctx.Err() != nil {
			return
		}
		l.logger.WarnContext(ctx, "the notification listener lost its connection; reconnecting", slog.Any("err", err))
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

// begin fixes the handlers: from now on Handle and OnConnect panic.
func (l *Listener) begin() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.started = true
}

func (l *Listener) listen(ctx context.Context) error {
	pooled, err := l.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	// The connection will LISTEN: it must never go back to the pool.
	conn := pooled.Hijack()
	defer conn.Close(context.WithoutCancel(ctx))
	if err := listen(ctx, conn, slices.Sorted(maps.Keys(l.handlers))); err != nil {
		return err
	}
	for _, f := range l.onConnect {
		f()
	}
	l.connected.Store(true)
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		if h := l.handlers[n.Channel]; h != nil {
			h(n.Payload)
		}
	}
}
