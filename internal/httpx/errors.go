package httpx

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"

	"github.com/go-chi/chi/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Error codes. The protocol's own codes come first; the rest are ours, used
// on the admin and Company APIs and for routing failures.
const (
	CodeInvalidRequest    = "invalid_request"
	CodeInvalidSession    = "invalid_session"
	CodeSessionEnded      = "session_ended"
	CodeExtensionRequired = "extension_required"
	// CodeInvalidToken and CodeInsufficientScope are RFC 6750 §3.1's,
	// sent with a WWW-Authenticate challenge.
	CodeInvalidToken      = "invalid_token"
	CodeInsufficientScope = "insufficient_scope"
	CodeInvalidDPoPProof  = "invalid_dpop_proof"
	// CodeUseDPoPNonce asks for a proof with the server nonce of the
	// DPoP-Nonce header (RFC 9449 §9).
	CodeUseDPoPNonce     = "use_dpop_nonce"
	CodeUnauthorized     = "unauthorized"
	CodeForbidden        = "forbidden"
	CodeNotFound         = "not_found"
	CodeMethodNotAllowed = "method_not_allowed"
	CodeConflict         = "conflict"
	// CodePreconditionFailed: If-Match named a version of the resource
	// other than the current one (ETag, RFC 9110 13.1.1).
	CodePreconditionFailed = "precondition_failed"
	// CodePreconditionRequired: the server requires If-Match on this
	// write and the request had none (RFC 6585 3).
	CodePreconditionRequired = "precondition_required"
	CodeRequestTooLarge      = "request_too_large"
	CodeUnsupportedMediaType = "unsupported_media_type"
	CodeRateLimited          = "rate_limited"
	// CodeRequestTimeout: the request body did not arrive at the minimum
	// rate (BodyTimeouts).
	CodeRequestTimeout = "request_timeout"
	// CodeClientClosed labels a request whose client went away; the
	// client never sees it (StatusClientClosedRequest).
	CodeClientClosed = "client_closed_request"
	CodeInternal     = "internal_error"
	CodeUnavailable  = "unavailable"
	// CodeOriginUnreachable: a Company's origin or approval hook gave no
	// usable answer.
	CodeOriginUnreachable = "origin_unreachable"
	// The Operations extension's codes (extension 4, 6): approval_required
	// carries the operation to approve, approval_declined the declined
	// revision.
	CodeApprovalRequired = "approval_required"
	CodeApprovalDeclined = "approval_declined"

	// The conversation codes of spec 8.13.
	CodeConversationNotFound = "conversation_not_found"
	CodeConversationClosed   = "conversation_closed"
	// CodeDirectConversationOpen carries the open Direct Conversation's ID
	// as the extra member conversation_id.
	CodeDirectConversationOpen = "direct_conversation_open"
	CodeMessageIDConflict      = "message_id_conflict"
	CodeCursorExpired          = "cursor_expired"
)

// statusOf is the one table from error code to HTTP status.
var statusOf = map[string]int{
	CodeInvalidRequest:       http.StatusBadRequest,
	CodeInvalidSession:       http.StatusBadRequest,
	CodeSessionEnded:         http.StatusBadRequest,
	CodeExtensionRequired:    http.StatusForbidden,
	CodeInvalidToken:         http.StatusUnauthorized,
	CodeInsufficientScope:    http.StatusForbidden,
	CodeInvalidDPoPProof:     http.StatusUnauthorized,
	CodeUseDPoPNonce:         http.StatusUnauthorized,
	CodeUnauthorized:         http.StatusUnauthorized,
	CodeForbidden:            http.StatusForbidden,
	CodeNotFound:             http.StatusNotFound,
	CodeMethodNotAllowed:     http.StatusMethodNotAllowed,
	CodeConflict:             http.StatusConflict,
	CodePreconditionFailed:   http.StatusPreconditionFailed,
	CodePreconditionRequired: http.StatusPreconditionRequired,
	CodeRequestTooLarge:      http.StatusRequestEntityTooLarge,
	CodeUnsupportedMediaType: http.StatusUnsupportedMediaType,
	CodeRateLimited:          http.StatusTooManyRequests,
	CodeRequestTimeout:       http.StatusRequestTimeout,
	CodeClientClosed:         StatusClientClosedRequest,
	CodeInternal:             http.StatusInternalServerError,
	CodeUnavailable:          http.StatusServiceUnavailable,
	CodeOriginUnreachable:    http.StatusBadGateway,
	CodeApprovalRequired:     http.StatusForbidden,
	CodeApprovalDeclined:     http.StatusForbidden,

	CodeConversationNotFound:   http.StatusNotFound,
	CodeConversationClosed:     http.StatusConflict,
	CodeDirectConversationOpen: http.StatusConflict,
	CodeMessageIDConflict:      http.StatusConflict,
	CodeCursorExpired:          http.StatusGone,
}

