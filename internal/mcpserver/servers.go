package mcpserver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/poppyhost/poppyhost/internal/httpx"
	"github.com/poppyhost/poppyhost/internal/registry"
	"github.com/poppyhost/poppyhost/internal/tenant"
)

// maxServers bounds the SDK servers kept, one per Company with tools.
const maxServers = 1000

// servers keeps each Company's SDK server, built once for its tool set
// (about 0.2 ms and 220 KB for three tools) instead of on every request.
// A server's tool handlers find the request they serve in the context
// (callKey), and its log goes to the request's logger.
type servers struct {
	mu sync.Mutex
	m  map[int64]builtServer
}

type builtServer struct {
	key    string // the tool set it was built for (toolSetKey)
	server *mcp.Server
}

// callKey carries a request's *toolCall to the tool handlers.
type callKey struct{}

// get returns the Company's server for tools, building it when the tool
// set changed since; warn reports a tool the SDK refuses.
func (s *servers) get(co *tenant.Company, tools []*registry.Tool, warn func(name string, err error)) *mcp.Server {
	key := toolSetKey(tools)
	s.mu.Lock()
	b, ok := s.m[co.ID]
	s.mu.Unlock()
	if ok && b.key == key {
		return b.server
	}
	server := mcp.NewServer(&mcp.Implementation{Name: co.Slug, Version: "poppyhost"}, &mcp.ServerOptions{
		Logger: slog.New(warnOnly{requestLog{}}),
		// Stateless, the server never notifies a client of changes, and
		// logs nothing to it.
		Capabilities: &mcp.ServerCapabilities{Tools: &mcp.ToolCapabilities{}},
	})
	for _, t := range tools {
		// Registration compiled the schema already; one that no longer
		// compiles (a stored row from before a rule) leaves the tool out.
		schema, err := registry.CompileSchema(t.InputSchema)
		if err == nil {
			err = addTool(server, t, toolHandler(t, schema))
		}
		if err != nil {
			warn(t.Name, err)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil || len(s.m) >= maxServers {
		s.m = map[int64]builtServer{}
	}
	s.m[co.ID] = builtServer{key: key, server: server}
	return server
}

// toolSetKey names a tool set: every tool's name and when it last changed.
func toolSetKey(tools []*registry.Tool) string {
	var b strings.Builder
	for _, t := range tools {
		b.WriteString(t.Name)
		b.WriteByte(' ')
		b.WriteString(strconv.FormatInt(t.UpdatedAt.UnixNano(), 10))
		b.WriteByte('\n')
	}
	return b.String()
}

// toolHandler calls t for the request in the context, once its arguments
// match t's input schema: arguments that do not are the MCP error for
// invalid params, and nothing reaches the origin.
func toolHandler(t *registry.Tool, schema *jsonschema.Schema) mcp.ToolHandler {
	return func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		c, _ := ctx.Value(callKey{}).(*toolCall)
		if c == nil {
			return toolError("the tool call lost its request; nothing was done"), nil
		}
		if msg := invalidArguments(schema, req.Params.Arguments); msg != "" {
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams,
				Message: "the arguments do not match the input schema of " + t.Name + ": " + msg}
		}
		return c.handler(t)(ctx, req)
	}
}

// invalidArguments says how a tool call's arguments (a JSON object; absent
// or null counts as {}) fail schema, or returns "". Arguments that are no
// object are left to the call, which refuses them as a tool error.
func invalidArguments(schema *jsonschema.Schema, raw json.RawMessage) string {
	args := bytes.TrimSpace(raw)
	if len(args) == 0 || string(args) == "null" {
		args = []byte("{}")
	}
	if args[0] != '{' {
		return ""
	}
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(args))
	if err != nil {
		return "they are not JSON"
	}
	err = schema.Validate(v)
	var ve *jsonschema.ValidationError
	if errors.As(err, &ve) {
		for len(ve.Causes) > 0 {
			ve = ve.Causes[0]
		}
		return ve.Error()
	}
	if err != nil {
		return err.Error()
	}
	return ""
}

// requestLog is a slog.Handler writing to the logger of the request in
// the context (httpx.Logger), with the attributes and groups the server's
// logger was given on top.
type requestLog struct {
	with []func(slog.Handler) slog.Handler
}

func (h requestLog) handler(ctx context.Context) slog.Handler {
	hd := httpx.Logger(ctx).Handler()
	for _, f := range h.with {
		hd = f(hd)
	}
	return hd
}

func (h requestLog) Enabled(ctx context.Context, l slog.Level) bool {
	return h.handler(ctx).Enabled(ctx, l)
}

func (h requestLog) Handle(ctx context.Context, r slog.Record) error {
	return h.handler(ctx).Handle(ctx, r)
}

func (h requestLog) WithAttrs(attrs []slog.Attr) slog.Handler {
	return requestLog{with: append(h.with[:len(h.with):len(h.with)], func(hd slog.Handler) slog.Handler { return hd.WithAttrs(attrs) })}
}

func (h requestLog) WithGroup(name string) slog.Handler {
	return requestLog{with: append(h.with[:len(h.with):len(h.with)], func(hd slog.Handler) slog.Handler { return hd.WithGroup(name) })}
}
