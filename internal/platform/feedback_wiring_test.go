package platform_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/devca"
	"github.com/poppyhost/poppyhost/internal/platform"
	"github.com/poppyhost/poppyhost/internal/safehttp"
	"github.com/poppyhost/poppyhost/internal/tenant"
	"github.com/poppyhost/poppyhost/internal/testkit"
	"github.com/poppyhost/poppyhost/internal/testkit/peers"
	"github.com/poppyhost/poppyhost/internal/testkit/testdb"
)

// logBuffer collects the platform's log output.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// TestReportTextIsNotLogged runs the platform with every log level on
// (testkit.Setup logs warnings only, to t.Log, where a test cannot read
// them) and checks that no report's text reaches the log, whether the
// report is accepted, answered, refused or listed: reports are data
// (spec 9.3), and may hold what a Personal Agent should not have sent.
func TestReportTextIsNotLogged(t *testing.T) {
	t.Parallel()
	ca, err := devca.New()
	require.NoError(t, err)
	agent := peers.StartAgent(t, ca, peers.AgentOptions{})
	hosts := &peers.Hosts{}
	hosts.Add(agent.Host)
	logs := &logBuffer{}
	public := &url.URL{Scheme: "https", Host: testkit.PublicHost}
	pool := testdb.NewPool(t)
	p, err := platform.New(context.Background(), platform.Options{
		Pool:       pool,
		Sealer:     testdb.Sealer(pool),
		Logger:     slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		URLs:       tenant.URLs{Public: public},
		AdminToken: testkit.AdminToken,
		Fetch:      safehttp.Options{AllowPrivate: true, RootCAs: ca.Pool(), Resolver: hosts},
	})
	require.NoError(t, err)

	// do serves one request in process; the platform routes by Host.
	do := func(method, path string, body []byte, header ...string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(method, public.String()+path, bytes.NewReader(body))
		if body != nil {
			req.Header.Set("Content-Type", "application/json")
		}
		for i := 0; i+1 < len(header); i += 2 {
			req.Header.Set(header[i], header[i+1])
		}
		rec := httptest.NewRecorder()
		p.Handler().ServeHTTP(rec, req)
		return rec
	}
	admin := "Bearer " + testkit.AdminToken
	rec := do(http.MethodPost, "/admin/v1/companies", mustFeedbackJSON(t, feedbackCompany("shop")), "Authorization", admin)
	require.Equal(t, http.StatusCreated, rec.Code, "body: %s", rec.Body)
	rec = do(http.MethodPost, "/admin/v1/companies/shop/api-keys", []byte(`{"name":"log test"}`), "Authorization", admin)
	require.Equal(t, http.StatusCreated, rec.Code, "body: %s", rec.Body)
	var key struct{ Key string }
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &key))

	const secret = "SECRET-REPORT-TEXT"
	report := func(body []byte) *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodPost, public.String()+"/t/shop/poppy/feedback", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		agent.Sign(t, req, peers.SessionClaims{Aud: public.String() + "/t/shop"}, peers.SessionOptions{})
		rec := httptest.NewRecorder()
		p.Handler().ServeHTTP(rec, req)
		return rec
	}
	for _, tt := range []struct {
		body   string
		status int
	}{
		{`{"task":"Task ` + secret + `","description":"About ` + secret + `"}`, http.StatusAccepted},
		{`{"task":"Pay with a gift card","description":"About ` + secret + `"}`, http.StatusOK},
		{`{"task":"Task ` + secret + `","description":"` + strings.Repeat("a", 4001) + `"}`, http.StatusBadRequest},
		{`{"task":"Task ` + secret + `\u0000","description":"About ` + secret + `"}`, http.StatusBadRequest},
		{`{"task":5,"description":"About ` + secret + `"}`, http.StatusBadRequest},
		{`{"task":"Task ` + secret + `","description":"About ` + secret + `"`, http.StatusBadRequest},
		{`{"task":"Task ` + secret + `","description":"About ` + secret + `"} ` + secret, http.StatusBadRequest},
		{`{"task":"Task ` + secret + `","description":"About ` + secret + `","padding":"` + strings.Repeat("a", 16<<10) + `"}`, http.StatusBadRequest},
	} {
		rec := report([]byte(tt.body))
		require.Equal(t, tt.status, rec.Code, "body: %s", rec.Body)
	}
	rec = do(http.MethodGet, "/company/v1/feedback", nil, "Authorization", "Bearer "+key.Key)
	require.Equal(t, http.StatusOK, rec.Code)
	require.Contains(t, rec.Body.String(), secret, "the Company reads its reports")
	rec = do(http.MethodGet, "/admin/v1/companies/shop/feedback", nil, "Authorization", admin)
	require.Equal(t, http.StatusOK, rec.Code)
	require.Contains(t, rec.Body.String(), secret)

	out := logs.String()
	// The log is really observed: every request has its line.
	require.Equal(t, 12, strings.Count(out, `"msg":"request"`), "logs:\n%s", out)
	require.NotContains(t, out, secret, "logs:\n%s", out)
	require.NotContains(t, out, "About", "logs:\n%s", out)
}

