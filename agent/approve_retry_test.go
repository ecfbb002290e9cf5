package agent

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/dunglas/httpsfv"
	"github.com/stretchr/testify/require"
)

// approvalRequired answers 403 approval_required with op.
func approvalRequired(w http.ResponseWriter, op string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusForbidden)
	_, _ = w.Write([]byte(`{"error":"approval_required","operation":` + op + `}`))
}

// countingUser approves as the User and counts the asks.
func countingUser(asks *[]*Ask) Approver {
	return AsUser(func(_ context.Context, ask *Ask) (bool, string, error) {
		*asks = append(*asks, ask)
		return true, "tap", nil
	})
}

func (f *fake) exchange(t *testing.T, approver Approver) (*OperationResult, error) {
	t.Helper()
	c, err := f.agent.Discover(f.ctx, f.domain())
	require.NoError(t, err)
	return c.NewSession().Call(f.ctx, Request{Method: http.MethodPost, URL: f.url("/api/exchanges"), JSON: jacket}, jacket, approver)
}

// A 5xx or a transport error to an approved request leaves its outcome
// unknown: the same approval is sent again, and only a 2xx ends it
// (extension 7).
func TestCallRetriesAFailedApprovedRequest(t *testing.T) {
	t.Parallel()
	for name, fail := range map[string]func(w http.ResponseWriter){
		"500":             func(w http.ResponseWriter) { w.WriteHeader(http.StatusInternalServerError) },
		"502":             func(w http.ResponseWriter) { w.WriteHeader(http.StatusBadGateway) },
		"503 no header":   func(w http.ResponseWriter) { w.WriteHeader(http.StatusServiceUnavailable) },
		"transport error": func(http.ResponseWriter) { panic(http.ErrAbortHandler) },
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			f := newFake(t, nil)
			var refs []any
			n := exchangeAPI(t, f, func(n int, d httpsfv.Dictionary, w http.ResponseWriter) {
				refs = append(refs, member(d, "reference"))
				if n <= 2 {
					fail(w)
					return
				}
				writeJSON(w, map[string]any{"exchange": "done"})
			})
			var asks []*Ask
			res, err := f.exchange(t, countingUser(&asks))
			require.NoError(t, err)
			require.Equal(t, http.StatusOK, res.Response.Status)
			require.Equal(t, int32(3), n.Load())
			require.Len(t, asks, 1, "the User is asked once")
			require.Equal(t, []any{refs[0], refs[0], refs[0]}, refs, "the same approval each time")
		})
	}
}

// A 4xx other than the extension's is an outcome: not sent again.
func TestCallDoesNotRetryA4xx(t *testing.T) {
	t.Parallel()
	f := newFake(t, nil)
	n := exchangeAPI(t, f, func(_ int, _ httpsfv.Dictionary, w http.ResponseWriter) {
		w.WriteHeader(http.StatusConflict)
	})
	var asks []*Ask
	res, err := f.exchange(t, countingUser(&asks))
	require.NoError(t, err)
	require.Equal(t, http.StatusConflict, res.Response.Status)
	require.Equal(t, int32(1), n.Load())
}

// After a 503, a retry answered with a new revision is not asked about
// nor approved: it may have been performed (extension 7).
func TestCallUncertainOutcomeStopsOnANewOperation(t *testing.T) {
	t.Parallel()
	for name, first := range map[string]func(w http.ResponseWriter){
		"performing": func(w http.ResponseWriter) {
			w.Header().Set("Retry-After", "0")
			w.WriteHeader(http.StatusServiceUnavailable)
		},
		"failed": func(w http.ResponseWriter) { w.WriteHeader(http.StatusBadGateway) },
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			f := newFake(t, nil)
			n := exchangeAPI(t, f, func(n int, _ httpsfv.Dictionary, w http.ResponseWriter) {
				if n == 1 {
					first(w)
					return
				}
				approvalRequired(w, strings.Replace(jacketOp, `"r1"`, `"r2"`, 1))
			})
			var asks []*Ask
			res, err := f.exchange(t, countingUser(&asks))
			require.ErrorIs(t, err, ErrUncertain)
			require.Len(t, asks, 1, "not asked about r2")
			require.Equal(t, int32(2), n.Load(), "r2 not approved")
			require.Equal(t, "r2", res.Operation.Revision)
		})
	}
}