// FieldError names one invalid field of a request body.
type FieldError struct {
	Field   string `json:"field"`
	Message string `json:"message"`
}

// Error is an error that knows the JSON body it becomes. Cause is logged,
// never sent.
type Error struct {
	Code        string
	Description string
	Fields      []FieldError

	// Extra holds the members some codes add to the body, such as
	// direct_conversation_open's conversation_id (spec 8.13). A name the
	// body already has (error, error_description, fields, request_id) is
	// ignored.
	Extra map[string]any
	Cause error
}

func (e *Error) Error() string {
	msg := e.Code
	if e.Description != "" {
		msg += ": " + e.Description
	}
	if e.Cause != nil {
		msg += ": " + e.Cause.Error()
	}
	return msg
}

func (e *Error) Unwrap() error { return e.Cause }

// Status is the HTTP status for the error's code.
func (e *Error) Status() int {
	if s, ok := statusOf[e.Code]; ok {
		return s
	}
	return http.StatusInternalServerError
}

// Errorf returns an *Error with code and a formatted description.
func Errorf(code, format string, args ...any) *Error {
	return &Error{Code: code, Description: fmt.Sprintf(format, args...)}
}

// Invalid returns an invalid_request error listing field errors; its
// description repeats the first so that a reader of the body alone sees it.
func Invalid(fields ...FieldError) *Error {
	e := &Error{Code: CodeInvalidRequest, Fields: fields}
	if len(fields) > 0 {
		e.Description = fields[0].Field + ": " + fields[0].Message
		if len(fields) > 1 {
			e.Description += fmt.Sprintf(" (and %d more)", len(fields)-1)
		}
	}
	return e
}

type errorBody struct {
	Error       string       `json:"error"`
	Description string       `json:"error_description,omitempty"`
	Fields      []FieldError `json:"fields,omitempty"`
	RequestID   string       `json:"request_id,omitempty"`
}

// WriteUnavailable answers 503 unavailable with Retry-After (seconds)
// and desc: a wait the server asks for (it is overloaded, an operation is
// being performed), not a failure, so, unlike WriteError's 5xx, it is not
// logged.
func WriteUnavailable(w http.ResponseWriter, r *http.Request, retryAfter, desc string) {
	w.Header().Set("Retry-After", retryAfter)
	WriteJSON(w, http.StatusServiceUnavailable, errorBody{Error: CodeUnavailable, Description: desc,
		RequestID: RequestID(r.Context())})
}

// WriteError writes err as the JSON error body. An error that is not an
// *Error becomes internal_error; its text is logged with the request ID and
// never sent. Whatever err is, a request whose client has gone gets
// client_closed_request (499) and one whose body came too slowly gets
// request_timeout (408): the failure is the client's, so it is logged at
// debug level only.
func WriteError(w http.ResponseWriter, r *http.Request, err error) {
	var e *Error
	switch {
	case BodyTimedOut(r):
		e = &Error{Code: CodeRequestTimeout, Description: "the request body arrived too slowly", Cause: err}
		// The rest of the body may still be on its way: the connection
		// cannot carry another request.
		w.Header().Set("Connection", "close")
	case ClientGone(r):
		e = &Error{Code: CodeClientClosed, Description: "the client closed the request", Cause: err}
	default:
		if e = AsError(err); e.Code == CodeUnavailable && databaseDown(err) {
			w.Header().Set("Retry-After", "5")
		}
	}
	status := e.Status()
	if status >= 500 {
		Logger(r.Context()).ErrorContext(r.Context(), "request failed", slog.String("code", e.Code), slog.Any("err", err))
	} else if e.Cause != nil {
		Logger(r.Context()).DebugContext(r.Context(), "request refused", slog.String("code", e.Code), slog.Any("err", e.Cause))
	}
	if status == http.StatusTooManyRequests && w.Header().Get("Retry-After") == "" {
		w.Header().Set("Retry-After", "1")
	}
	body := errorBody{Error: e.Code, Description: e.Description, Fields: e.Fields}
	if status >= 500 {
		body.RequestID = RequestID(r.Context())
	}
	if len(e.Extra) == 0 {
		WriteJSON(w, status, body)
		return
	}
	WriteJSON(w, status, withExtra(body, e.Extra))
}

