// Package dbmetrics builds Prometheus collectors whose values are read
// from the database at each scrape: facts the database holds for every
// replica, such as backlogs and the age of their oldest item.
package dbmetrics

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
)

// Timeout bounds the reading a scrape runs, so a slow database delays a
// scrape by at most this much and never holds a connection longer.
const Timeout = 2 * time.Second

// Emit adds one gauge value of desc, with its label values, to a scrape.
type Emit func(desc *prometheus.Desc, value float64, labels ...string)

// Read reads the values of one scrape and emits them.
type Read func(ctx context.Context, emit Emit) error

// New returns a collector that calls read at each scrape, within Timeout.
// When read fails, the scrape goes on without any of its values rather
// than with some of them. descs are every Desc read emits.
func New(read Read, descs ...*prometheus.Desc) prometheus.Collector {
	return &collector{read: read, descs: descs}
}

type collector struct {
	read  Read
	descs []*prometheus.Desc
}

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c.descs {
		ch <- d
	}
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), Timeout)
	defer cancel()
	var metrics []prometheus.Metric
	err := c.read(ctx, func(desc *prometheus.Desc, value float64, labels ...string) {
		metrics = append(metrics, prometheus.MustNewConstMetric(desc, prometheus.GaugeValue, value, labels...))
	})
	if err != nil {
		return
	}
	for _, m := range metrics {
		ch <- m
	}
}

// Age returns how long before now t was, or 0 when t is nil (nothing to
// age) or later than now.
func Age(now time.Time, t *time.Time) float64 {
	if t == nil {
		return 0
	}
	return max(now.Sub(*t).Seconds(), 0)
}

// Querier runs the query of a CountAndAge collector (a pgx pool).
type Querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// CountAndAge returns a collector of two gauges read by one query that
// returns a count and the oldest time among what it counted (NULL for
// none): count gets the count, age how long before now the oldest was
// (0 for none). It is the shape of every backlog gauge: how many wait,
// and since when.
func CountAndAge(db Querier, now func() time.Time, count, age *prometheus.Desc, query string, args ...any) prometheus.Collector {
	return New(func(ctx context.Context, emit Emit) error {
		at := now()
		var n int64
		var oldest *time.Time
		if err := db.QueryRow(ctx, query, args...).Scan(&n, &oldest); err != nil {
			return err
		}
		emit(count, float64(n))
		emit(age, Age(at, oldest))
		return nil
	}, count, age)
}
