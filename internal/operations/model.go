package operations

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"strings"
	"time"

	"github.com/dunglas/httpsfv"

	"github.com/poppyhost/poppyhost/internal/httpx"
	"github.com/poppyhost/poppyhost/internal/sessions"
)

// Name and Version of the extension.
const (
	Name    = "operations"
	Version = "3"
)

// Media types of the origin contract (DESIGN.md).
const (
	ProposalType = "application/poppy-proposal+json"
	DeclineType  = "application/poppy-decline+json"
)

// Headers of the extension.
const (
	ApprovalHeader   = "Poppy-Approval"
	ExtensionsHeader = "Poppy-Extensions"
)

// MetaApproval is the _meta key of an approval in an MCP tool call
// (extension 6).
const MetaApproval = "personalagentprotocol.org/approval"

// Error codes of the extension.
const (
	CodeApprovalRequired = httpx.CodeApprovalRequired
	CodeApprovalDeclined = httpx.CodeApprovalDeclined
)

// Operation is an operation as Personal Agents see it (extension 3).
type Operation struct {
	OperationID string          `json:"operation_id"`
	Revision    string          `json:"revision"`
	Summary     string          `json:"summary,omitempty"`
	Terms       json.RawMessage `json:"terms"`
	ExpiresAt   time.Time       `json:"expires_at"`
}

// Approver values (extension 6).
const (
	ApproverUser  = "user"
	ApproverAgent = "agent"
)

// Approval is what a Personal Agent sends to approve a revision
// (extension 6). Members it does not know are ignored; the optional ones
// are recorded and never a reason to refuse.
type Approval struct {
	OperationID string `json:"operation_id"`
	Revision    string `json:"revision"`
	Approver    string `json:"approver"`
	ApprovedAt  int64  `json:"approved_at,omitempty"`
	InputType   string `json:"input_type,omitempty"`
	Reference   string `json:"reference,omitempty"`
}

// ErrApproval: an approval that is not well formed.
var ErrApproval = errors.New("operations: malformed approval")

// validate checks the required members; approver must be user or agent
// (extension 6: it says how the approval was given). input_type is
// dropped with agent, where a Company ignores it.
func (a *Approval) validate() error {
	switch {
	case !sessions.ValidID(a.OperationID):
		return fmt.Errorf("%w: operation_id must be an ID of 1 to 256 letters, digits, - and _", ErrApproval)
	case !sessions.ValidID(a.Revision):
		return fmt.Errorf("%w: revision must be an ID of 1 to 256 letters, digits, - and _", ErrApproval)
	case a.Approver != ApproverUser && a.Approver != ApproverAgent:
		return fmt.Errorf("%w: approver is required, user or agent", ErrApproval)
	}
	if a.Approver == ApproverAgent {
		a.InputType = ""
	}
	// Optional members are the Personal Agent's statements, never a
	// reason to refuse: kept short and storable.
	a.InputType, a.Reference = storable(a.InputType, 64), storable(a.Reference, 256)
	return nil
}

// storable cuts s to n bytes of valid UTF-8 without NUL.
func storable(s string, n int) string {
	s = strings.ToValidUTF8(strings.ReplaceAll(s, "\x00", ""), "")
	for len(s) > n {
		s = strings.ToValidUTF8(s[:n], "")
	}
	return s
}

