package gateway_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/testkit"
	"github.com/poppyhost/poppyhost/internal/testkit/plancheck"
)

// TestGatewayRoundTrips: a gateway call in a known Session costs the
// platform only the Session's own statement, the jti insert and the
// Session lookup in one, a single round trip, signed out and signed in; a
// DPoP-bound token adds its proof's jti (a second round trip, the proof's
// own replay record). The Company, the access token and its
// revocation state come from this replica's caches, which notifications
// keep fresh (issue 19). The one write is to an unlogged table, so its
// commit writes no WAL to wait for: a transaction that wrote none is not
// flushed at commit.
func TestGatewayRoundTrips(t *testing.T) {
	t.Parallel()
	rec := &plancheck.Recorder{}
	g := newGatewayBench(t, testkit.Options{Tracer: rec})
	for name, c := range map[string]*benchCaller{"signed out": g.signedOut, "signed in": g.signedIn, "dpop": g.dpop} {
		// Twice: the first may still fill a cache this Session's start
		// left empty.
		for round := range 2 {
			req := g.request(t, c, g.sign(t, c))
			var status int
			var body string
			stmts := rec.Record(func() { status, body = benchSend(c.client, req) })
			require.Equal(t, http.StatusOK, status, "%s", body)
			if round == 0 {
				continue
			}
			var ours []string
			trips := map[int]bool{}
			for _, s := range stmts {
				// River's own polling shares the pool.
				if !strings.Contains(s.SQL, "river_") {
					ours = append(ours, s.String())
					trips[s.Trip] = true
				}
			}
			want := 1
			if c.proofKey != nil {
				want = 2
			}
			require.Len(t, ours, want, "%s: %q", name, ours)
			require.Len(t, trips, want, "%s: round trips of %q", name, ours)
			requireSessionStatement(t, ours[0], name)
			if c.proofKey != nil {
				require.True(t, strings.HasPrefix(ours[1], "INSERT INTO dpop_jtis"), "%s: %q", name, ours)
			}
		}
	}
	for _, table := range []string{"session_jtis", "dpop_jtis"} {
		var persistence string
		require.NoError(t, g.env.Pool.QueryRow(t.Context(),
			`SELECT relpersistence::text FROM pg_class WHERE oid = $1::regclass`, table).Scan(&persistence))
		require.Equal(t, "u", persistence, "%s is unlogged: its inserts write no WAL", table)
		// A foreign key would lock the referenced row on every insert, a
		// WAL-logged write (migration 00042).
		var keys []string
		rows, err := g.env.Pool.Query(t.Context(), `SELECT conname FROM pg_constraint
			WHERE conrelid = $1::regclass AND contype = 'f'`, table)
		require.NoError(t, err)
		keys, err = pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		require.Empty(t, keys, "%s has no foreign key", table)
	}
}

// requireSessionStatement checks that stmt is the Session check's one
// statement: the jti insert and the Session lookup.
func requireSessionStatement(t *testing.T, stmt, name string) {
	t.Helper()
	require.True(t, strings.HasPrefix(stmt, "WITH jti AS ( INSERT INTO session_jtis") &&
		strings.Contains(stmt, "LEFT JOIN sessions"), "%s: %q", name, stmt)
}

// TestApprovedRoundTrips: an approved call at an API costs what a plain
// call costs and the commits that performing at most once needs: the
// claim, made with the approval's checks in one statement (sent with its
// BEGIN), and the stored answer. No settle job is inserted: the settle
// sweep gives one to a claim whose lease lapsed (Engine.SettleDue). No
// statement reads the operation before the claim, and the API comes from
// the gateway's own cache (issue 19).
func TestApprovedRoundTrips(t *testing.T) {
	t.Parallel()
	rec := &plancheck.Recorder{}
	g := newGatewayBench(t, testkit.Options{Tracer: rec})
	o := newOpsBench(t, g)
	p := o.propose(t)
	req := o.request(t, o.exchanges, p.body, p.approval)
	var ok bool
	stmts := rec.Record(func() { ok = o.call(t, req) })
	require.True(t, ok)
	var ours []string
	for _, s := range stmts {
		// River's own polling shares the pool; an insert into river_job
		// would be ours.
		if !strings.Contains(s.SQL, "river_") || strings.Contains(s.SQL, "INSERT INTO river_job") {
			ours = append(ours, s.String())
		}
	}
	// The recorder sees statements (the claim has no BEGIN or COMMIT of
	// its own: it commits as it ends).
	require.Len(t, ours, 3, "%q", ours)
	requireSessionStatement(t, ours[0], "approved")
	// The request is the revision's byte for byte: the checks, check 3
	// among them, and the claim are one statement that commits on its own.
	require.True(t, strings.HasPrefix(ours[1], "WITH seen AS") && strings.Contains(ours[1], "UPDATE operations") &&
		strings.Contains(ours[1], "seen.request = $14"), "%q", ours)
	require.True(t, strings.HasPrefix(ours[2], "UPDATE operations SET status = 'performed'"), "%q", ours)
}
