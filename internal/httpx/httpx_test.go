package httpx

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"

	"github.com/go-chi/chi/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
)

func decodeBody(t *testing.T, rec *httptest.ResponseRecorder) map[string]any {
	t.Helper()
	var m map[string]any
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &m), rec.Body.String())
	return m
}

func TestDecodeJSON(t *testing.T) {
	t.Parallel()
	type body struct {
		Name  string `json:"name"`
		Count int    `json:"count"`
		Inner struct {
			Flag bool `json:"flag"`
		} `json:"inner"`
		Raw json.RawMessage `json:"raw,omitempty"`
	}
	cases := []struct {
		name, ct, body string
		strict         bool
		max            int64
		code, field    string
		want           body // checked when Name or Count is set
	}{
		{name: "ok", body: `{"name":"a","count":2}`},
		{name: "unknown field lenient", body: `{"name":"a","extra":1}`},
		{name: "unknown field strict", body: `{"name":"a","extra":1}`, strict: true, code: CodeInvalidRequest, field: "extra"},
		{name: "wrong type", body: `{"count":"two"}`, code: CodeInvalidRequest, field: "count"},
		{name: "nested wrong type", body: `{"inner":{"flag":"yes"}}`, code: CodeInvalidRequest, field: "inner.flag"},
		{name: "malformed", body: `{"name":`, code: CodeInvalidRequest},
		{name: "syntax", body: `{"name" "a"}`, code: CodeInvalidRequest},
		{name: "empty", body: ``, code: CodeInvalidRequest},
		{name: "two values", body: `{} {}`, code: CodeInvalidRequest},
		{name: "trailing garbage", body: `{}x`, code: CodeInvalidRequest},
		{name: "too large", body: `{"name":"` + strings.Repeat("a", 100) + `"}`, max: 50, code: CodeRequestTooLarge},
		{name: "wrong media type", ct: "text/plain", body: `{}`, code: CodeUnsupportedMediaType},
		{name: "json suffix type", ct: "application/merge-patch+json", body: `{}`},
		// Exact reading (issue 25), lenient or strict.
		{name: "name in another case lenient is ignored", body: `{"NAME":"a"}`, want: body{Count: 7}},
		{name: "name in another case strict", body: `{"NAME":"a"}`, strict: true, code: CodeInvalidRequest, field: "NAME"},
		{name: "nested name in another case strict", body: `{"inner":{"Flag":true}}`, strict: true, code: CodeInvalidRequest, field: "inner.Flag"},
		{name: "name twice", body: `{"name":"a","name":"b"}`, code: CodeInvalidRequest, field: "name"},
		{name: "nested name twice", body: `{"inner":{"flag":true,"flag":false}}`, code: CodeInvalidRequest, field: "inner.flag"},
		{name: "unknown name twice lenient", body: `{"x":1,"x":2}`, code: CodeInvalidRequest, field: "x"},
		{name: "name twice inside a raw value", body: `{"raw":{"a":[{"b":1,"b":2}]}}`, code: CodeInvalidRequest, field: "raw.a[0].b"},
		{name: "invalid UTF-8", body: "{\"name\":\"a\xff\"}", code: CodeInvalidRequest, field: "name"},
		{name: "invalid UTF-8 inside a raw value", body: "{\"raw\":[\"\xed\xa0\x80\"]}", code: CodeInvalidRequest, field: "raw[0]"},
		{name: "lone surrogate", body: `{"name":"a\ud800"}`, code: CodeInvalidRequest, field: "name"},
		{name: "surrogate pair", body: `{"name":"\ud83d\ude00"}`, want: body{Name: "\U0001F600", Count: 7}},
		{name: "null keeps a value", body: `{"count":null}`, want: body{Count: 7}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := httptest.NewRequest(http.MethodPost, "/", strings.NewReader(tc.body))
			ct := tc.ct
			if ct == "" {
				ct = "application/json"
			}
			r.Header.Set("Content-Type", ct)
			dst := body{Count: 7}
			err := DecodeJSON(httptest.NewRecorder(), r, &dst, DecodeOptions{Strict: tc.strict, MaxBytes: tc.max})
			if tc.code == "" {
				require.NoError(t, err)
				if tc.want.Name != "" || tc.want.Count != 0 {
					require.Equal(t, tc.want, dst)
				}
				return
			}
			var e *Error
			require.ErrorAs(t, err, &e)
			require.Equal(t, tc.code, e.Code)
			if tc.field != "" {
				require.Len(t, e.Fields, 1)
				require.Equal(t, tc.field, e.Fields[0].Field)
			}
		})
	}
}

