package agent

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
)

// mcpVersion is the MCP protocol version the agent speaks.
const mcpVersion = "2025-06-18"

// ToolResult is an MCP tools/call result.
type ToolResult struct {
	IsError           bool            `json:"isError"`
	Content           []ToolContent   `json:"content"`
	StructuredContent json.RawMessage `json:"structuredContent,omitempty"`
}

// ToolContent is one content block of a tool result.
type ToolContent struct {
	Type string `json:"type"`
	Text string `json:"text,omitempty"`
}

// Text joins the text content blocks.
func (r *ToolResult) Text() string {
	var parts []string
	for _, c := range r.Content {
		if c.Type == "text" {
			parts = append(parts, c.Text)
		}
	}
	return strings.Join(parts, "\n")
}

// RPCError is a JSON-RPC error, or an HTTP error of the MCP endpoint.
type RPCError struct {
	HTTPStatus int
	Code       int    `json:"code"`
	Message    string `json:"message"`
	Challenge  string
}

func (e *RPCError) Error() string {
	return fmt.Sprintf("mcp: http %d, rpc %d %s %s", e.HTTPStatus, e.Code, e.Message, e.Challenge)
}

var rpcIDs atomic.Int64

// mcpCall sends one JSON-RPC request to an MCP server (streamable HTTP)
// with the Session header and, signed in, a token whose resource is the
// server's URL (spec 7). It returns the result, or the HTTP answer's
// Retry-After for a 503.
func (s *Session) mcpCall(ctx context.Context, server, method string, params any, result any) (*Response, error) {
	id := rpcIDs.Add(1)
	body, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "method": method, "params": params})
	if err != nil {
		return nil, err
	}
	resp, err := s.Do(ctx, Request{
		Method: http.MethodPost, URL: server, Body: body, ContentType: "application/json",
		Header: http.Header{
			"Accept":               {"application/json, text/event-stream"},
			"Mcp-Protocol-Version": {mcpVersion},
		},
		Resource: server,
	})
	if err != nil {
		return nil, err
	}
	if resp.Status == http.StatusServiceUnavailable {
		return resp, nil
	}
	if resp.Status != http.StatusOK {
		e := &RPCError{HTTPStatus: resp.Status, Challenge: bearerError(resp.Header)}
		var env struct {
			Error *RPCError `json:"error"`
		}
		if json.Unmarshal(resp.Body, &env) == nil && env.Error != nil {
			e.Code, e.Message = env.Error.Code, env.Error.Message
		}
		return resp, e
	}
	raw := resp.Body
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		raw = sseResponse(resp.Body, id)
	}
	var env struct {
		Result json.RawMessage `json:"result"`
		Error  *RPCError       `json:"error"`
	}
	if err := json.Unmarshal(raw, &env); err != nil {
		return resp, fmt.Errorf("mcp: %w", err)
	}
	if env.Error != nil {
		env.Error.HTTPStatus = resp.Status
		return resp, env.Error
	}
	if result != nil {
		return resp, json.Unmarshal(env.Result, result)
	}
	return resp, nil
}

// sseResponse finds the JSON-RPC response with id in an SSE body.
func sseResponse(body []byte, id int64) []byte {
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(make([]byte, 64<<10), 8<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "data:") {
			continue
		}
		data := []byte(strings.TrimSpace(line[5:]))
		var m struct {
			ID json.RawMessage `json:"id"`
		}
		if json.Unmarshal(data, &m) == nil && string(m.ID) == fmt.Sprint(id) {
			return data
		}
	}
	return nil
}

// MCPInitialize opens MCP with the server (initialize, then initialized).
func (s *Session) MCPInitialize(ctx context.Context, server string) error {
	_, err := s.mcpCall(ctx, server, "initialize", map[string]any{
		"protocolVersion": mcpVersion,
		"capabilities":    map[string]any{},
		"clientInfo":      map[string]any{"name": s.agent.opts.Name, "version": "1"},
	}, nil)
	if err != nil {
		return err
	}
	body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "method": "notifications/initialized"})
	_, err = s.Do(ctx, Request{Method: http.MethodPost, URL: server, Body: body, ContentType: "application/json",
		Header:   http.Header{"Accept": {"application/json, text/event-stream"}, "Mcp-Protocol-Version": {mcpVersion}},
		Resource: server})
	return err
}

// CallTool calls an MCP tool (spec 7) and handles operations (extension
// 4, 6): an error result with structuredContent.operation is decided by
// approver and called again with the same arguments and the approval in
// _meta. A nil approver calls once.
func (s *Session) CallTool(ctx context.Context, server, tool string, args map[string]any, expected map[string]any, approver Approver) (*ToolResult, *OperationResult, error) {
	var last *ToolResult
	attempt := func(ctx context.Context, ap *Approval) (answer, error) {
		params := map[string]any{"name": tool, "arguments": args}
		if ap != nil {
			params["_meta"] = map[string]any{"personalagentprotocol.org/approval": ap}
		}
		var r ToolResult
		resp, err := s.mcpCall(ctx, server, "tools/call", params, &r)
		if err != nil {
			if resp == nil || resp.Status >= 500 {
				return failedAttempt(ap, err) // transport error or 5xx
			}
			return answer{}, err
		}
		if resp.Status == http.StatusServiceUnavailable {
			return answer{performing: max(retryAfter(resp.Header, 0), 100e6)}, nil
		}
		last = &r
		if !r.IsError || len(r.StructuredContent) == 0 {
			return answer{done: true}, nil
		}
		var sc struct {
			Error     string     `json:"error"`
			Operation *Operation `json:"operation"`
			Declined
		}
		if json.Unmarshal(r.StructuredContent, &sc) != nil {
			return answer{done: true}, nil
		}
		switch {
		case sc.Error == "approval_declined":
			d := sc.Declined
			return answer{declined: &d}, nil
		case sc.Operation != nil:
			return answer{op: sc.Operation}, nil
		}
		return answer{done: true}, nil
	}
	if approver == nil {
		_, err := attempt(ctx, nil)
		return last, &OperationResult{Attempts: 1}, err
	}
	res, err := s.approveLoop(ctx, "mcp", expected, approver, attempt)
	if last == nil && err == nil {
		err = errors.New("agent: no tool result")
	}
	return last, res, err
}
