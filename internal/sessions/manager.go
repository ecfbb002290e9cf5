package sessions

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/poppyhost/poppyhost/internal/botauth"
	"github.com/poppyhost/poppyhost/internal/httpx"
	"github.com/poppyhost/poppyhost/internal/tenant"
	"github.com/poppyhost/poppyhost/internal/tracing"
)

// Manager verifies the Session header of requests to a Company and finds or
// starts their Session (spec 5.3 steps 1-4, 5.5).
type Manager struct {
	verifier *Verifier
	store    *Store
	urls     tenant.URLs
	now      func() time.Time
	reg      prometheus.Registerer
	metrics  *metrics
}

// touchEvery is how stale last_seen_at may get before a request updates
// it, so that a busy Session is not written on every request; a shorter
// idle timeout updates it more often.
const touchEvery = time.Minute

// NewManager returns a Manager.
func NewManager(v *Verifier, store *Store, urls tenant.URLs, opts ...Option) *Manager {
	m := &Manager{verifier: v, store: store, urls: urls, now: v.opts.Now}
	for _, o := range opts {
		o(m)
	}
	m.metrics = newMetrics(m.reg)
	return m
}

// AccessToken returns the request's access token from the Authorization
// header (Bearer, or DPoP per RFC 9449), or "".
func AccessToken(r *http.Request) string {
	h := r.Header.Get("Authorization")
	scheme, tok, ok := strings.Cut(h, " ")
	if !ok || !(strings.EqualFold(scheme, "Bearer") || strings.EqualFold(scheme, "DPoP")) {
		return ""
	}
	return strings.TrimSpace(tok)
}

// Authenticate verifies r's Session header for Company c and returns its
// Session, without creating or continuing it: Continue does that once
// every check has passed (spec 5.3). Failures are invalid_session or
// session_ended *httpx.Errors.
func (m *Manager) Authenticate(ctx context.Context, r *http.Request, c *tenant.Company) (*Session, error) {
	ctx, span := tracing.Start(ctx, "session verify", trace.SpanKindInternal)
	sess, err := m.authenticate(ctx, r, c)
	if err != nil {
		m.metrics.refusal(err)
		if span.IsRecording() {
			// The error's text is for the caller; the span says only that
			// the Session was refused.
			span.SetStatus(codes.Error, "session refused")
		}
	}
	span.End()
	return sess, err
}

// authenticate is Authenticate within its span.
func (m *Manager) authenticate(ctx context.Context, r *http.Request, c *tenant.Company) (*Session, error) {
	if len(r.Header.Values(Header)) > 1 {
		return nil, fail("send one %s header", Header)
	}
	claims, err := m.verifier.Verify(ctx, r.Header.Get(Header), Request{
		Audience:    m.urls.Identifier(c),
		Method:      r.Method,
		URL:         &url.URL{Scheme: "https", Host: r.Host, Path: r.URL.Path, RawPath: r.URL.RawPath},
		AccessToken: AccessToken(r),
	})
	if err != nil {
		return nil, err
	}
	if !c.Settings.Agents.Accepts(claims.ClientID) {
		return nil, fail("this Company does not accept this Personal Agent")
	}
	now := m.now()
	jtiUntil := claims.IssuedAt.Add(m.verifier.Window())
	record := !deferred(ctx)
	sess, fresh, err := m.store.lookup(ctx, c.ID, claims, jtiUntil, record)
	if err != nil {
		return nil, err
	}
	if !fresh {
		m.metrics.replays.Inc()
		return nil, errReplayed()
	}
	if sess == nil {
		sess = &Session{CompanyID: c.ID, ClientID: claims.ClientID, SID: claims.SID, UserID: claims.UserID,
			AgentID: claims.AgentID, CreatedAt: now, LastSeenAt: now, New: true}
	} else if err := m.check(ctx, c, sess, claims, now); err != nil {
		if !record {
			// Refused, its jti is used all the same (DeferReplay).
			fresh, rerr := m.store.insertJTI(ctx, c.ID, claims.ClientID, claims.JTI, jtiUntil)
			if rerr != nil {
				return nil, rerr
			}
			if !fresh {
				m.metrics.replays.Inc()
				return nil, errReplayed()
			}
		}
		return nil, err
	}
	sess.Extensions = claims.Extensions
	sess.pending = &pending{m: m, company: c, claims: claims, now: now}
	if !record {
		sess.replay = &Replay{store: m.store, metrics: m.metrics, companyID: c.ID, clientID: claims.ClientID,
			jti: claims.JTI, until: jtiUntil}
	}
	return sess, nil
}

// check is what an existing Session must pass to go on.
func (m *Manager) check(ctx context.Context, c *tenant.Company, sess *Session, claims *Claims, now time.Time) error {
	if sess.UserID != claims.UserID || sess.AgentID != claims.AgentID {
		return fail("a Session's JWTs must all carry its User ID and Agent ID (spec 5.2)")
	}
	if sess.EndedAt != nil {
		return httpx.Errorf(httpx.CodeSessionEnded, "the Session has ended; start a new one with a new sid (spec 5.5)")
	}
	idle := time.Duration(c.Settings.Sessions.IdleTimeoutSeconds) * time.Second
	if !sess.New && idle > 0 && now.Sub(sess.LastSeenAt) > idle+staleFor(idle) {
		if err := m.store.End(ctx, c.ID, sess.ClientID, sess.SID, now); err != nil {
			return err
		}
		return httpx.Errorf(httpx.CodeSessionEnded, "the Session ended after %s unused; start a new one with a new sid (spec 5.5)", idle)
	}
	return nil
}