// ParseApprovalHeader reads Poppy-Approval, an RFC 9651 Dictionary, or
// returns nil when the request has none.
func ParseApprovalHeader(values []string) (*Approval, error) {
	if len(values) == 0 {
		return nil, nil
	}
	d, err := httpsfv.UnmarshalDictionary(values)
	if err != nil {
		return nil, fmt.Errorf("%w: %s is not an RFC 9651 dictionary", ErrApproval, ApprovalHeader)
	}
	str := func(k string) (string, error) {
		m, ok := d.Get(k)
		if !ok {
			return "", nil
		}
		it, ok := m.(httpsfv.Item)
		if !ok {
			return "", fmt.Errorf("%w: %s must be a String", ErrApproval, k)
		}
		s, ok := it.Value.(string)
		if !ok {
			return "", fmt.Errorf("%w: %s must be a String", ErrApproval, k)
		}
		return s, nil
	}
	a := &Approval{}
	for k, dst := range map[string]*string{"operation_id": &a.OperationID, "revision": &a.Revision,
		"approver": &a.Approver, "input_type": &a.InputType, "reference": &a.Reference} {
		if *dst, err = str(k); err != nil {
			return nil, err
		}
	}
	if m, ok := d.Get("approved_at"); ok {
		it, ok := m.(httpsfv.Item)
		n, isInt := it.Value.(int64)
		if !ok || !isInt {
			return nil, fmt.Errorf("%w: approved_at must be an Integer", ErrApproval)
		}
		a.ApprovedAt = n
	}
	if err := a.validate(); err != nil {
		return nil, err
	}
	return a, nil
}

// ParseApprovalJSON reads an approval sent as a JSON object (MCP's _meta,
// a conversation message).
func ParseApprovalJSON(raw json.RawMessage) (*Approval, error) {
	var a Approval
	if err := httpx.Unmarshal(raw, &a, httpx.DecodeOptions{}); err != nil {
		return nil, fmt.Errorf("%w: not an approval object", ErrApproval)
	}
	if err := a.validate(); err != nil {
		return nil, err
	}
	return &a, nil
}

// WithVersion returns ext, the extensions a request declares (name to
// version), with this extension's version added: how a request that
// declares it by its Poppy-Extensions header or an approval tells the
// origin so in Poppy-Verified. ext itself, a Session's, is never changed.
func WithVersion(ext map[string]string) map[string]string {
	if ext[Name] == Version {
		return ext
	}
	out := maps.Clone(ext)
	if out == nil {
		out = map[string]string{}
	}
	out[Name] = Version
	return out
}

// Declared reports whether a request declares version 3 of the extension:
// in the Personal Agent's client metadata (the Session's extensions) or in
// Poppy-Extensions. That header is an RFC 9651 List; a member declares an
// extension as a String, its name, with a String parameter v, its version:
// "operations";v="3" (extension section 2, Poppy 1.0 section 3.4). The
// types are part of the form (RFC 9651 §3.3: a Token or an Integer is not
// a String), so a Token operations or an Integer v=3 declares nothing, as
// a member of a form the field does not define; other members still
// count. A header that does not parse declares nothing.
func Declared(sess *sessions.Session, header []string) bool {
	if sess != nil && sess.Extensions[Name] == Version {
		return true
	}
	if len(header) == 0 {
		return false
	}
	l, err := httpsfv.UnmarshalList(header)
	if err != nil {
		return false
	}
	for _, m := range l {
		it, ok := m.(httpsfv.Item)
		if !ok {
			continue
		}
		if name, ok := it.Value.(string); !ok || name != Name {
			continue
		}
		if v, ok := it.Params.Get("v"); ok {
			if s, ok := v.(string); ok && s == Version {
				return true
			}
		}
	}
	return false
}

// Proposal is an origin's answer that asks for approval (DESIGN.md).
type Proposal struct {
	ActionKey string          `json:"action_key"`
	Terms     json.RawMessage `json:"terms"`
	Summary   string          `json:"summary"`
	// ExpiresIn is in seconds [DefaultExpiry].
	ExpiresIn int `json:"expires_in"`
}

// DefaultExpiry leaves the User time to read the terms and decide
// (extension 3, "Expiry"); MaxExpiry bounds how long an operation is kept.
const (
	DefaultExpiry = 30 * time.Minute
	MaxExpiry     = 7 * 24 * time.Hour
	maxSummary    = 4000
	maxActionKey  = 512
)

// ErrProposal: an origin's proposal the platform cannot use.
var ErrProposal = errors.New("operations: invalid proposal from the origin")

