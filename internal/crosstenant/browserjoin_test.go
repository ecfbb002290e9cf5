package crosstenant_test

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/go-chi/chi/v5"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/accounts"
	"github.com/poppyhost/poppyhost/internal/browserjoin"
	"github.com/poppyhost/poppyhost/internal/tenant"
)

func TestBrowserJoin(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	store := browserjoin.NewStore(w.pool)
	// No Session check: step 3 (submit), under test, needs none.
	h := browserjoin.New(browserjoin.Options{Store: store, Session: func(next http.Handler) http.Handler { return next }})
	accts := accounts.NewStore(w.pool)
	alice, err := accts.Create(w.ctx, w.a.ID, "alice", "alpha's password")
	require.NoError(t, err)
	const client, sid, token = "https://agent.test/client", "sid_a", "ws_token_a"
	w.session(t, w.a.ID, client, sid)
	w.webSession(t, w.a.ID, token, client, sid, alice.ID)

	// keptA checks, as A, that A's web session is active and acts for
	// alice.
	keptA := func(t *testing.T) {
		t.Helper()
		account, ended := w.webSessionAccount(t, w.a.ID, token)
		require.False(t, ended)
		require.Equal(t, alice.ID, account)
		ws, err := h.LookupToken(w.ctx, w.a, token)
		require.NoError(t, err)
		require.NotNil(t, ws)
		require.Equal(t, sid, ws.SID)
	}

	t.Run("browserjoin.Handler/LookupToken", func(t *testing.T) {
		ws, err := h.LookupToken(w.ctx, w.b, token)
		require.NoError(t, err)
		require.Nil(t, ws)
		keptA(t)
	})
	t.Run("browserjoin.Handler/End", func(t *testing.T) {
		ended, err := h.End(w.ctx, w.b, token)
		require.NoError(t, err)
		require.False(t, ended)
		keptA(t)
	})
	t.Run("browserjoin.Store/SignedOut", func(t *testing.T) {
		require.NoError(t, pgx.BeginFunc(w.ctx, w.pool, func(tx pgx.Tx) error {
			return store.SignedOut(w.ctx, tx, w.b.ID, alice.ID, client)
		}))
		keptA(t)
	})
	// Step 3 of a join (the store's submit, reached through its page):
	// B's domain router given A's authorized code and join cookie.
	t.Run("browserjoin.Store/submit", func(t *testing.T) {
		const code, browser = "bc_ABCdef123", "browser_a"
		domain := w.a.Settings.Organization.Domain
		w.joinCode(t, w.a.ID, code, domain, browser, client, sid)
		post := func(c *tenant.Company) *httptest.ResponseRecorder {
			r := chi.NewRouter()
			r.Use(func(next http.Handler) http.Handler {
				return http.HandlerFunc(func(rw http.ResponseWriter, req *http.Request) {
					next.ServeHTTP(rw, req.WithContext(tenant.WithCompany(req.Context(), c)))
				})
			})
			h.Domain(r)
			req := httptest.NewRequest(http.MethodPost, "https://"+domain+browserjoin.Path,
				strings.NewReader(url.Values{"code": {code}}.Encode()))
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			req.AddCookie(&http.Cookie{Name: tenant.JoinCookie, Value: browser})
			rec := httptest.NewRecorder()
			r.ServeHTTP(rec, req)
			return rec
		}
		require.Equal(t, http.StatusBadRequest, post(w.b).Code)
		require.False(t, w.joinCodeSubmitted(t, w.a.ID, code), "A's code is not used up by B")
		require.Equal(t, http.StatusSeeOther, post(w.a).Code, "A's code still joins A's browser")
		keptA(t)
	})
}
