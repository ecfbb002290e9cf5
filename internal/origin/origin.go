package origin

import (
	"context"
	"log"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/poppyhost/poppyhost/internal/bearer"
	"github.com/poppyhost/poppyhost/internal/httpx"
	"github.com/poppyhost/poppyhost/internal/safehttp"
	"github.com/poppyhost/poppyhost/internal/sessions"
	"github.com/poppyhost/poppyhost/internal/tenant"
	"github.com/poppyhost/poppyhost/internal/tracing"
	"github.com/poppyhost/poppyhost/internal/verified"
)

// Error codes of a call to an origin that failed, beside the protocol's.
const (
	CodeUnreachable = httpx.CodeOriginUnreachable
	CodeTimeout     = "origin_timeout"
	CodeTooLarge    = "origin_response_too_large"
)

// Options configure a Caller. Every field is required but Logger and Now.
type Options struct {
	// Keys sign Poppy-Verified; URLs name the Company's identifier in it.
	Keys verified.Signer
	URLs tenant.URLs
	// Origins reaches Company origins and tools: the platform's fetch
	// options (with AllowPrivate only in development and tests).
	Origins *safehttp.Client
	Logger  *slog.Logger
	// Metrics, when set, is where the calls' metrics are registered.
	Metrics prometheus.Registerer
	// Now is the clock [time.Now].
	Now func() time.Time
}

// Caller calls Companies' origins with Poppy-Verified.
type Caller struct {
	opts Options
	// api, web and send reach origins for API calls, website requests and
	// approved operations (and approval hooks), each counted as such.
	api, web, send http.RoundTripper
	errorLog       *log.Logger
	// tools performs tool calls: one POST each, whose redirect is the
	// origin's answer, not somewhere to send the arguments and
	// Poppy-Verified.
	tools *http.Client
}

// New returns a Caller.
func New(opts Options) *Caller {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	// A traced call's client span and traceparent (tracing.Transport).
	transport := tracing.Transport(opts.Origins.RoundTripper())
	m := newOriginMetrics(opts.Metrics)
	return &Caller{opts: opts, api: m.transport(transport, callAPI), web: m.transport(transport, callWeb),
		send:     m.transport(transport, callOperation),
		errorLog: slog.NewLogLogger(opts.Logger.Handler(), slog.LevelWarn),
		tools: &http.Client{Transport: m.transport(transport, callTool),
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

// Sign makes the Poppy-Verified of a call for co: claims, with the
// Company's identifier as iss, signed with its key now.
func (c *Caller) Sign(ctx context.Context, co *tenant.Company, claims verified.Claims) (string, error) {
	claims.Issuer = c.opts.URLs.Identifier(co)
	return verified.Sign(ctx, c.opts.Keys, co.ID, claims, c.opts.Now())
}

// Send sends req for co with the Poppy-Verified that claims make (Sign)
// and returns the answer unread: the operations engine's approved calls
// and approval-hook calls (operations.Sender). req's context bounds it.
func (c *Caller) Send(ctx context.Context, co *tenant.Company, claims verified.Claims, req *http.Request) (*http.Response, error) {
	jwt, err := c.Sign(ctx, co, claims)
	if err != nil {
		return nil, err
	}
	req.Header.Set(verified.Header, jwt)
	return c.send.RoundTrip(req)
}

// Facts returns the facts of a request: its Session and, signed in, the
// grant of its access token (nil signed out). A request of an MCP client
// that does not speak Poppy has a grant and no Session (spec 7).
func Facts(sess *sessions.Session, g *bearer.Grant) *verified.Facts {
	f := &verified.Facts{Scopes: []string{}}
	if sess != nil {
		f.ClientID, f.SID, f.UserID, f.AgentID, f.Extensions = sess.ClientID, sess.SID, sess.UserID, sess.AgentID, sess.Extensions
		f.AgentOperator = sess.Operator
	} else if g != nil {
		f.ClientID = g.ClientID
	}
	if g != nil {
		f.Account = strconv.FormatInt(g.AccountID, 10)
		f.Scopes = append(f.Scopes, g.Scopes...)
	}
	return f
}
