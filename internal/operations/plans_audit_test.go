package operations_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/operations"
	"github.com/poppyhost/poppyhost/internal/testkit/plancheck"
	"github.com/poppyhost/poppyhost/internal/verified"
)

// TestAuditPlans: an audit's statements (the Company API's list with
// filters, the console's pages and export) read the Company's operations
// through operations_company_created, and an operation's revisions and
// approvals by their keys: never through an index that holds every
// Company's operations (operations_unsettled_since leads with status,
// operations_expires_at with the expiry) nor by a full scan, whether the
// tables are new, loaded but never analyzed, or analyzed. They are pages'
// statements, not a hot path's, so only custom plans are checked (see
// issuer.TestCompanyConnectionsPlans).
func TestAuditPlans(t *testing.T) {
	pool, conn, rec := plancheck.NewDatabase(t)
	ctx := context.Background()
	var companyID int64
	require.NoError(t, pool.QueryRow(ctx, `INSERT INTO companies (slug, settings) VALUES ('audit', '{}') RETURNING id`).
		Scan(&companyID))
	store := operations.NewStore(pool)
	owner := operations.Owner{ClientID: "https://agent.test/client", UserID: "usr_1"}
	now := time.Now()
	op, err := store.Propose(ctx, companyID, owner, operations.InterfaceAPI, "orders-api",
		&operations.Proposal{ActionKey: "a", Terms: json.RawMessage(`{"n": 1}`)},
		&operations.Request{Method: "POST", Path: "/a"}, "", now)
	require.NoError(t, err)
	a := &operations.Approval{OperationID: op.OperationID, Revision: op.Revision, Approver: operations.ApproverUser}
	_, err = store.Claim(ctx, companyID, a, &verified.Facts{}, time.Minute, now)
	require.NoError(t, err)

	stmts := rec.Record(func() {
		for _, f := range []operations.Filter{{}, {Status: operations.StatusUnknown}, {Status: operations.StatusPerforming,
			Interface: operations.InterfaceAPI, ClientID: owner.ClientID, Target: "orders-api",
			Since: now.Add(-time.Hour), Until: now.Add(time.Hour)}} {
			_, err := store.Search(ctx, companyID, f, "", 50)
			require.NoError(t, err)
			_, err = store.Search(ctx, companyID, f, op.OperationID, 50)
			require.NoError(t, err)
		}
		_, err := store.Approvals(ctx, companyID, op.OperationID)
		require.NoError(t, err)
	})
	require.Len(t, stmts, 7)
	allowed := map[string][]string{"operations": {"operations_company_created", "operations_pkey"},
		"operation_revisions": {"operation_revisions_pkey"}, "operation_approvals": {"operation_approvals_pkey"}}
	check := func(t *testing.T) { plancheck.OnlyIndexes(t, conn, stmts, allowed) }
	t.Run("new", check)
	// Another Company's many operations, a few of them unknown, each with
	// its revision and a recorded approval.
	_, err = conn.Exec(ctx, `WITH c AS (INSERT INTO companies (slug, settings) VALUES ('loaded', '{}') RETURNING id),
			o AS (INSERT INTO operations (company_id, id, client_id, user_id, interface, target, action_key, status,
					revision, performing_since, created_at, updated_at, expires_at)
				SELECT c.id, 'op_' || g, $1, 'usr', 'api', 'orders-api', 'k' || g,
					CASE WHEN g % 50 = 0 THEN 'unknown' ELSE 'performed' END, 'r' || g, now(), now(), now(),
					now() + interval '1 day'
				FROM c, generate_series(1, 20000) g RETURNING company_id, id, revision)
		INSERT INTO operation_revisions (company_id, operation_id, revision, terms, request, created_at, expires_at)
		SELECT company_id, id, revision, '{}', '{}', now(), now() + interval '1 day' FROM o`, owner.ClientID)
	require.NoError(t, err)
	_, err = conn.Exec(ctx, `INSERT INTO operation_approvals (company_id, operation_id, revision, approval, facts, recorded_at)
		SELECT company_id, id, revision, '{}', '{}', now() FROM operations WHERE id LIKE 'op\_%' AND id <> $1`,
		op.OperationID)
	require.NoError(t, err)
	t.Run("loaded", check)
	_, err = conn.Exec(ctx, "ANALYZE")
	require.NoError(t, err)
	t.Run("analyzed", check)
}
