package operations_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/operations"
	"github.com/poppyhost/poppyhost/internal/tenant"
	"github.com/poppyhost/poppyhost/internal/testkit/plancheck"
	"github.com/poppyhost/poppyhost/internal/testkit/testdb"
)

// sweepsOnly stand in for what the settle sweep never uses: the router,
// the origins and the Companies (the settle job uses them; the sweep only
// queues it). A call panics.
type sweepsOnly struct {
	operations.Router
	operations.Sender
}

func (sweepsOnly) GetByID(context.Context, int64) (*tenant.Company, error) {
	panic("not used by the sweep")
}

// settleEngine is an engine over r's store whose jobs go to r's database.
func settleEngine(t *testing.T, r *sweepRig) *operations.Engine {
	t.Helper()
	e, err := operations.NewEngine(operations.EngineOptions{Store: r.store, Router: sweepsOnly{}, Origins: sweepsOnly{},
		Jobs: testdb.Inserter(t, r.pool), Companies: sweepsOnly{}})
	require.NoError(t, err)
	return e
}

// settleJobs returns the claims of the settle jobs queued for op.
func settleJobs(t *testing.T, r *sweepRig, op string) []string {
	t.Helper()
	rows, err := r.pool.Query(context.Background(), `SELECT args FROM river_job
		WHERE kind = $1 AND args->>'operation_id' = $2 ORDER BY id`, operations.SettleArgs{}.Kind(), op)
	require.NoError(t, err)
	args, err := pgx.CollectRows(rows, pgx.RowTo[[]byte])
	require.NoError(t, err)
	var claims []string
	for _, raw := range args {
		var a operations.SettleArgs
		require.NoError(t, json.Unmarshal(raw, &a))
		require.Equal(t, r.companyID, a.CompanyID)
		claims = append(claims, a.Claim)
	}
	return claims
}

// settleDue runs the settle sweep at t0+at and returns how many jobs it
// queued.
func (r *sweepRig) settleDue(t *testing.T, e *operations.Engine, at time.Duration) int64 {
	t.Helper()
	n, err := e.SettleDue(context.Background(), r.t0.Add(at))
	require.NoError(t, err)
	return n
}

// TestSettleDue: a claim gets its settle job from the settle sweep once
// its send lease lapsed, never before, and once: a second run passes it
// by. A new claim of the same operation gets its own. A claim its request
// concluded gets none.
func TestSettleDue(t *testing.T) {
	t.Parallel()
	r := newSweepRig(t)
	e := settleEngine(t, r)
	op := r.propose(t, "exchange", 0, time.Hour)
	_, first := r.claim(t, op, 0) // lease: one minute
	require.Empty(t, settleJobs(t, r, op.OperationID), "no job with the claim")

	require.Zero(t, r.settleDue(t, e, 59*time.Second), "the lease holds")
	require.Equal(t, int64(1), r.settleDue(t, e, 61*time.Second))
	require.Equal(t, []string{first.ID}, settleJobs(t, r, op.OperationID))
	require.Zero(t, r.settleDue(t, e, 70*time.Second), "a claim with a job is passed by")
	require.Len(t, settleJobs(t, r, op.OperationID), 1)

	released, err := r.store.Release(context.Background(), r.companyID, op.OperationID, first.ID,
		operations.ReleaseRetry, nil, r.t0.Add(71*time.Second))
	require.NoError(t, err)
	require.True(t, released)
	_, second := r.claim(t, op, 72*time.Second)
	require.Zero(t, r.settleDue(t, e, 100*time.Second))
	require.Equal(t, int64(1), r.settleDue(t, e, 133*time.Second))
	require.Equal(t, []string{first.ID, second.ID}, settleJobs(t, r, op.OperationID), "the new claim has its own job")

	done := r.propose(t, "done", 0, time.Hour)
	_, c := r.claim(t, done, 0)
	ok, err := r.store.Performed(context.Background(), r.companyID, done.OperationID, c.ID,
		&operations.Response{Status: 201}, r.t0.Add(time.Second))
	require.NoError(t, err)
	require.True(t, ok)
	require.Zero(t, r.settleDue(t, e, 2*time.Minute))
	require.Empty(t, settleJobs(t, r, done.OperationID), "a concluded claim gets no job")
}

