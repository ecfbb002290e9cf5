package operations_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/poppyhost/poppyhost/internal/operations"
	"github.com/poppyhost/poppyhost/internal/tenant"
	"github.com/poppyhost/poppyhost/internal/verified"
)

// The fakes the engine harness (harness_test.go) runs the engine with: a
// clock it moves, a signer whose JWTs carry their claims unsigned, a
// Router, the Company, and one http.RoundTripper that is both the
// Company's origin and its approval hook.

// fakeClock is EngineOptions.Now: time moves only when a schedule says.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = t
}

// fakeSigner "signs" a JWT with alg none: the origin reads the claims the
// engine put in Poppy-Verified from the payload. Verification is
// internal/verified's concern, not the engine's.
type fakeSigner struct{}

func (fakeSigner) Sign(_ context.Context, _ int64, typ string, payload []byte) (string, error) {
	h, _ := json.Marshal(map[string]string{"alg": "none", "typ": typ})
	return base64.RawURLEncoding.EncodeToString(h) + "." + base64.RawURLEncoding.EncodeToString(payload) + ".", nil
}

// fakeOrigins sends as origin.Caller does, with fakeSigner's JWTs over
// fakeNet.
type fakeOrigins struct{ w *world }

func (o fakeOrigins) Send(ctx context.Context, co *tenant.Company, claims verified.Claims, req *http.Request) (*http.Response, error) {
	claims.Issuer = "https://poppy.test/t/" + co.Slug
	jwt, err := verified.Sign(ctx, fakeSigner{}, co.ID, claims, o.w.clock.Now())
	if err != nil {
		return nil, err
	}
	req.Header.Set(verified.Header, jwt)
	return fakeNet{o.w}.RoundTrip(req)
}

// claimsOf reads the claims of a fakeSigner JWT.
func claimsOf(jwt string) (*verified.Claims, error) {
	parts := strings.Split(jwt, ".")
	if len(parts) != 3 {
		return nil, errors.New("not a JWT")
	}
	raw, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return nil, err
	}
	var c verified.Claims
	return &c, json.Unmarshal(raw, &c)
}

// Hosts of the fake network.
const (
	originHost = "origin.test"
	hookURL    = "https://hook.test/approve"
)

// fakeRouter routes every operation to originHost, with the schedule's
// send timeout; a target the schedule removed is ErrGone.
type fakeRouter struct{ w *world }

func (r fakeRouter) Route(ctx context.Context, _ *tenant.Company, _, target string,
	req *operations.Request) (*operations.Route, error) {
	s := r.w.cur.Load()
	s.mu.Lock()
	gone := s.gone[target]
	s.mu.Unlock()
	if gone {
		if c := callOf(ctx); c != nil {
			s.mu.Lock()
			c.gone = true
			s.mu.Unlock()
		}
		return nil, operations.ErrGone
	}
	return &operations.Route{Audience: "https://" + originHost, URL: &url.URL{Scheme: "https", Host: originHost,
		Path: req.Path}, API: target, Timeout: sendTimeout, MaxResponse: 1 << 20}, nil
}

func (fakeRouter) Allowed(context.Context, *tenant.Company, *operations.Request, *verified.Facts) error {
	return nil
}

// fakeCompanies finds the running schedule's Company.
type fakeCompanies struct{ w *world }

func (c fakeCompanies) GetByID(_ context.Context, id int64) (*tenant.Company, error) {
	co := c.w.cur.Load().co
	if co.ID != id {
		return nil, tenant.ErrNotFound
	}
	return co, nil
}

// fakeNet is EngineOptions.Transport: originHost is the Company's origin,
// hook.test its approval hook, both played by the running schedule. The
// call a request belongs to (a Perform or a settle run) comes in its
// context.
type fakeNet struct{ w *world }

func (n fakeNet) RoundTrip(req *http.Request) (*http.Response, error) {
	s := n.w.cur.Load()
	switch req.URL.Host {
	case originHost:
		return s.origin(req, callOf(req.Context()))
	case "hook.test":
		return s.approvalHook(req, callOf(req.Context()))
	}
	return nil, errors.New("fakeNet: no such host " + req.URL.Host)
}

type callKey struct{}

func callOf(ctx context.Context) *call {
	c, _ := ctx.Value(callKey{}).(*call)
	return c
}

// answer builds an HTTP answer.
func answer(req *http.Request, status int, contentType string, body []byte, header ...string) *http.Response {
	h := http.Header{}
	if contentType != "" {
		h.Set("Content-Type", contentType)
	}
	for i := 0; i+1 < len(header); i += 2 {
		h.Set(header[i], header[i+1])
	}
	return &http.Response{Status: http.StatusText(status), StatusCode: status, Proto: "HTTP/1.1", ProtoMajor: 1,
		ProtoMinor: 1, Header: h, Body: io.NopCloser(bytes.NewReader(body)), ContentLength: int64(len(body)),
		Request: req}
}

// errReset is a connection lost before the answer arrived.
var errReset = errors.New("read: connection reset by peer")
