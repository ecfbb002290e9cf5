package mcpserver

// The hosted MCP server (spec 7, "MCP servers") is served with the MCP Go
// SDK's Streamable HTTP transport in stateless mode: every POST builds a
// server for the request's Company, Session and grant, answers it with
// application/json, and keeps nothing, so any replica serves any request
// and no Mcp-Session-Id is issued. The protocol versions are the SDK's
// (mcp.SupportedProtocolVersions):
//
//   - 2026-07-28, with per-request metadata (server/discover and the
//     protocol version in each request's _meta and MCP-Protocol-Version
//     header) instead of an initialize handshake;
//   - 2025-11-25, 2025-06-18, 2025-03-26 and 2024-11-05, with their
//     initialize lifecycle. Stateless, initialize is answered and each
//     later POST is served on its own, its version taken from its
//     MCP-Protocol-Version header (2025-03-26 when absent). GET (the
//     standalone SSE stream) and DELETE answer 405: the server sends no
//     notifications or requests of its own.
//
// Either way, every request carries the Poppy Session header, which the
// Session middleware verifies before the server sees it (spec 7: Poppy
// Sessions are independent of MCP's transport lifecycle).

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/go-chi/chi/v5"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/poppyhost/poppyhost/internal/bearer"
	"github.com/poppyhost/poppyhost/internal/httpx"
	"github.com/poppyhost/poppyhost/internal/operations"
	"github.com/poppyhost/poppyhost/internal/origin"
	"github.com/poppyhost/poppyhost/internal/registry"
	"github.com/poppyhost/poppyhost/internal/sessions"
	"github.com/poppyhost/poppyhost/internal/tenant"
	"github.com/poppyhost/poppyhost/internal/verified"
)

// Limits of the hosted MCP server.
const (
	// MaxMCPRequestBytes bounds a JSON-RPC request body, the SDK's default.
	MaxMCPRequestBytes = mcp.DefaultMaxRequestBodyBytes
	// maxToolErrorText is how much of a refusing origin's body a tool
	// error shows.
	maxToolErrorText = 4 << 10
)

// Options configure the hosted MCP server. Every field is required but
// Operations, Engine, Logger and Now.
type Options struct {
	// Store has the registered tools.
	Store  *registry.Store
	Tokens *bearer.Validator
	URLs   tenant.URLs
	// Origins calls the tools' URLs.
	Origins *origin.Caller
	// Session is the Session middleware (sessions.Manager.Require with the
	// rate limits), which a request with the Session header passes.
	Session func(http.Handler) http.Handler
	// Operations keeps the operations of Companies that turned the
	// extension on, and Engine performs them.
	Operations *operations.Store
	Engine     *operations.Engine
	Logger     *slog.Logger
	// Now is the clock [time.Now].
	Now func() time.Time
}

// Server is each Company's hosted MCP server at {issuer}/mcp.
type Server struct {
	opts    Options
	handler *mcp.StreamableHTTPHandler
	servers servers
}

// New returns the hosted MCP server.
func New(opts Options) *Server {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	m := &Server{opts: opts}
	m.handler = mcp.NewStreamableHTTPHandler(func(r *http.Request) *mcp.Server {
		s, _ := r.Context().Value(serverKey{}).(*mcp.Server)
		return s
	}, &mcp.StreamableHTTPOptions{
		Stateless:           true,
		JSONResponse:        true,
		Logger:              slog.New(warnOnly{opts.Logger.Handler()}),
		MaxRequestBodyBytes: MaxMCPRequestBytes,
		// The SDK refuses a request that reaches a loopback address with
		// another Host, against DNS rebinding of a local MCP server. Ours
		// is not local: the platform's host routing has already matched
		// the Host to the platform, TLS to its certificate, and every
		// request carries a signed Session header, while a TLS proxy in
		// front of us may well connect over loopback.
		DisableLocalhostProtection: true,
	})
	return m
}

// serverKey carries the request's *mcp.Server to the SDK's getServer.
type serverKey struct{}