// AsError returns err as the *Error WriteError answers it with: err
// itself when it is (or wraps) one; unavailable when PostgreSQL could not
// be reached or dropped the connection (a retry is worth it); else
// internal_error, err kept as the cause.
func AsError(err error) *Error {
	var e *Error
	switch {
	case errors.As(err, &e):
		return e
	case databaseDown(err):
		return &Error{Code: CodeUnavailable, Description: "temporarily unavailable; try again shortly", Cause: err}
	}
	return &Error{Code: CodeInternal, Description: "internal error", Cause: err}
}

// Body is the JSON body of e as WriteError writes it below status 500,
// for an answer that is not written to a ResponseWriter (an origin's
// response replaced, an MCP tool result).
func (e *Error) Body() json.RawMessage {
	return withExtra(errorBody{Error: e.Code, Description: e.Description, Fields: e.Fields}, e.Extra)
}

// withExtra returns body with extra's members after its own, as
// json.RawMessage so that the body's own members stay first.
func withExtra(body errorBody, extra map[string]any) json.RawMessage {
	own, _ := json.Marshal(body) // errorBody always marshals
	add := make(map[string]any, len(extra))
	for k, v := range extra {
		if !ownMembers[k] {
			add[k] = v
		}
	}
	more, err := json.Marshal(add)
	if err != nil || len(add) == 0 {
		// Only our own values reach here; a failure is a programming error.
		return own
	}
	return append(append(own[:len(own)-1], ','), more[1:]...)
}

// ownMembers are the JSON names of errorBody, which Extra cannot replace.
var ownMembers = map[string]bool{"error": true, "error_description": true, "fields": true, "request_id": true}

// databaseDown reports whether err comes from not reaching PostgreSQL (a
// connection it refused, for whatever reason),
// from PostgreSQL shutting down under us (SQLSTATE class 57P: a pooled
// connection it closed), or from a pooled connection that broke without a
// word (a network error or the stream ending mid-message: an immediate
// shutdown, a crash, a cut; and then "conn closed" for what was still to
// be sent on it), which is worth a retry rather than a 500.
// A network error of another connection that reaches here unclassified
// is as passing, so a 503 suits it too.
func databaseDown(err error) bool {
	var (
		ce *pgconn.ConnectError
		pe *pgconn.PgError
		ne *net.OpError
	)
	if errors.As(err, &ce) {
		// Whatever PostgreSQL said: shutting down, too many clients.
		return true
	}
	if errors.As(err, &pe) {
		return strings.HasPrefix(pe.Code, "57P")
	}
	return pgconn.Timeout(err) || errors.As(err, &ne) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, pgconn.ErrConnClosed)
}

// WriteJSON writes v as a JSON response with status.
func WriteJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		// Only our own types reach here; a failure is a programming error.
		http.Error(w, `{"error":"internal_error"}`, http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

// NotFound answers every unmatched route with a JSON 404 that reveals
// nothing about what exists.
func NotFound(w http.ResponseWriter, r *http.Request) {
	WriteError(w, r, Errorf(CodeNotFound, "no such resource"))
}

// MethodNotAllowed returns router's handler for a known path asked with an
// unsupported method, with the Allow header RFC 9110 §15.5.6 requires. chi
// leaves Allow to custom handlers, and its Match stops at mounted
// sub-routers, so the allowed methods come from a flat copy of router's
// routes, built on first use.
func MethodNotAllowed(router chi.Routes) http.HandlerFunc {
	flat := sync.OnceValue(func() *chi.Mux {
		m := chi.NewRouter()
		noop := func(http.ResponseWriter, *http.Request) {}
		_ = chi.Walk(router, func(method, route string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
			m.MethodFunc(method, route, noop)
			if trimmed := strings.TrimSuffix(route, "/"); trimmed != route && trimmed != "" {
				m.MethodFunc(method, trimmed, noop)
			}
			return nil
		})
		return m
	})
	return func(w http.ResponseWriter, r *http.Request) {
		var allowed []string
		for _, m := range []string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete} {
			if flat().Match(chi.NewRouteContext(), m, r.URL.Path) {
				allowed = append(allowed, m)
				if m == http.MethodGet {
					allowed = append(allowed, http.MethodHead)
				}
			}
		}
		w.Header().Set("Allow", strings.Join(allowed, ", "))
		WriteError(w, r, Errorf(CodeMethodNotAllowed, "method %s is not allowed here", r.Method))
	}
}