// ParseProposal reads a proposal body.
func ParseProposal(body []byte) (*Proposal, error) {
	var p Proposal
	if _, err := Canonical(body); err != nil {
		// Two members of one name would leave the terms ambiguous.
		return nil, fmt.Errorf("%w: %v", ErrProposal, err)
	}
	if err := httpx.Unmarshal(body, &p, httpx.DecodeOptions{}); err != nil {
		return nil, fmt.Errorf("%w: not a JSON object", ErrProposal)
	}
	t := bytes.TrimSpace(p.Terms)
	disguised := httpx.DisguiseProblem(p.Summary)
	switch {
	case p.ActionKey == "" || len(p.ActionKey) > maxActionKey || strings.ContainsRune(p.ActionKey, 0):
		return nil, fmt.Errorf("%w: action_key must be 1 to %d characters, no NUL", ErrProposal, maxActionKey)
	case len(t) == 0 || t[0] != '{':
		return nil, fmt.Errorf("%w: terms must be a JSON object", ErrProposal)
	case bytes.Contains(t, []byte(`\u0000`)):
		// PostgreSQL's jsonb cannot store it.
		return nil, fmt.Errorf("%w: terms must not contain NUL", ErrProposal)
	case len(p.Summary) > maxSummary || strings.ContainsRune(p.Summary, 0):
		return nil, fmt.Errorf("%w: summary must be text of at most %d bytes", ErrProposal, maxSummary)
	case disguised != "":
		// The User approves what the summary says: it must read as it is.
		return nil, fmt.Errorf("%w: summary %s", ErrProposal, disguised)
	case p.ExpiresIn < 0 || time.Duration(p.ExpiresIn)*time.Second > MaxExpiry:
		return nil, fmt.Errorf("%w: expires_in must be 0 to %d seconds", ErrProposal, int(MaxExpiry/time.Second))
	}
	return &p, nil
}

// expiry is how long the proposal's revision can be approved.
func (p *Proposal) expiry() time.Duration {
	if p.ExpiresIn == 0 {
		return DefaultExpiry
	}
	return time.Duration(p.ExpiresIn) * time.Second
}

// Decline is an origin's or hook's refusal of an approval (extension 6).
type Decline struct {
	Reason      string          `json:"reason,omitempty"`
	Alternative json.RawMessage `json:"alternative,omitempty"`
}

// ParseDecline reads a decline body. Its alternative is kept only when it
// is one as spec 9.2 describes, with https references: it is the Company's
// content, shown to the User (extension 6).
func ParseDecline(body []byte) *Decline {
	var d Decline
	if httpx.Unmarshal(body, &d, httpx.DecodeOptions{}) != nil {
		return &Decline{}
	}
	// A reason or alternative that is unusable, or that could read
	// otherwise than it is (httpx.Disguising), is left out: the decline
	// stands without it (extension 6 makes both optional).
	if _, disguised := httpx.Disguising(d.Reason); disguised || len(d.Reason) > maxSummary || strings.ContainsRune(d.Reason, 0) {
		d.Reason = ""
	}
	if _, disguised := httpx.DisguisingJSON(d.Alternative); disguised || !validAlternative(d.Alternative) {
		d.Alternative = nil
	}
	return &d
}

func validAlternative(raw json.RawMessage) bool {
	if len(raw) == 0 {
		return false
	}
	var alt struct {
		Instructions string `json:"instructions"`
		References   []struct {
			Type string `json:"type"`
			URL  string `json:"url"`
		} `json:"references"`
	}
	if httpx.Unmarshal(raw, &alt, httpx.DecodeOptions{}) != nil || (alt.Instructions == "" && len(alt.References) == 0) {
		return false
	}
	for _, r := range alt.References {
		u, err := url.Parse(r.URL)
		if err != nil || u.Scheme != "https" || u.Host == "" || u.User != nil ||
			(r.Type != "web" && r.Type != "openapi" && r.Type != "mcp") {
			return false
		}
	}
	return true
}