// An instruction never covers a revision that answered an approval
// (extension 5): the agent approved r1, r2 is not approved on it.
func TestInstructionDoesNotCoverANewRevision(t *testing.T) {
	t.Parallel()
	f := newFake(t, nil)
	var revisions []any
	n := exchangeAPI(t, f, func(_ int, d httpsfv.Dictionary, w http.ResponseWriter) {
		revisions = append(revisions, member(d, "revision"))
		approvalRequired(w, strings.Replace(jacketOp, `"r1"`, `"r2"`, 1))
	})
	in := AsAgent(Instruction{Text: "approve exchanges under $100", Under: "100", Currency: "USD"})
	res, err := f.exchange(t, in)
	require.ErrorIs(t, err, ErrNotApproved)
	require.Equal(t, int32(1), n.Load())
	require.Equal(t, []any{"r1"}, revisions)
	require.Equal(t, "r2", res.Operation.Revision)

	// With Else, the User is asked about r2, told it is a new revision.
	f = newFake(t, nil)
	exchangeAPI(t, f, func(n int, _ httpsfv.Dictionary, w http.ResponseWriter) {
		if n == 1 {
			approvalRequired(w, strings.Replace(jacketOp, `"r1"`, `"r2"`, 1))
			return
		}
		writeJSON(w, map[string]any{})
	})
	var asks []*Ask
	in = AsAgent(Instruction{Under: "100", Currency: "USD", Else: countingUser(&asks)})
	_, err = f.exchange(t, in)
	require.NoError(t, err)
	require.Len(t, asks, 1)
	require.True(t, asks[0].NewRevision)
	require.Equal(t, "r2", asks[0].Operation.Revision)
}

// A Company that answers an approval with the very revision it approves
// is not asked about again: the agent stops.
func TestCallStopsWhenAnsweredWithTheSameRevision(t *testing.T) {
	t.Parallel()
	f := newFake(t, nil)
	n := exchangeAPI(t, f, func(_ int, _ httpsfv.Dictionary, w http.ResponseWriter) { approvalRequired(w, jacketOp) })
	var asks []*Ask
	_, err := f.exchange(t, countingUser(&asks))
	require.ErrorContains(t, err, "revision it names")
	require.Len(t, asks, 1)
	require.Equal(t, int32(1), n.Load())
}

// An operation past its expires_at is refused before the User is asked;
// approved_at comes from the agent's clock.
func TestExpiredOperationIsNotAsked(t *testing.T) {
	t.Parallel()
	f := newFake(t, nil)
	f.mux.HandleFunc("POST /api/exchanges", func(w http.ResponseWriter, r *http.Request) {
		approvalRequired(w, strings.Replace(jacketOp, "2099-01-01T00:00:00Z", "2020-01-01T00:00:00Z", 1))
	})
	var asks []*Ask
	_, err := f.exchange(t, countingUser(&asks))
	require.ErrorContains(t, err, "expired")
	require.Empty(t, asks)

	f = newFake(t, nil)
	at := time.Date(2098, 12, 31, 23, 59, 0, 0, time.UTC)
	f.agent.opts.Now = func() time.Time { return at }
	var approvedAt any
	exchangeAPI(t, f, func(_ int, d httpsfv.Dictionary, w http.ResponseWriter) {
		approvedAt = member(d, "approved_at")
		writeJSON(w, map[string]any{})
	})
	_, err = f.exchange(t, countingUser(&asks))
	require.NoError(t, err)
	require.Equal(t, at.Unix(), approvedAt)

	at = time.Date(2099, 1, 1, 0, 0, 1, 0, time.UTC) // the clock passed expires_at
	_, err = f.exchange(t, countingUser(&asks))
	require.ErrorContains(t, err, "expired")
	require.False(t, errors.Is(err, ErrNotApproved))
}
