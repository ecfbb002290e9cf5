package conversations

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"reflect"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/poppyhost/poppyhost/internal/httpx"
	"github.com/poppyhost/poppyhost/internal/operations"
	"github.com/poppyhost/poppyhost/internal/safehttp"
	"github.com/poppyhost/poppyhost/internal/tenant"
)

// Limits of a proposal's perform request.
const (
	maxPerformPath  = 2048
	maxPerformQuery = 2048
)

// performMethods are the methods a perform request may use.
var performMethods = map[string]bool{http.MethodPost: true, http.MethodPut: true, http.MethodPatch: true,
	http.MethodDelete: true, http.MethodGet: true}

// companyOps is the operations content of a Company message, as the
// Company API received it: a proposal with the request that performs it,
// or a declined notice (extension 6) to pass on.
type companyOps struct {
	proposal *operations.Proposal
	request  *operations.Request
	declined json.RawMessage
	// explicitID: the Company chose the message ID, so a retry may repeat
	// it.
	explicitID bool
}

// present reports whether a member was sent, and not as null.
func present(raw json.RawMessage) bool {
	return len(raw) > 0 && !bytes.Equal(bytes.TrimSpace(raw), []byte("null"))
}

// takeCompanyOps removes extensions.operations from a Company message m
// and checks it: a proposal or a declined notice, and only when the
// Company has operations on. Malformed content is invalid_request.
func takeCompanyOps(ctx context.Context, co *tenant.Company, m *Message, explicitID bool, w *Operations) (*companyOps, error) {
	raw, ok := m.Extensions[operations.Name]
	if !ok {
		return nil, nil
	}
	delete(m.Extensions, operations.Name)
	if len(m.Extensions) == 0 {
		m.Extensions = nil
	}
	if w == nil || !co.Settings.Operations.Enabled {
		return nil, invalid("message.extensions.operations: the Company does not have the Operations extension on (operations.enabled)")
	}
	var content struct {
		Proposal  json.RawMessage `json:"proposal"`
		Declined  json.RawMessage `json:"declined"`
		Operation json.RawMessage `json:"operation"`
	}
	if err := httpx.Unmarshal(raw, &content, httpx.DecodeOptions{}); err != nil {
		return nil, invalid("message.extensions.operations must be a JSON object")
	}
	out := &companyOps{explicitID: explicitID}
	var err error
	switch {
	case present(content.Operation):
		return nil, invalid("message.extensions.operations.operation is made by the platform: send proposal, with perform")
	case present(content.Proposal) && present(content.Declined):
		return nil, invalid("message.extensions.operations carries one of proposal or declined")
	case present(content.Proposal):
		out.proposal, out.request, err = parseConversationProposal(ctx, co, content.Proposal, w.CheckRequest)
	case present(content.Declined):
		out.declined, err = parseDeclined(content.Declined)
	default:
		return nil, invalid("message.extensions.operations needs proposal or declined")
	}
	if err != nil {
		return nil, err
	}
	return out, nil
}

// parseConversationProposal reads a proposal as the origin contract
// defines it (action_key, terms, summary, expires_in) with perform, the
// origin request that does the action, which must be one the gateway
// would forward (check): declared by the named API's OpenAPI description.
func parseConversationProposal(ctx context.Context, co *tenant.Company, raw json.RawMessage,
	check CheckRequest) (*operations.Proposal, *operations.Request, error) {
	p, err := operations.ParseProposal(raw)
	if err != nil {
		return nil, nil, invalid("message.extensions.operations.proposal: %s",
			strings.TrimPrefix(err.Error(), operations.ErrProposal.Error()+": "))
	}
	var body struct {
		Perform *struct {
			API    string          `json:"api"`
			Method string          `json:"method"`
			Path   string          `json:"path"`
			Query  string          `json:"query"`
			Body   json.RawMessage `json:"body"`
		} `json:"perform"`
	}
	if err := httpx.Unmarshal(raw, &body, httpx.DecodeOptions{}); err != nil {
		return nil, nil, invalid("message.extensions.operations.proposal.perform must be an object")
	}
	pf := body.Perform
	if pf == nil {
		return nil, nil, invalid("message.extensions.operations.proposal.perform is required: the request that does the action")
	}
	if !performMethods[pf.Method] {
		return nil, nil, invalid("proposal.perform.method must be POST, PUT, PATCH, DELETE or GET")
	}
	if err := checkPerformPath(pf.Path); err != nil {
		return nil, nil, err
	}
	if err := checkPerformQuery(pf.Query); err != nil {
		return nil, nil, err
	}
	if pf.API == "" {
		return nil, nil, invalid("proposal.perform.api is required: the name of an API registered through the gateway")
	}
	req := &operations.Request{API: pf.API, Method: pf.Method, Path: pf.Path, Query: pf.Query}
	if present(pf.Body) {
		req.ContentType, req.Body = "application/json", bytes.TrimSpace(pf.Body)
	}
	if err := check(ctx, co, req); err != nil {
		if he := (*httpx.Error)(nil); errors.As(err, &he) && he.Status() < http.StatusInternalServerError {
			return nil, nil, invalid("message.extensions.operations.proposal.%s", he.Description)
		}
		return nil, nil, err
	}
	return p, req, nil
}

