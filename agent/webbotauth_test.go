package agent

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/botauth"
	"github.com/poppyhost/poppyhost/internal/safehttp"
)

// routesFetcher fetches from the agent's own routes, as the platform
// would over HTTPS.
type routesFetcher struct{ a *Agent }

func (f routesFetcher) Get(_ context.Context, req safehttp.Request) (*safehttp.Response, error) {
	u, err := url.Parse(req.URL)
	if err != nil || "https://"+u.Host != f.a.base {
		return nil, errors.New("not the agent's origin")
	}
	rec := httptest.NewRecorder()
	f.a.routes().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, u.Path, nil))
	if rec.Code != http.StatusOK {
		return nil, errors.New(rec.Result().Status)
	}
	return &safehttp.Response{URL: req.URL, Status: rec.Code, Header: rec.Header(), Body: rec.Body.Bytes()}, nil
}

// The agent signs its Session requests with Web Bot Auth (spec 5.3), and
// poppyhost's verifier recognises it as the operator, once per nonce.
func TestSignsWithWebBotAuth(t *testing.T) {
	t.Parallel()
	f := newFake(t, nil)
	v := botauth.NewVerifier(routesFetcher{f.agent}, botauth.Options{})
	var (
		mu     sync.Mutex
		ops    []*botauth.Operator
		errs   []error
		replay []error
	)
	f.mux.HandleFunc("POST /probe/{id}", func(w http.ResponseWriter, r *http.Request) {
		op, err := v.Verify(r.Context(), r)
		_, again := v.Verify(r.Context(), r)
		mu.Lock()
		ops, errs, replay = append(ops, op), append(errs, err), append(replay, again)
		mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	})
	c, err := f.agent.Discover(f.ctx, f.domain())
	require.NoError(t, err)
	s := c.NewSession()
	for _, p := range []string{"/probe/1", "/probe/a%2Fb"} {
		resp, err := s.Do(f.ctx, Request{Method: http.MethodPost, URL: f.url(p), JSON: map[string]any{}})
		require.NoError(t, err)
		require.Equal(t, http.StatusNoContent, resp.Status)
	}
	require.Len(t, ops, 2)
	for i := range ops {
		require.NoError(t, errs[i])
		require.NotNil(t, ops[i])
		require.Equal(t, strings.TrimPrefix(f.agent.base, "https://"), ops[i].Host)
		require.ErrorIs(t, replay[i], botauth.ErrInvalid, "a replayed nonce")
	}
}
