package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"reflect"
	"strings"
	"time"

	"github.com/dunglas/httpsfv"
)

// Operation is an operation a Company returned (extension 3).
type Operation struct {
	OperationID string          `json:"operation_id"`
	Revision    string          `json:"revision"`
	Summary     string          `json:"summary,omitempty"`
	Terms       json.RawMessage `json:"terms"`
	ExpiresAt   string          `json:"expires_at"`
}

// valid checks the members the extension requires, and that the
// operation has not expired at now: the User is never asked about it.
func (o *Operation) valid(now time.Time) error {
	if o == nil || !isID(o.OperationID) || !isID(o.Revision) || len(o.Terms) == 0 || o.Terms[0] != '{' || o.ExpiresAt == "" {
		return errors.New("agent: the operation lacks a valid operation_id, revision, terms or expires_at")
	}
	exp, err := time.Parse(time.RFC3339, o.ExpiresAt)
	if err != nil {
		return fmt.Errorf("agent: the operation's expires_at %q is not a date-time", o.ExpiresAt)
	}
	if !exp.After(now) {
		return fmt.Errorf("agent: operation %s expired at %s: not asked, not approved", o.OperationID, o.ExpiresAt)
	}
	return nil
}

// Approval is an approval of one revision (extension 6).
type Approval struct {
	OperationID string `json:"operation_id"`
	Revision    string `json:"revision"`
	Approver    string `json:"approver"` // "user" or "agent"
	ApprovedAt  int64  `json:"approved_at,omitempty"`
	InputType   string `json:"input_type,omitempty"` // only with "user"
	Reference   string `json:"reference,omitempty"`
}

// Header encodes the approval as the Poppy-Approval dictionary.
func (p *Approval) Header() (string, error) {
	d := httpsfv.NewDictionary()
	d.Add("operation_id", httpsfv.NewItem(p.OperationID))
	d.Add("revision", httpsfv.NewItem(p.Revision))
	d.Add("approver", httpsfv.NewItem(p.Approver))
	if p.ApprovedAt != 0 {
		d.Add("approved_at", httpsfv.NewItem(p.ApprovedAt))
	}
	if p.InputType != "" && p.Approver == "user" {
		d.Add("input_type", httpsfv.NewItem(p.InputType))
	}
	if p.Reference != "" {
		d.Add("reference", httpsfv.NewItem(p.Reference))
	}
	return httpsfv.Marshal(d)
}

// Declined is a Company's decline of an approval (extension 6). The agent
// never sends that approval again.
type Declined struct {
	OperationID string          `json:"operation_id"`
	Revision    string          `json:"revision"`
	Reason      string          `json:"reason,omitempty"`
	Alternative json.RawMessage `json:"alternative,omitempty"`
}

func (d *Declined) Error() string {
	return fmt.Sprintf("agent: the Company declined the approval of %s: %s", d.OperationID, d.Reason)
}

// ErrNotApproved is returned when the User or the instruction did not
// approve an operation: nothing was performed.
var ErrNotApproved = errors.New("agent: the operation was not approved, so it was not performed")

// Ask is what the agent knows when an approval is asked for.
type Ask struct {
	Company   string // organization.name, shown to the User (extension 5)
	Interface string // "api", "mcp", "conversation" or "web"
	Operation *Operation
	// Expected holds terms the agent asked for; a difference is named
	// in Differences.
	Expected map[string]any
	// Differences lists the expected terms the operation does not match.
	Differences []string
	// NewRevision is set when this revision answered an earlier approval:
	// an instruction never covers it (extension 5).
	NewRevision bool
	// Time is when the agent asks, by its clock; approved_at is this.
	Time time.Time
}

// Approver decides an operation: it returns an approval, or nil to leave
// it unapproved.
type Approver interface {
	Approve(ctx context.Context, ask *Ask) (*Approval, error)
}

// UserFunc asks the User through the agent's own interface and returns
// whether they approved and how they answered ("tap", "typed", ...).
type UserFunc func(ctx context.Context, ask *Ask) (approved bool, inputType string, err error)

// AsUser is an Approver that asks the User (a user approval).
func AsUser(ask UserFunc) Approver { return userApprover(ask) }

type userApprover UserFunc