// checkPerformPath accepts an escaped absolute path of at most
// maxPerformPath characters that passes the one path rule
// (safehttp.ValidPath), so a proposal cannot reach outside its API's
// origin path or smuggle a query.
func checkPerformPath(path string) error {
	if len(path) > maxPerformPath || !uriChars(path, "") || !safehttp.ValidPath(path) {
		return invalid("proposal.perform.path must be %s, of at most %d characters", safehttp.PathRule, maxPerformPath)
	}
	return nil
}

// checkPerformQuery accepts an escaped query without a fragment.
func checkPerformQuery(q string) error {
	if q == "" {
		return nil
	}
	if len(q) > maxPerformQuery || !uriChars(q, "?") {
		return invalid("proposal.perform.query must be an escaped query of at most %d characters, without ? or #", maxPerformQuery)
	}
	if _, err := url.ParseQuery(q); err != nil {
		return invalid("proposal.perform.query must be an escaped query, without ? or #")
	}
	return nil
}

// uriChars reports whether s has only the characters of an RFC 3986 path
// or query (pchar, "/" and, for a query, "?"), minus those in not, with
// well-formed percent escapes.
func uriChars(s, not string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '%':
			if i+2 >= len(s) || !isHex(s[i+1]) || !isHex(s[i+2]) {
				return false
			}
			i += 2
		case strings.IndexByte(not, c) >= 0:
			return false
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9',
			strings.IndexByte("-._~!$&'()*+,;=:@/?", c) >= 0:
		default:
			return false
		}
	}
	return true
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

// parseDeclined checks a declined notice (extension 6): the declined
// approval's operation_id and revision, and a reason and alternative as
// the Company would return them at an API. Unknown members are dropped.
func parseDeclined(raw json.RawMessage) (json.RawMessage, error) {
	var d struct {
		OperationID string          `json:"operation_id"`
		Revision    string          `json:"revision"`
		Reason      string          `json:"reason,omitempty"`
		Alternative json.RawMessage `json:"alternative,omitempty"`
	}
	if err := httpx.Unmarshal(raw, &d, httpx.DecodeOptions{}); err != nil {
		return nil, invalid("message.extensions.operations.declined must be an object")
	}
	if !validID(d.OperationID) || !validID(d.Revision) {
		return nil, invalid("declined.operation_id and declined.revision must be the declined approval's (extension 6)")
	}
	if err := checkText("declined.reason", d.Reason, maxReasonLen); err != nil {
		return nil, err
	}
	if present(d.Alternative) {
		alt, _ := json.Marshal(map[string]json.RawMessage{"alternative": d.Alternative})
		if operations.ParseDecline(alt).Alternative == nil {
			return nil, invalid("declined.alternative must be an alternative as spec 9.2 describes: instructions or " +
				"references of type web, openapi or mcp with https URLs")
		}
	} else {
		d.Alternative = nil
	}
	return json.Marshal(d)
}

// requireDeclared refuses operations content in a conversation whose
// Personal Agent did not declare version 3 (extension 2: a Company must
// not send it).
func requireDeclared(declared map[string]string) error {
	if declared[operations.Name] != operations.Version {
		return httpx.Errorf(httpx.CodeConflict, "the Personal Agent of this conversation does not declare the Operations "+
			"extension version %s (extension 2): ask for approval in the conversation itself", operations.Version)
	}
	return nil
}