func TestWriteErrorHidesInternals(t *testing.T) {
	t.Parallel()
	var logs bytes.Buffer
	logger := slog.New(slog.NewJSONHandler(&logs, nil))
	h := Instrument(logger, NewMetrics(prometheus.NewRegistry()), http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		WriteError(w, r, errors.New("pq: relation secret_table does not exist"))
	}))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/x", nil))
	require.Equal(t, http.StatusInternalServerError, rec.Code)
	require.NotContains(t, rec.Body.String(), "secret_table")
	m := decodeBody(t, rec)
	require.Equal(t, CodeInternal, m["error"])
	require.Equal(t, rec.Header().Get("X-Request-ID"), m["request_id"])
	require.Contains(t, logs.String(), "secret_table", "the cause is logged")
	require.Contains(t, logs.String(), rec.Header().Get("X-Request-ID"))
}

// TestWriteUnavailableIsNoFailure: a wait the server asks for is 503
// unavailable with Retry-After and the request ID, and no error in the
// log, where WriteError logs every 5xx.
func TestWriteUnavailableIsNoFailure(t *testing.T) {
	t.Parallel()
	var logs bytes.Buffer
	logger := slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	h := Instrument(logger, NewMetrics(prometheus.NewRegistry()), http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		WriteUnavailable(w, r, "7", "wait a little")
	}))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/x", nil))
	require.Equal(t, http.StatusServiceUnavailable, rec.Code)
	require.Equal(t, "7", rec.Header().Get("Retry-After"))
	m := decodeBody(t, rec)
	require.Equal(t, CodeUnavailable, m["error"])
	require.Equal(t, "wait a little", m["error_description"])
	require.Equal(t, rec.Header().Get("X-Request-ID"), m["request_id"])
	require.NotContains(t, logs.String(), `"level":"ERROR"`)
}

func TestErrorStatuses(t *testing.T) {
	t.Parallel()
	for code, status := range statusOf {
		rec := httptest.NewRecorder()
		WriteError(rec, httptest.NewRequest(http.MethodGet, "/", nil), Errorf(code, "x"))
		require.Equal(t, status, rec.Code, code)
		require.Equal(t, "application/json", rec.Header().Get("Content-Type"))
		require.Equal(t, code, decodeBody(t, rec)["error"])
	}
	rec := httptest.NewRecorder()
	WriteError(rec, httptest.NewRequest(http.MethodGet, "/", nil), Errorf(CodeRateLimited, "slow down"))
	require.NotEmpty(t, rec.Header().Get("Retry-After"), "429 always carries Retry-After (spec 5.6)")
}

func TestErrorExtraMembers(t *testing.T) {
	t.Parallel()
	rec := httptest.NewRecorder()
	WriteError(rec, httptest.NewRequest(http.MethodGet, "/", nil), &Error{Code: CodeDirectConversationOpen, Description: "open",
		Extra: map[string]any{"conversation_id": "cnv_1", "error": "overridden"}})
	require.Equal(t, http.StatusConflict, rec.Code)
	require.JSONEq(t, `{"error":"direct_conversation_open","error_description":"open","conversation_id":"cnv_1"}`, rec.Body.String(),
		"the extra member joins the body; one named like the body's own is ignored")
}

func TestInvalidNamesFields(t *testing.T) {
	t.Parallel()
	e := Invalid(FieldError{"a.b", "is required"}, FieldError{"c", "is bad"})
	require.Equal(t, "a.b: is required (and 1 more)", e.Description)
	require.Equal(t, http.StatusBadRequest, e.Status())
}

func TestRequestID(t *testing.T) {
	t.Parallel()
	h := Instrument(slog.New(slog.DiscardHandler), NewMetrics(prometheus.NewRegistry()), http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte(RequestID(r.Context())))
	}))
	for _, tc := range []struct{ in, want string }{
		{"abc-123_x.y", "abc-123_x.y"},
		{"bad id\nwith newline", ""},
		{strings.Repeat("a", 65), ""},
		{"", ""},
	} {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.Header.Set("X-Request-ID", tc.in)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		id := rec.Header().Get("X-Request-ID")
		require.Equal(t, id, rec.Body.String())
		if tc.want != "" {
			require.Equal(t, tc.want, id)
		} else {
			require.NotEqual(t, tc.in, id)
			require.True(t, validRequestID(id))
		}
	}
}