// Public serves /mcp under /t/{slug}. A request with the Session header
// passes the Session middleware; one without is an MCP client that does
// not speak Poppy (spec 7, "Other MCP clients"): it needs an access token
// for the server, unless the Company serves such clients signed out
// (mcp.signed_out_clients), and its calls belong to no Session.
func (m *Server) Public(r chi.Router) {
	serve := http.HandlerFunc(m.serve)
	withSession := m.opts.Session(serve)
	r.Handle("/mcp", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, ok := r.Header[sessions.Header]; ok {
			withSession.ServeHTTP(w, r)
			return
		}
		serve.ServeHTTP(w, r)
	}))
}

// ServeMetadata serves the server's protected resource metadata (RFC 9728)
// at {PUBLIC_URL}/.well-known/oauth-protected-resource/t/{slug}/mcp.
func (m *Server) ServeMetadata(w http.ResponseWriter, r *http.Request) {
	co := tenant.FromContext(r.Context())
	tools := m.tools(w, r, co)
	if tools == nil {
		return
	}
	doc := struct {
		Resource               string   `json:"resource"`
		AuthorizationServers   []string `json:"authorization_servers,omitempty"`
		BearerMethodsSupported []string `json:"bearer_methods_supported"`
		ScopesSupported        []string `json:"scopes_supported,omitempty"`
	}{
		// spec 7: the resource equals the server's url in poppy.json.
		Resource:               m.opts.URLs.MCPResource(co),
		BearerMethodsSupported: []string{"header"},
	}
	// spec 7: a server that offers account access names the issuer.
	if iss := m.opts.URLs.Issuer(co); iss != "" {
		doc.AuthorizationServers = []string{iss}
	}
	for _, t := range tools {
		for _, s := range t.Scopes {
			if !slices.Contains(doc.ScopesSupported, s) {
				doc.ScopesSupported = append(doc.ScopesSupported, s)
			}
		}
	}
	slices.Sort(doc.ScopesSupported)
	w.Header().Set("Cache-Control", httpx.DiscoveryCacheControl)
	httpx.WriteJSON(w, http.StatusOK, doc)
}

// tools returns the Company's tools. Without any the server does not
// exist: it answers 404 (or the error) and returns nil.
func (m *Server) tools(w http.ResponseWriter, r *http.Request, co *tenant.Company) []*registry.Tool {
	tools, err := m.opts.Store.ListTools(r.Context(), co.ID)
	if err != nil {
		httpx.WriteError(w, r, err)
		return nil
	}
	if len(tools) == 0 {
		httpx.NotFound(w, r)
		return nil
	}
	return tools
}

