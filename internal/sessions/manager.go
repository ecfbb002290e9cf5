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

	"github.com/poppyhost/poppyhost/internal/botauth"
	"github.com/poppyhost/poppyhost/internal/httpx"
	"github.com/poppyhost/poppyhost/internal/tenant"
)

// Manager verifies the Session header of requests to a Company and finds or
// starts their Session (spec 5.3 steps 1-4, 5.5).
type Manager struct {
	verifier *Verifier
	store    *Store
	urls     tenant.URLs
	now      func() time.Time
}

// touchEvery is how stale last_seen_at may get before a request updates
// it, so that a busy Session is not written on every request; a shorter
// idle timeout updates it more often.
const touchEvery = time.Minute

// NewManager returns a Manager.
func NewManager(v *Verifier, store *Store, urls tenant.URLs) *Manager {
	return &Manager{verifier: v, store: store, urls: urls, now: v.opts.Now}
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

// tokenInURL reports whether the query carries a token or Session JWT;
// spec 5.6 forbids accepting them from a URL.
func tokenInURL(r *http.Request) bool {
	for k := range r.URL.Query() {
		switch strings.ToLower(k) {
		case "access_token", "poppy_session", "poppy-session", "session":
			return true
		}
	}
	return false
}

// Authenticate verifies r's Session header for Company c and returns its
// Session. Failures are invalid_session or session_ended *httpx.Errors.
func (m *Manager) Authenticate(ctx context.Context, r *http.Request, c *tenant.Company) (*Session, error) {
	if tokenInURL(r) {
		return nil, httpx.Errorf(httpx.CodeInvalidRequest, "tokens and Session JWTs are never accepted in a URL (spec 5.6)")
	}
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
	sess, fresh, err := m.store.lookup(ctx, c.ID, claims, claims.IssuedAt.Add(m.verifier.Window()))
	if err != nil {
		return nil, err
	}
	if !fresh {
		return nil, fail("the Session JWT's jti was already used; sign a new JWT for every request")
	}
	if sess == nil {
		if sess, err = m.store.create(ctx, c.ID, claims); err != nil {
			return nil, err
		}
	}
	if sess.UserID != claims.UserID || sess.AgentID != claims.AgentID {
		return nil, fail("a Session's JWTs must all carry its User ID and Agent ID (spec 5.2)")
	}
	if sess.EndedAt != nil {
		return nil, httpx.Errorf(httpx.CodeSessionEnded, "the Session has ended; start a new one with a new sid (spec 5.5)")
	}
	idle := time.Duration(c.Settings.Sessions.IdleTimeoutSeconds) * time.Second
	// last_seen_at trails the last use by up to stale, so a Session ends
	// only when unused for idle even at the worst lag, never while in use;
	// stale is short next to idle so that it ends soon after.
	stale := touchEvery
	if idle > 0 {
		stale = min(touchEvery, idle/4)
	}
	if !sess.New && idle > 0 && now.Sub(sess.LastSeenAt) > idle+stale {
		if err := m.store.End(ctx, c.ID, sess.ClientID, sess.SID, now); err != nil {
			return nil, err
		}
		return nil, httpx.Errorf(httpx.CodeSessionEnded, "the Session ended after %s unused; start a new one with a new sid (spec 5.5)", idle)
	}
	if !sess.New && now.Sub(sess.LastSeenAt) > stale {
		if err := m.store.touch(ctx, c.ID, sess, now); err != nil {
			return nil, err
		}
	}
	sess.Extensions = claims.Extensions
	return sess, nil
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
			company := strconv.FormatInt(c.ID, 10)
			if !limits.Allow(w, r, "agent "+company+" "+sess.ClientID, c.Settings.RateLimits.PerAgent) ||
				!limits.Allow(w, r, "session "+company+" "+sess.ClientID+" "+sess.SID, c.Settings.RateLimits.PerSession) {
				return
			}
			next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), ctxKey{}, sess)))
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