func (u userApprover) Approve(ctx context.Context, ask *Ask) (*Approval, error) {
	ok, input, err := u(ctx, ask)
	if err != nil || !ok {
		return nil, err
	}
	return &Approval{
		OperationID: ask.Operation.OperationID, Revision: ask.Operation.Revision,
		Approver: "user", ApprovedAt: ask.Time.Unix(), InputType: input, Reference: "apr_" + randomID(12),
	}, nil
}

// Instruction is an instruction the User gave the agent, such as "approve
// exchanges under $100": it covers an operation whose terms carry every
// Require member and whose amounts ({"amount": "70.00", "currency":
// "USD"} anywhere in terms) are all below Under in Currency.
type Instruction struct {
	Text     string
	Require  map[string]any
	Under    string // a decimal amount, e.g. "100.00"
	Currency string
	// Else is asked when the instruction does not cover the operation;
	// nil leaves it unapproved.
	Else Approver
}

// AsAgent is an Approver that approves on the User's instruction (an
// agent approval), and otherwise asks in.Else.
func AsAgent(in Instruction) Approver { return in }

// Approve implements Approver.
func (in Instruction) Approve(ctx context.Context, ask *Ask) (*Approval, error) {
	if !ask.NewRevision && len(ask.Differences) == 0 && in.covers(ask.Operation) {
		return &Approval{
			OperationID: ask.Operation.OperationID, Revision: ask.Operation.Revision,
			Approver: "agent", ApprovedAt: ask.Time.Unix(), Reference: "apr_" + randomID(12),
		}, nil
	}
	if in.Else == nil {
		return nil, nil
	}
	return in.Else.Approve(ctx, ask)
}

// covers checks the terms against the instruction; when it can't tell, it
// doesn't cover them.
func (in Instruction) covers(op *Operation) bool {
	var terms map[string]any
	if json.Unmarshal(op.Terms, &terms) != nil {
		return false
	}
	if len(differences(terms, in.Require)) > 0 {
		return false
	}
	if in.Under == "" {
		return true
	}
	limit, ok := new(big.Rat).SetString(in.Under)
	if !ok {
		return false
	}
	amounts := findAmounts(terms)
	if len(amounts) == 0 {
		return false // no amount to check: can't tell
	}
	for _, m := range amounts {
		cur, _ := m["currency"].(string)
		a, ok := new(big.Rat).SetString(fmt.Sprint(m["amount"]))
		if !ok || !strings.EqualFold(cur, in.Currency) || a.Cmp(limit) >= 0 {
			return false
		}
	}
	return true
}

// findAmounts returns every {"amount", "currency"} object in v.
func findAmounts(v any) []map[string]any {
	var out []map[string]any
	switch v := v.(type) {
	case map[string]any:
		if _, ok := v["amount"]; ok {
			if _, ok := v["currency"]; ok {
				return []map[string]any{v}
			}
		}
		for _, x := range v {
			out = append(out, findAmounts(x)...)
		}
	case []any:
		for _, x := range v {
			out = append(out, findAmounts(x)...)
		}
	}
	return out
}

// differences names each expected member that terms lack or differ in.
func differences(terms, expected map[string]any) []string {
	var out []string
	for k, want := range expected {
		got, ok := terms[k]
		wb, _ := json.Marshal(want)
		var wantJSON any
		_ = json.Unmarshal(wb, &wantJSON)
		if !ok || !reflect.DeepEqual(got, wantJSON) {
			out = append(out, fmt.Sprintf("%s: asked %s, terms say %v", k, wb, got))
		}
	}
	return out
}

// newAsk builds the Ask for an operation and checks its terms against
// what the agent asked for (extension 5).
func newAsk(c *Company, iface string, op *Operation, expected map[string]any, newRevision bool, now time.Time) *Ask {
	ask := &Ask{Company: c.Name(), Interface: iface, Operation: op, Expected: expected, NewRevision: newRevision, Time: now}
	var terms map[string]any
	if json.Unmarshal(op.Terms, &terms) == nil {
		ask.Differences = differences(terms, expected)
	}
	return ask
}

// isID checks the spec 8.2 alphabet and length.
func isID(s string) bool { return inAlphabet(s, 256, "") }

// inAlphabet reports whether s has 1 to maxLen characters, each a letter,
// a digit, '-', '_' or one of extra.
func inAlphabet(s string, maxLen int, extra string) bool {
	if len(s) == 0 || len(s) > maxLen {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || strings.ContainsRune(extra, r)) {
			return false
		}
	}
	return true
}