// serve checks a request's access and the scopes of the tools it calls,
// then answers it with the Company's server for its tools (servers).
func (m *Server) serve(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	co := tenant.FromContext(ctx)
	sess := sessions.FromContext(ctx)
	tools := m.tools(w, r, co)
	if tools == nil {
		return
	}
	res := bearer.Resource{ID: m.opts.URLs.MCPResource(co), BearerOnly: co.Settings.MCP.BearerTokens}
	// A token must be one issued for this server (spec 7, 4.5): bearer
	// answers any other with invalid_token and our resource_metadata.
	grant, err := m.opts.Tokens.Authorize(ctx, r, res)
	if err != nil {
		bearer.WriteError(w, r, err)
		return
	}
	if grant == nil && !signedOutAllowed(co, sess) {
		// The challenge sends MCP clients to our metadata and from there to
		// the issuer (MCP authorization, RFC 9728 §5.1).
		bearer.WriteError(w, r, &bearer.Challenge{
			Description:      "this MCP server needs account access: sign in and send an access token issued for it",
			ResourceMetadata: m.opts.Tokens.MetadataURL(co, res), BearerOnly: res.BearerOnly})
		return
	}
	var (
		calls []calledTool
		batch bool
	)
	if r.Method == http.MethodPost {
		body, err := io.ReadAll(io.LimitReader(r.Body, MaxMCPRequestBytes+1))
		if err != nil {
			httpx.WriteError(w, r, httpx.Errorf(httpx.CodeInvalidRequest, "could not read the request body"))
			return
		}
		if int64(len(body)) > MaxMCPRequestBytes {
			httpx.WriteError(w, r, httpx.Errorf(httpx.CodeRequestTooLarge, "the body is larger than %d bytes", MaxMCPRequestBytes))
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		calls, batch = decodeCalls(body)
		if batch && co.Settings.Operations.Enabled && carriesApproval(calls) {
			// An approved call's answer may be 503 (extension 7), which
			// would stand for the whole batch and drop the results of calls
			// that ran: refused before anything runs.
			httpx.WriteError(w, r, httpx.Errorf(httpx.CodeInvalidRequest,
				"a tools/call that carries an approval is sent on its own, not in a JSON-RPC batch; nothing was run"))
			return
		}
		ch := scopeChallenge(tools, calls, grant)
		if ch == nil {
			if ch, err = m.accountChallenge(ctx, co, sess, grant, calls); err != nil {
				httpx.WriteError(w, r, err)
				return
			}
		}
		if ch != nil {
			ch.ResourceMetadata = m.opts.Tokens.MetadataURL(co, res)
			ch.BearerOnly = res.BearerOnly
			bearer.WriteError(w, r, ch)
			return
		}
	}
	call := &toolCall{m: m, co: co, sess: sess, grant: grant, facts: origin.Facts(sess, grant), log: httpx.Logger(ctx),
		batch: batch}
	call.declare(operations.Declared(sess, r.Header.Values(operations.ExtensionsHeader)) || carriesApproval(calls))
	server := m.servers.get(co, tools, func(name string, err error) {
		call.log.WarnContext(ctx, "mcp: skipping a tool the SDK refuses", slog.String("tool", name), slog.Any("err", err))
	})
	ctx = context.WithValue(context.WithValue(ctx, serverKey{}, server), callKey{}, call)
	m.handler.ServeHTTP(&performingWriter{ResponseWriter: w, r: r, call: call}, r.WithContext(ctx))
}

// signedOutAllowed reports whether a request with no access token may list
// the tools and call those that need no scope: with the Session header
// where the Company takes signed-out calls (mcp.signed_out, spec 7
// "Signed out"), without one where it serves clients that use no Session
// claims (mcp.signed_out_clients, spec 7 "Without Session verification").
// Either way the platform's per-address limit (tenant.LimitByAddress)
// has counted the request.
func signedOutAllowed(co *tenant.Company, sess *sessions.Session) bool {
	if sess != nil {
		return co.Settings.MCP.SignedOut
	}
	return co.Settings.MCP.SignedOutClients
}

// calledTool is a tools/call of a request: the tool's name and the
// approval in its _meta, as sent.
type calledTool struct {
	name     string
	approval json.RawMessage
}

// decodeCalls returns the tools/call requests of a JSON-RPC body (one
// message or a batch), and whether it is a batch. It reads the body as the SDK does (readBatch): its
// decoder matches keys case-sensitively, where encoding/json's structs
// would also take "Method" or "NAME" and see another call than the one
// the SDK serves. A body that does not parse calls none: the SDK answers
// it with a parse error.
func decodeCalls(body []byte) ([]calledTool, bool) {
	var raws []json.RawMessage
	batch := json.Unmarshal(body, &raws) == nil
	if !batch {
		raws = []json.RawMessage{body}
	}
	var calls []calledTool
	for _, raw := range raws {
		msg, err := jsonrpc.DecodeMessage(raw)
		req, ok := msg.(*jsonrpc.Request)
		if err != nil || !ok || req.Method != "tools/call" {
			continue
		}
		// Map keys are exact, and the last of duplicates wins, as in the
		// SDK's decoder.
		var params map[string]json.RawMessage
		var name string
		if json.Unmarshal(req.Params, &params) == nil && json.Unmarshal(params["name"], &name) == nil {
			var meta map[string]json.RawMessage
			_ = json.Unmarshal(params["_meta"], &meta)
			calls = append(calls, calledTool{name: name, approval: meta[operations.MetaApproval]})
		}
	}
	return calls, batch
}

// scopeChallenge returns the challenge for calls of tools whose scopes
// grant (nil signed out) lacks, or nil. Unknown names pass: the SDK
// answers them. Signed in, it is MCP's step-up: 403 insufficient_scope
// with the scopes the calls need.
func scopeChallenge(tools []*registry.Tool, called []calledTool, grant *bearer.Grant) *bearer.Challenge {
	var needed []string
	refused := false
	for _, call := range called {
		name := call.name
		i := slices.IndexFunc(tools, func(t *registry.Tool) bool { return t.Name == name })
		if i < 0 || len(tools[i].Scopes) == 0 {
			continue
		}
		if grant == nil || !grant.Has(tools[i].Scopes...) {
			refused = true
		}
		for _, s := range tools[i].Scopes {
			if !slices.Contains(needed, s) {
				needed = append(needed, s)
			}
		}
	}
	if !refused {
		return nil
	}
	if grant == nil {
		return &bearer.Challenge{Scopes: needed,
			Description: "this tool needs account access: sign in and send an access token issued for this MCP server"}
	}
	return &bearer.Challenge{Code: httpx.CodeInsufficientScope, Scopes: needed,
		Description: "the access token lacks scopes this tool needs"}
}

// addTool adds t to server. The SDK panics on a schema it refuses (an
// input schema without type object, bad x-mcp-header annotations); a
// Company's registration is data, so that becomes an error.
func addTool(server *mcp.Server, t *registry.Tool, h mcp.ToolHandler) (err error) {
	tool := &mcp.Tool{Name: t.Name, Title: t.Title, Description: t.Description,
		InputSchema: json.RawMessage(t.InputSchema)}
	if len(t.InputSchema) == 0 {
		return errors.New("no input schema")
	}
	if len(t.OutputSchema) > 0 && string(t.OutputSchema) != "null" {
		tool.OutputSchema = json.RawMessage(t.OutputSchema)
	}
	if len(t.Annotations) > 0 && string(t.Annotations) != "null" {
		tool.Annotations = new(mcp.ToolAnnotations)
		if err := json.Unmarshal(t.Annotations, tool.Annotations); err != nil {
			return fmt.Errorf("annotations: %w", err)
		}
	}
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("%v", p)
		}
	}()
	server.AddTool(tool, h)
	return nil
}

