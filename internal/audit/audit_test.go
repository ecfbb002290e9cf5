package audit_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/audit"
	"github.com/poppyhost/poppyhost/internal/db"
	"github.com/poppyhost/poppyhost/internal/jobs"
	"github.com/poppyhost/poppyhost/internal/testkit/testdb"
)

var actor = audit.Actor{Kind: audit.KindAPIKey, ID: 7, Prefix: "phk_abcdefgh", Name: "deploy"}

// serve routes one request through Middleware to handle, as the
// authentication middleware would name the actor and the Company.
func serve(t *testing.T, pool *pgxpool.Pool, method string, handle http.HandlerFunc, exempt bool) *httptest.ResponseRecorder {
	t.Helper()
	r := chi.NewRouter()
	r.Use(audit.Middleware(pool), func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			audit.SetActor(r.Context(), actor)
			audit.SetCompany(r.Context(), 3, "acme")
			next.ServeHTTP(w, r)
		})
	})
	if exempt {
		r = r.With(audit.Exempt).(*chi.Mux)
	}
	r.MethodFunc(method, "/things/{name}", handle)
	rec := httptest.NewRecorder()
	r.ServeHTTP(rec, httptest.NewRequest(method, "/things/one", nil))
	return rec
}

func entries(t *testing.T, pool *pgxpool.Pool) []audit.Entry {
	t.Helper()
	out, err := audit.NewStore(pool, 0).List(context.Background(), 0, 0, 100)
	require.NoError(t, err)
	return out
}

func TestMiddleware(t *testing.T) {
	t.Parallel()
	pool := testdb.NewPool(t)
	ctx := context.Background()

	// A write the handler records in its transaction: one entry, with
	// the fields noted.
	rec := serve(t, pool, http.MethodPut, func(w http.ResponseWriter, r *http.Request) {
		audit.Note(r.Context(), "b", "a", "b")
		err := db.InTx(r.Context(), pool, func(tx pgx.Tx) error { return audit.Record(r.Context(), tx) })
		require.NoError(t, err)
		require.NoError(t, audit.Record(r.Context(), pool), "recording again does nothing")
		w.WriteHeader(http.StatusOK)
	}, false)
	require.Equal(t, http.StatusOK, rec.Code)
	got := entries(t, pool)
	require.Len(t, got, 1)
	require.Equal(t, "PUT /things/{name}", got[0].Action)
	require.Equal(t, "/things/one", got[0].Path)
	require.Equal(t, "acme", got[0].Company)
	require.Equal(t, actor, got[0].Actor)
	require.Equal(t, []string{"b", "a"}, got[0].Fields)

	// A write whose transaction rolled back leaves no entry, and neither
	// does the middleware when the handler then fails.
	serve(t, pool, http.MethodPost, func(w http.ResponseWriter, r *http.Request) {
		err := db.InTx(r.Context(), pool, func(tx pgx.Tx) error {
			require.NoError(t, audit.Record(r.Context(), tx))
			return errors.New("the change failed")
		})
		require.Error(t, err)
		w.WriteHeader(http.StatusConflict)
	}, false)
	// A failed write, an exempt write and a read leave none.
	serve(t, pool, http.MethodDelete, func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusBadRequest) }, false)
	serve(t, pool, http.MethodPost, func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusCreated) }, true)
	serve(t, pool, http.MethodGet, func(w http.ResponseWriter, r *http.Request) {
		require.NoError(t, audit.Record(r.Context(), pool))
		w.WriteHeader(http.StatusOK)
	}, false)
	require.Len(t, entries(t, pool), 1)

	// A successful write that did not record itself is recorded after it
	// answered, also when it wrote no status.
	serve(t, pool, http.MethodDelete, func(w http.ResponseWriter, r *http.Request) {}, false)
	serve(t, pool, http.MethodPost, func(w http.ResponseWriter, r *http.Request) {
		audit.Note(r.Context(), "name")
		w.WriteHeader(http.StatusNoContent)
	}, false)
	got = entries(t, pool)
	require.Len(t, got, 3)
	require.Equal(t, "POST /things/{name}", got[0].Action, "newest first")
	require.Equal(t, []string{"name"}, got[0].Fields)
	require.Equal(t, "DELETE /things/{name}", got[1].Action)
	require.Empty(t, got[1].Fields)

	// Outside an audited request, every hook does nothing.
	audit.SetActor(ctx, actor)
	audit.Note(ctx, "x")
	require.NoError(t, audit.Record(ctx, pool))
	require.Len(t, entries(t, pool), 3)
}