// replayOps answers a retry of a message with operations content whose
// ID the Company chose: the first post when the rest of the message, the
// terms and summary (or the declined notice) are the same; nothing when
// the ID is new.
func replayOps(ctx context.Context, tx pgx.Tx, c *Conversation, m *Message, ops *companyOps) (*Posted, error) {
	if !ops.explicitID {
		return nil, nil
	}
	seq, stored, err := findCompanyMessage(ctx, tx, c, m.ID)
	if err != nil || seq == 0 {
		return nil, err
	}
	var sent map[string]any
	if exts, _ := stored["extensions"].(map[string]any); exts != nil {
		sent, _ = exts[operations.Name].(map[string]any)
		delete(exts, operations.Name)
		if len(exts) == 0 {
			delete(stored, "extensions")
		}
	}
	if !sameMessage(stored, m) || !ops.sameAs(sent) {
		return nil, httpx.Errorf(httpx.CodeMessageIDConflict, "this message ID was already used in the conversation with other content")
	}
	out := postedOf(c, seq).with(storedMessage(stored, sent))
	out.replayed = true
	return out, nil
}

// sameAs reports whether sent, the operations content of a stored
// message, is what ops would send again.
func (ops *companyOps) sameAs(sent map[string]any) bool {
	if ops.declined != nil {
		var d any
		_ = json.Unmarshal(ops.declined, &d)
		return reflect.DeepEqual(sent["declined"], d)
	}
	op, _ := sent["operation"].(map[string]any)
	if op == nil {
		return false
	}
	var terms any
	_ = json.Unmarshal(ops.proposal.Terms, &terms)
	summary, _ := op["summary"].(string)
	return reflect.DeepEqual(op["terms"], terms) && summary == ops.proposal.Summary
}

// storedMessage is the stored message with its operations content back.
func storedMessage(stored, sent map[string]any) *Message {
	if sent != nil {
		exts, _ := stored["extensions"].(map[string]any)
		if exts == nil {
			exts = map[string]any{}
		}
		exts[operations.Name] = sent
		stored["extensions"] = exts
	}
	raw, _ := json.Marshal(stored)
	var m Message
	_ = json.Unmarshal(raw, &m)
	return &m
}

// attachOps puts the operations content in m: for a proposal, the
// operation it makes or reuses for the conversation's owner, recorded in
// tx, the message's transaction (the proposal and its request are never
// shown to the Personal Agent). Whatever rejects the message is checked
// before anything is proposed, so a rejected message replaces no
// revision.
func (s *Store) attachOps(ctx context.Context, tx pgx.Tx, co *tenant.Company, c *Conversation, m *Message,
	ops *companyOps) error {
	if ops.proposal == nil {
		return putOps(m, map[string]any{"declined": ops.declined})
	}
	// The largest operation the proposal can make: IDs as long as
	// generated ones, an expiry of the same length.
	sized := &operations.Operation{OperationID: "op_" + strings.Repeat("x", idChars), Revision: strings.Repeat("x", idChars),
		Summary: ops.proposal.Summary, Terms: ops.proposal.Terms, ExpiresAt: s.now().UTC().Truncate(time.Second)}
	if err := putOps(m, map[string]any{"operation": sized}); err != nil {
		return err
	}
	owner := operations.Owner{ClientID: c.ClientID, UserID: c.UserID, AccountID: c.AccountID}
	op, err := s.ops.Operations.ProposeTx(ctx, tx, co.ID, owner, operations.InterfaceConversation, c.ID, ops.proposal,
		ops.request, "", s.now())
	if busy := (*operations.PerformingError)(nil); errors.As(err, &busy) {
		// One operation per action at a time (extension 7): its outcome
		// reaches the agent webhook first.
		return httpx.Errorf(httpx.CodeConflict, "the action's operation %s is being performed; "+
			"propose again once its outcome is known", busy.OperationID)
	}
	if err != nil {
		return err
	}
	return putOps(m, map[string]any{"operation": op})
}

// idChars is the length of an operation ID without its prefix, and of a
// revision (operations.newID).
const idChars = 26

// putOps sets m's operations content, which must leave m within
// maxMessageBytes.
func putOps(m *Message, content map[string]any) error {
	raw, err := json.Marshal(content)
	if err != nil {
		return err
	}
	if m.Extensions == nil {
		m.Extensions = map[string]json.RawMessage{}
	}
	m.Extensions[operations.Name] = raw
	if all, _ := json.Marshal(m); len(all) > maxMessageBytes {
		return invalid("the message with its operation is larger than %d bytes", maxMessageBytes)
	}
	return nil
}