// toolCall performs tool calls for one request.
type toolCall struct {
	m     *Server
	co    *tenant.Company
	sess  *sessions.Session // nil for MCP clients that do not speak Poppy
	grant *bearer.Grant     // nil signed out
	facts *verified.Facts
	// declared: the request declares the Operations extension, by the
	// client metadata, Poppy-Extensions or an approval.
	declared bool
	// unavailable is set when a call's operation is being performed, or
	// its origin asked for it again later: the answer to a request of one
	// call is then 503 with Retry-After (performingWriter). retryAfter is
	// the origin's time, 0 while performing.
	unavailable atomic.Bool
	retryAfter  atomic.Int64
	// batch: the request is a JSON-RPC batch, whose calls are answered
	// each in its own result, never all with one 503.
	batch bool
	log   *slog.Logger
}

// handler returns the handler of tool t: a POST of the call's arguments
// to t.URL with Poppy-Verified, and the answer as the call's result.
// Failures of the origin are tool errors (isError), which the model sees,
// not protocol errors.
func (c *toolCall) handler(t *registry.Tool) mcp.ToolHandler {
	return func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		// serve has refused the call already; this keeps a body it read
		// otherwise than the SDK from reaching the origin.
		if len(t.Scopes) > 0 && (c.grant == nil || !c.grant.Has(t.Scopes...)) {
			return toolError("this tool needs the scopes " + strings.Join(t.Scopes, " ")), nil
		}
		args := bytes.TrimSpace(req.Params.Arguments)
		if len(args) == 0 || string(args) == "null" {
			args = []byte("{}")
		}
		if args[0] != '{' {
			return toolError("the arguments must be a JSON object"), nil
		}
		if err := toolRequest(args).Exact(); err != nil && c.operationsOn() {
			// Which of two values an approval covers would be a guess.
			return toolError("the arguments are ambiguous: " + err.Error() + "; nothing was done"), nil
		}
		approval, refused := c.approval(req.Params.Meta)
		if refused != nil {
			return refused, nil
		}
		avoid := ""
		if approval != nil {
			result, stale, err := c.performApproved(ctx, t, args, approval)
			if err != nil || result != nil {
				return result, err
			}
			if stale {
				avoid = approval.Revision
			}
		}
		ans, failed, err := c.callOrigin(ctx, t, args)
		if err != nil || failed != nil {
			return failed, err
		}
		if httpx.IsMediaType(ans.ContentType, operations.ProposalType) || httpx.IsMediaType(ans.ContentType, operations.DeclineType) {
			return c.proposed(ctx, t, args, ans, avoid), nil
		}
		return c.result(ctx, t, ans), nil
	}
}