// TestStaffActor checks that a change a staff member makes in the console
// is recorded with the member as its actor: kind staff and the member's
// id, no prefix.
func TestStaffActor(t *testing.T) {
	t.Parallel()
	pool := testdb.NewPool(t)
	staff := audit.Actor{Kind: audit.KindStaff, ID: 42, Name: "Ada"}
	r := chi.NewRouter()
	r.Use(audit.Middleware(pool))
	r.Post("/console/{slug}/settings", func(w http.ResponseWriter, r *http.Request) {
		audit.SetActor(r.Context(), staff)
		audit.SetCompany(r.Context(), 3, "acme")
		audit.Note(r.Context(), "organization.name")
		w.WriteHeader(http.StatusOK)
	})
	rec := httptest.NewRecorder()
	r.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/console/acme/settings", nil))
	require.Equal(t, http.StatusOK, rec.Code)
	got := entries(t, pool)
	require.Len(t, got, 1)
	require.Equal(t, staff, got[0].Actor)
	require.Equal(t, "POST /console/{slug}/settings", got[0].Action)
	require.Equal(t, []string{"organization.name"}, got[0].Fields)
}

func TestSweep(t *testing.T) {
	t.Parallel()
	pool := testdb.NewPool(t)
	ctx := context.Background()
	now := time.Now()
	for _, age := range []time.Duration{48 * time.Hour, 25 * time.Hour, 23 * time.Hour, time.Hour} {
		_, err := pool.Exec(ctx, `INSERT INTO audit_log (at, company_id, actor_kind, actor_id, action, path)
			VALUES ($1, 1, 'operator_token', 1, 'PATCH /x', '/x')`, now.Add(-age))
		require.NoError(t, err)
	}
	store := audit.NewStore(pool, 24*time.Hour)
	sweeps := audit.Sweeps(store)
	require.Len(t, sweeps, 1)
	n, unfinished, err := jobs.RunSweep(ctx, sweeps[0], now)
	require.NoError(t, err)
	require.False(t, unfinished)
	require.EqualValues(t, 2, n)
	left, err := store.List(ctx, 1, 0, 10)
	require.NoError(t, err)
	require.Len(t, left, 2, "the entries within the retention are kept")
	for _, e := range left {
		require.True(t, e.At.After(now.Add(-24*time.Hour)))
	}
}

func TestChanged(t *testing.T) {
	t.Parallel()
	type inner struct {
		A int            `json:"a"`
		M map[string]int `json:"m"`
		L []string       `json:"l"`
	}
	type doc struct {
		Name  string `json:"name"`
		Inner inner  `json:"inner"`
	}
	before := doc{Name: "x", Inner: inner{A: 1, M: map[string]int{"k": 1, "gone": 2}, L: []string{"a"}}}
	after := doc{Name: "x", Inner: inner{A: 2, M: map[string]int{"k": 1, "new": 3}, L: []string{"a", "b"}}}
	got, err := audit.Changed(before, after)
	require.NoError(t, err)
	require.Equal(t, []string{"inner.a", "inner.l", "inner.m.gone", "inner.m.new"}, got)
	got, err = audit.Changed(before, before)
	require.NoError(t, err)
	require.Empty(t, got)
}