func TestInstrumentRecoversAndLabelsRoutes(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	r := chi.NewRouter()
	r.Use(RecordRoute)
	r.Get("/items/{id}", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) })
	r.Get("/boom", func(w http.ResponseWriter, r *http.Request) { panic("kaboom") })
	h := Instrument(slog.New(slog.DiscardHandler), m, r)

	for _, p := range []string{"/items/secret-1", "/items/secret-2", "/boom", "/nowhere"} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, p, nil))
		if p == "/boom" {
			require.Equal(t, http.StatusInternalServerError, rec.Code)
			require.Equal(t, CodeInternal, decodeBody(t, rec)["error"])
		}
	}
	require.Equal(t, 2.0, testutil.ToFloat64(m.requests.WithLabelValues("/items/{id}", "GET", "204")))
	require.Equal(t, 1.0, testutil.ToFloat64(m.requests.WithLabelValues("/boom", "GET", "500")))
	out, err := testutil.CollectAndLint(m.requests)
	require.NoError(t, err)
	require.Empty(t, out)
	families, err := reg.Gather()
	require.NoError(t, err)
	for _, f := range families {
		for _, metric := range f.GetMetric() {
			for _, l := range metric.GetLabel() {
				require.NotContains(t, l.GetValue(), "secret", "raw paths never become labels")
			}
		}
	}
}

func TestProxies(t *testing.T) {
	t.Parallel()
	p := Proxies{Trusted: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}}
	var gotHost, gotAddr string
	h := p.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gotHost, gotAddr = r.Host, r.RemoteAddr
	}))
	req := func(remote string) *http.Request {
		r := httptest.NewRequest(http.MethodGet, "https://internal:8080/", nil)
		r.RemoteAddr = remote
		r.Header.Set("X-Forwarded-Host", "shop.example")
		r.Header.Set("X-Forwarded-For", "198.51.100.9, 203.0.113.5, 10.0.0.3")
		return r
	}
	h.ServeHTTP(httptest.NewRecorder(), req("10.1.1.1:5555"))
	require.Equal(t, "shop.example", gotHost)
	require.Equal(t, "203.0.113.5:0", gotAddr, "right-most untrusted hop")

	h.ServeHTTP(httptest.NewRecorder(), req("192.0.2.1:5555"))
	require.Equal(t, "internal:8080", gotHost, "forwarded headers from strangers are ignored")
	require.Equal(t, "192.0.2.1:5555", gotAddr)
}

func TestHostOnly(t *testing.T) {
	t.Parallel()
	require.Equal(t, "shop.example", HostOnly("Shop.Example:8443"))
	require.Equal(t, "shop.example", HostOnly("shop.example."))
	require.Equal(t, "::1", HostOnly("[::1]:443"))
}

func TestMethodNotAllowedSetsAllow(t *testing.T) {
	t.Parallel()
	r := chi.NewRouter()
	r.MethodNotAllowed(MethodNotAllowed(r))
	r.Route("/v1", func(r chi.Router) {
		r.Use(func(h http.Handler) http.Handler { return h })
		r.Post("/things", func(http.ResponseWriter, *http.Request) {})
		r.Route("/things/{id}", func(r chi.Router) {
			r.Get("/", func(http.ResponseWriter, *http.Request) {})
			r.Delete("/", func(http.ResponseWriter, *http.Request) {})
			r.Post("/parts", func(http.ResponseWriter, *http.Request) {})
		})
	})
	for path, allow := range map[string]string{
		"/v1/things/7":       "GET, HEAD, DELETE",
		"/v1/things/7/":      "GET, HEAD, DELETE",
		"/v1/things/7/parts": "POST",
	} {
		rec := httptest.NewRecorder()
		r.ServeHTTP(rec, httptest.NewRequest(http.MethodPut, path, nil))
		require.Equal(t, http.StatusMethodNotAllowed, rec.Code, path)
		require.Equal(t, allow, rec.Header().Get("Allow"), path)
		require.Equal(t, CodeMethodNotAllowed, decodeBody(t, rec)["error"])
	}
}

func TestDatabaseDownIsUnavailable(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close()) // nothing listens there now
	_, err = pgconn.Connect(context.Background(), "postgres://postgres@"+addr+"/x?connect_timeout=2")
	require.Error(t, err)

	rec := httptest.NewRecorder()
	WriteError(rec, httptest.NewRequest(http.MethodGet, "/", nil), fmt.Errorf("loading company: %w", err))
	require.Equal(t, http.StatusServiceUnavailable, rec.Code)
	require.NotEmpty(t, rec.Header().Get("Retry-After"))
	require.Equal(t, CodeUnavailable, decodeBody(t, rec)["error"])
	require.NotContains(t, rec.Body.String(), addr, "connection details are not sent")
}

func TestDatabaseShutdownIsUnavailable(t *testing.T) {
	t.Parallel()
	for code, want := range map[string]int{"57P01": 503, "57P03": 503, "23505": 500} {
		rec := httptest.NewRecorder()
		WriteError(rec, httptest.NewRequest(http.MethodGet, "/", nil), fmt.Errorf("query: %w", &pgconn.PgError{Code: code}))
		require.Equal(t, want, rec.Code, code)
	}
}