// feedbackCompany is the admin API body of a Company with feedback on and
// an alternative for one task.
func feedbackCompany(slug string) map[string]any {
	return map[string]any{
		"slug":         slug,
		"organization": map[string]any{"name": slug, "domain": slug + ".example"},
		"feedback": map[string]any{"enabled": true, "alternatives": []any{map[string]any{
			"task": "Pay with a gift card", "alternative": map[string]any{"instructions": "Gift cards are applied at checkout."},
		}}},
	}
}

func mustFeedbackJSON(t *testing.T, v any) []byte {
	t.Helper()
	raw, err := json.Marshal(v)
	require.NoError(t, err)
	return raw
}

// TestFeedbackWiring: the feedback endpoint answers only while the
// Company's settings offer it: off, a report is a 404 before its Session
// or body is looked at, and nothing is stored; one Company turning it off
// leaves another's alone. On, it needs a Session (spec 5.3 step 3).
func TestFeedbackWiring(t *testing.T) {
	t.Parallel()
	env := testkit.Setup(t)
	env.CreateCompany(t, feedbackCompany("shop"))
	env.CreateCompany(t, feedbackCompany("mall"))
	agent := env.StartAgent(t, "")
	report := func(slug, body string, signed bool) *peers.Response {
		t.Helper()
		req := peers.NewRequest(t, http.MethodPost, env.PublicURL("/t/"+slug+"/poppy/feedback"), body)
		if signed {
			agent.Sign(t, req, peers.SessionClaims{Aud: env.PublicURL("/t/" + slug)}, peers.SessionOptions{})
		}
		return peers.Send(t, env.Client, req)
	}
	rows := func(slug string) int {
		t.Helper()
		var n int
		require.NoError(t, env.Pool.QueryRow(context.Background(),
			`SELECT count(*) FROM feedback f JOIN companies c ON c.id = f.company_id WHERE c.slug = $1`, slug).Scan(&n))
		return n
	}
	const valid = `{"task":"Pay with a gift card","description":"No interface applies one."}`
	patch := func(slug string, on bool) {
		t.Helper()
		resp := env.Admin(t, http.MethodPatch, "/admin/v1/companies/"+slug, map[string]any{"feedback": map[string]any{"enabled": on}})
		require.Equal(t, http.StatusOK, resp.Status, "body: %s", resp.Body)
	}

	patch("mall", false)
	for _, signed := range []bool{true, false} {
		for _, body := range []string{valid, `{`} {
			resp := report("mall", body, signed)
			require.Equal(t, http.StatusNotFound, resp.Status, "body: %s", resp.Body)
			require.Equal(t, "not_found", resp.JSON(t)["error"])
		}
	}
	require.Zero(t, rows("mall"))
	resp := report("shop", valid, true)
	require.Equal(t, http.StatusOK, resp.Status, "body: %s", resp.Body)
	require.Equal(t, 1, rows("shop"))
	resp = report("shop", valid, false)
	require.Equal(t, http.StatusBadRequest, resp.Status, "body: %s", resp.Body)
	require.Equal(t, "invalid_session", resp.JSON(t)["error"])

	patch("mall", true)
	resp = report("mall", valid, true)
	require.Equal(t, http.StatusOK, resp.Status, "body: %s", resp.Body)
	require.Equal(t, 1, rows("mall"))
}