// callOrigin POSTs a call's arguments to t.URL with Poppy-Verified and
// reads the answer; failed is the tool error when the origin did not
// answer usably.
func (c *toolCall) callOrigin(ctx context.Context, t *registry.Tool, args []byte) (*operations.Response, *mcp.CallToolResult, error) {
	ans, err := c.m.opts.Origins.CallTool(ctx, c.co, t, c.facts, args)
	if f := (*origin.Failure)(nil); errors.As(err, &f) {
		return nil, c.failed(ctx, t, f.Reason, f.Err), nil
	}
	if err != nil {
		return nil, nil, err
	}
	return ans, nil, nil
}

// result turns the origin's answer into the call's result.
func (c *toolCall) result(ctx context.Context, t *registry.Tool, resp *operations.Response) *mcp.CallToolResult {
	body := resp.Body
	media, _, _ := mime.ParseMediaType(resp.ContentType)
	isJSON := httpx.IsJSON(resp.ContentType)
	text := isJSON || strings.HasPrefix(media, "text/")
	if resp.Status < 200 || resp.Status > 299 {
		c.log.InfoContext(ctx, "mcp: tool origin refused the call", slog.String("tool", t.Name),
			slog.Int("status", resp.Status))
		msg := fmt.Sprintf("the Company's origin refused the call (HTTP %d)", resp.Status)
		if snippet := bytes.TrimSpace(body); text && len(snippet) > 0 {
			cut := len(snippet) > maxToolErrorText
			if cut {
				snippet = snippet[:maxToolErrorText]
			}
			msg += ": " + string(bytes.ToValidUTF8(snippet, []byte("\uFFFD")))
			if cut {
				msg += "…"
			}
		}
		return toolError(msg)
	}
	if isJSON && json.Valid(body) {
		result := &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: string(body)}}}
		if trimmed := bytes.TrimSpace(body); trimmed[0] == '{' {
			result.StructuredContent = json.RawMessage(trimmed)
		}
		return result
	}
	if len(body) == 0 {
		return &mcp.CallToolResult{Content: []mcp.Content{}}
	}
	if !utf8.Valid(body) {
		return toolError(fmt.Sprintf("the Company's origin answered with %q, which is neither JSON nor text", media))
	}
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: string(body)}}}
}

// failed logs a failed call, without its Poppy-Verified, and returns msg
// as a tool error.
func (c *toolCall) failed(ctx context.Context, t *registry.Tool, msg string, err error) *mcp.CallToolResult {
	c.log.WarnContext(ctx, "mcp: tool call failed", slog.String("tool", t.Name), slog.String("reason", msg), slog.Any("err", err))
	return toolError(msg)
}

func toolError(msg string) *mcp.CallToolResult {
	return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: msg}}}
}

// warnOnly keeps the SDK's per-request Info records (a server connects and
// ends on every request here) out of the log.
type warnOnly struct{ slog.Handler }

func (h warnOnly) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= slog.LevelWarn && h.Handler.Enabled(ctx, l)
}

func (h warnOnly) WithAttrs(attrs []slog.Attr) slog.Handler {
	return warnOnly{h.Handler.WithAttrs(attrs)}
}

func (h warnOnly) WithGroup(name string) slog.Handler { return warnOnly{h.Handler.WithGroup(name)} }