// TestSettleDueLeavesOldClaimsToRescue: the settle sweep reads only the
// claims whose lease lapsed in the last hour; one that lapsed before (the
// sweep did not run meanwhile) gets its job from the hourly Rescue, which
// does not give a second one to a claim that has one.
func TestSettleDueLeavesOldClaimsToRescue(t *testing.T) {
	t.Parallel()
	r := newSweepRig(t)
	e := settleEngine(t, r)
	op := r.propose(t, "old", 0, 3*time.Hour)
	_, c := r.claim(t, op, 0)
	require.Zero(t, r.settleDue(t, e, 2*time.Hour))
	require.NoError(t, e.Rescue(context.Background(), r.t0.Add(time.Hour)))
	require.Equal(t, []string{c.ID}, settleJobs(t, r, op.OperationID))
	require.NoError(t, e.Rescue(context.Background(), r.t0.Add(time.Hour)))
	require.Len(t, settleJobs(t, r, op.OperationID), 1, "one live job per claim")
}

// TestSettleDueSkipsLockedClaims: a claim whose row another transaction
// holds (its request storing the answer, say) is left for the next run,
// which gives it its job if it is still performing; the sweep does not
// wait for it.
func TestSettleDueSkipsLockedClaims(t *testing.T) {
	t.Parallel()
	r := newSweepRig(t)
	e := settleEngine(t, r)
	ctx := context.Background()
	op := r.propose(t, "locked", 0, time.Hour)
	_, c := r.claim(t, op, 0)

	tx, err := r.pool.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, `SELECT FROM operations WHERE company_id = $1 AND id = $2 FOR UPDATE`, r.companyID,
		op.OperationID)
	require.NoError(t, err)
	n, err := e.SettleDue(ctx, r.t0.Add(2*time.Minute))
	require.NoError(t, err)
	require.Zero(t, n, "a locked claim is skipped")
	require.NoError(t, tx.Rollback(ctx))

	require.Equal(t, int64(1), r.settleDue(t, e, 2*time.Minute))
	require.Equal(t, []string{c.ID}, settleJobs(t, r, op.OperationID))
}

// TestSettleDuePlans: the settle sweep, which runs every few seconds,
// reads the claims being performed through operations_unsettled (and the
// rows it marks by their key), never every operation, whether the table
// is loaded but never analyzed, or analyzed. A new table is left out: on
// one that holds a row or two, the planner may join the rows marked
// through operations_company_created (whose columns include the key's)
// as cheaply, and any plan reads them all at no cost; a plan the statement
// keeps is made again when autovacuum first analyzes the grown table.
func TestSettleDuePlans(t *testing.T) {
	pool, conn, rec := plancheck.NewDatabase(t)
	ctx := context.Background()
	r := &sweepRig{pool: pool, store: operations.NewStore(pool),
		owner: operations.Owner{ClientID: "https://agent.test/client", UserID: "usr_test"},
		t0:    time.Date(2026, 10, 8, 19, 0, 0, 0, time.UTC)}
	require.NoError(t, pool.QueryRow(ctx, `INSERT INTO companies (slug, settings) VALUES ('due', '{}') RETURNING id`).
		Scan(&r.companyID))
	e := settleEngine(t, r)
	r.claim(t, r.propose(t, "due", 0, time.Hour), 0)

	var ours []plancheck.Statement
	for _, s := range rec.Record(func() { r.settleDue(t, e, 2*time.Minute) }) {
		// River's own statements (its insert, its version check, its
		// notification of the queue) are not ours.
		if strings.Contains(s.SQL, "operations") {
			ours = append(ours, s)
		}
	}
	require.Len(t, ours, 1, "the sweep's one statement of the batch")
	allowed := map[string][]string{"operations": {"operations_unsettled", "operations_pkey"}}
	check := func(t *testing.T) { plancheck.OnlyIndexes(t, conn, ours, allowed) }
	_, err := conn.Exec(ctx, `INSERT INTO operations (company_id, id, client_id, user_id, interface, target, action_key,
			status, revision, performing_since, claim, lease_until, created_at, updated_at, expires_at)
		SELECT $1, 'op_' || g, 'c', 'usr', 'api', 'orders-api', 'k' || g,
			CASE WHEN g % 100 = 0 THEN 'performing' ELSE 'performed' END, 'r' || g, now(), 'clm_' || g,
			CASE WHEN g % 100 = 0 THEN now() END, now(), now(), now() + interval '1 day'
		FROM generate_series(1, 20000) g`, r.companyID)
	require.NoError(t, err)
	t.Run("loaded", check)
	_, err = conn.Exec(ctx, "ANALYZE")
	require.NoError(t, err)
	t.Run("analyzed", check)
}