// staleFor is how far last_seen_at may trail the last use: a Session ends
// only when unused for idle even at the worst lag, never while in use;
// stale is short next to idle so that it ends soon after.
func staleFor(idle time.Duration) time.Duration {
	if idle > 0 {
		return min(touchEvery, idle/4)
	}
	return touchEvery
}

// pending is the write a verified request still owes its Session.
type pending struct {
	m       *Manager
	company *tenant.Company
	claims  *Claims
	now     time.Time
}

// Continue creates the request's Session on its first request, or records
// its use, once every check of spec 5.3 has passed: Require calls it for a
// request without an access token, bearer once the access token has passed
// its checks. It does nothing for a Session already continued, or none.
func Continue(ctx context.Context) error {
	sess := FromContext(ctx)
	if sess == nil || sess.pending == nil {
		return nil
	}
	p := sess.pending
	sess.pending = nil
	m, c := p.m, p.company
	if sess.New {
		created, err := m.store.create(ctx, c.ID, p.claims)
		if err != nil {
			m.metrics.refusal(err)
			return err
		}
		if !created.New {
			// A concurrent request started it first.
			if err := m.check(ctx, c, created, p.claims, p.now); err != nil {
				m.metrics.refusal(err)
				return err
			}
		} else {
			m.metrics.started.Inc()
		}
		// What this request alone says stays: its extensions, the
		// operator its signature named and its jti still to record.
		created.Extensions, created.Operator, created.replay = sess.Extensions, sess.Operator, sess.replay
		*sess = *created
		return nil
	}
	if p.now.Sub(sess.LastSeenAt) > staleFor(time.Duration(c.Settings.Sessions.IdleTimeoutSeconds)*time.Second) {
		return m.store.touch(ctx, c.ID, sess, p.now)
	}
	return nil
}

type ctxKey struct{}

// FromContext returns the verified Session of the request, or nil.
func FromContext(ctx context.Context) *Session {
	s, _ := ctx.Value(ctxKey{}).(*Session)
	return s
}

// Require is middleware for endpoints that use Session claims: it verifies
// the Session header of the request's Company, counts the request against
// the Personal Agent's and the Session's rate limits (spec 5.6), and puts
// the Session, with the operator a Web Bot Auth signature recognised
// (botauth.Recognize, earlier in the chain), in the context; or it answers
// with the error. A Company that requires signatures refuses a Session
// request without a verified one.
func (m *Manager) Require(limits *httpx.Limiter) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			c := tenant.FromContext(r.Context())
			op := botauth.FromContext(r.Context())
			if op == nil && c.Settings.Agents.RequireSignature {
				m.metrics.refused[reasonInvalid].Inc()
				httpx.WriteError(w, r, fail("this Company requires a valid Web Bot Auth signature on Session requests (spec 5.3)"))
				return
			}
			sess, err := m.Authenticate(r.Context(), r, c)
			if err != nil {
				httpx.WriteError(w, r, err)
				return
			}
			if op != nil {
				sess.Operator = op.Host
			}
			ctx := context.WithValue(r.Context(), ctxKey{}, sess)
			// An access token has checks of its own to pass first (spec
			// 5.3 step 3): bearer continues the Session after them.
			if AccessToken(r) == "" {
				if err := Continue(ctx); err != nil {
					// A refused request's jti is used, as Authenticate's
					// would be (DeferReplay).
					if serr := Settle(ctx); serr != nil {
						err = serr
					}
					httpx.WriteError(w, r, err)
					return
				}
			}
			company := strconv.FormatInt(c.ID, 10)
			if !limits.Allow(w, r, "agent "+company+" "+sess.ClientID, c.Settings.RateLimits.PerAgent) ||
				!limits.Allow(w, r, "session "+company+" "+sess.ClientID+" "+sess.SID, c.Settings.RateLimits.PerSession) {
				// The 429 is written; its jti is used all the same.
				_ = Settle(ctx)
				return
			}
			// A DeferReplay route records its jti and settles it before
			// answering; one that did not (it forgot, or panicked) has it
			// recorded here all the same, so that the JWT cannot be used
			// again. Settled, this reads nothing.
			defer func() { _ = Settle(ctx) }()
			next.ServeHTTP(w, r.WithContext(ctx))
		})
	}
}

// CompanyAPI mounts POST /sessions/end under /company/v1
// (httpx.CompanyAPIRoutes): the Company ends a Session, which then
// answers session_ended (spec 5.5).
func (m *Manager) CompanyAPI(r chi.Router) { r.Post("/sessions/end", m.serveEnd) }

// Admin mounts POST /sessions/end under /admin/v1/companies/{slug}
// (httpx.AdminRoutes), as CompanyAPI.
func (m *Manager) Admin(r chi.Router) { r.Post("/sessions/end", m.serveEnd) }

// serveEnd ends the Session the body names, of the Company in the context.
func (m *Manager) serveEnd(w http.ResponseWriter, r *http.Request) {
	var body struct {
		ClientID string `json:"client_id"`
		SID      string `json:"sid"`
	}
	if err := httpx.DecodeJSON(w, r, &body, httpx.DecodeOptions{Strict: true, MaxBytes: 8 << 10}); err != nil {
		httpx.WriteError(w, r, err)
		return
	}
	var f httpx.Fields
	if body.ClientID == "" {
		f.Add("client_id", "is required")
	}
	if !ValidID(body.SID) {
		f.Add("sid", "must be 1 to 256 URL-safe base64 characters")
	}
	if err := f.Err(); err != nil {
		httpx.WriteError(w, r, err)
		return
	}
	err := m.store.End(r.Context(), tenant.FromContext(r.Context()).ID, body.ClientID, body.SID, m.now())
	if errors.Is(err, ErrNotFound) {
		httpx.NotFound(w, r)
		return
	}
	if err != nil {
		httpx.WriteError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
