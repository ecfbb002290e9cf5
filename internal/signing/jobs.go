package signing

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
)

// maintainArgs is the periodic job that rotates current keys older than
// RotateAfter and deletes keys retired more than Retain ago.
type maintainArgs struct{}

// Kind names the job in River.
func (maintainArgs) Kind() string { return "signing_rotate_keys" }

// InsertOpts makes at most one run wait at a time.
func (maintainArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{UniqueOpts: river.UniqueOpts{ByArgs: true, ByPeriod: time.Hour}}
}

type maintainWorker struct {
	river.WorkerDefaults[maintainArgs]
	keys *Keys
}

func (w *maintainWorker) Work(ctx context.Context, _ *river.Job[maintainArgs]) error {
	return w.keys.maintain(ctx)
}

// AddJobs registers the package's worker and its hourly key rotation. The
// job also runs when a replica becomes River's leader, so that frequent
// leader changes cannot put it off for good.
func AddJobs(workers *river.Workers, k *Keys) []*river.PeriodicJob {
	river.AddWorker(workers, &maintainWorker{keys: k})
	return []*river.PeriodicJob{river.NewPeriodicJob(river.PeriodicInterval(time.Hour),
		func() (river.JobArgs, *river.InsertOpts) { return maintainArgs{}, nil },
		&river.PeriodicJobOpts{ID: maintainArgs{}.Kind(), RunOnStart: true})}
}

// maintain rotates every current key made RotateAfter ago or earlier, then
// deletes the keys retired Retain ago or earlier, which no longer verify.
// A Company that fails does not stop the others.
func (k *Keys) maintain(ctx context.Context) error {
	now := k.opts.Now()
	cutoff := now.Add(-k.opts.RotateAfter)
	rows, err := k.pool.Query(ctx, `SELECT company_id FROM signing_keys
		WHERE retired_at IS NULL AND created_at <= $1 ORDER BY company_id`, cutoff)
	if err != nil {
		return fmt.Errorf("signing: find old keys: %w", err)
	}
	companies, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return fmt.Errorf("signing: find old keys: %w", err)
	}
	var errs []error
	for _, id := range companies {
		if _, err := k.rotate(ctx, id, &cutoff); err != nil {
			errs = append(errs, err)
		}
	}
	if _, err := k.pool.Exec(ctx, `DELETE FROM signing_keys WHERE retired_at <= $1`, now.Add(-k.opts.Retain)); err != nil {
		errs = append(errs, fmt.Errorf("signing: delete retired keys: %w", err))
	}
	return errors.Join(errs...)
}
