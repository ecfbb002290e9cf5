// Package replicas counts the server replicas that share one database, so
// that a budget meant for all of them can be divided between them: each
// replica keeps a heartbeat row fresh, and counts the rows that are.
package replicas

import (
	"context"
	"crypto/rand"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
)

// Defaults of Options.
const (
	DefaultEvery = 5 * time.Second
	// DefaultStale is three beats: a replica is still counted after one
	// or two beats lost to a slow database.
	DefaultStale = 3 * DefaultEvery
)

// Options configure a Counter.
type Options struct {
	// Every is how often the replica's row is refreshed and the live
	// replicas counted [DefaultEvery].
	Every time.Duration
	// Stale is the age past which a row is not counted, and is deleted
	// [DefaultStale]; it should be a few times Every.
	Stale time.Duration
	// Logger gets the beats that fail; nil discards them.
	Logger *slog.Logger
	// Metrics, when set, gets poppyhost_replicas_live.
	Metrics prometheus.Registerer
}

// Counter keeps this replica's heartbeat and the number of live replicas.
type Counter struct {
	pool   *pgxpool.Pool
	id     string
	every  time.Duration
	stale  time.Duration
	logger *slog.Logger
	live   atomic.Int64
}

// New returns a Counter that counts only itself until it has beaten once
// (Start).
func New(pool *pgxpool.Pool, opts Options) (*Counter, error) {
	c := &Counter{pool: pool, id: rand.Text(), every: opts.Every, stale: opts.Stale, logger: opts.Logger}
	if c.every <= 0 {
		c.every = DefaultEvery
	}
	if c.stale <= 0 {
		c.stale = 3 * c.every
	}
	if c.logger == nil {
		c.logger = slog.New(slog.DiscardHandler)
	}
	c.live.Store(1)
	if opts.Metrics != nil {
		err := opts.Metrics.Register(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "poppyhost_replicas_live",
			Help: "Replicas whose heartbeat this one saw at its last beat; each rate limit is divided by it.",
		}, func() float64 { return float64(c.Live()) }))
		if err != nil {
			return nil, err
		}
	}
	return c, nil
}

// Live returns the replicas counted at the last beat that succeeded, this
// one included: at least 1.
func (c *Counter) Live() int { return int(c.live.Load()) }

// Start beats once, then every Every until stop is called; stop removes
// this replica's row, so the others stop counting it at their next beat.
// A replica that dies without stopping is dropped once its row is Stale.
func (c *Counter) Start(ctx context.Context) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	c.beat(ctx)
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(c.every)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				c.beat(ctx)
			}
		}
	})
	return func() {
		cancel()
		wg.Wait()
		dctx, done := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		defer done()
		if _, err := c.pool.Exec(dctx, `DELETE FROM replica_heartbeats WHERE id = $1`, c.id); err != nil {
			c.logger.Warn("replicas: removing this replica's heartbeat", slog.Any("err", err))
		}
	}
}

// beat refreshes this replica's row, deletes the stale ones and counts the
// others that are fresh, in one statement, on the database's clock. When it
// fails the last count stands.
func (c *Counter) beat(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, c.every)
	defer cancel()
	var others int64
	err := c.pool.QueryRow(ctx, `WITH beat AS (
			INSERT INTO replica_heartbeats (id, seen_at) VALUES ($1, now())
			ON CONFLICT (id) DO UPDATE SET seen_at = now()
		), gone AS (
			DELETE FROM replica_heartbeats WHERE seen_at < now() - make_interval(secs => $2)
		)
		SELECT count(*) FROM replica_heartbeats WHERE id <> $1 AND seen_at >= now() - make_interval(secs => $2)`,
		c.id, c.stale.Seconds()).Scan(&others)
	if err != nil {
		if !errors.Is(ctx.Err(), context.Canceled) {
			c.logger.Warn("replicas: heartbeat", slog.Any("err", err))
		}
		return
	}
	c.live.Store(others + 1)
}
