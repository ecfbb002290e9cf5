package operations

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/dunglas/httpsfv"

	"github.com/poppyhost/poppyhost/internal/httpx"
	"github.com/poppyhost/poppyhost/internal/sessions"
)

// The fuzz targets of the extension's parsers of outside input: the
// Poppy-Approval and Poppy-Extensions headers a Personal Agent sends, the
// approvals it sends as JSON, the references it sends back from
// Poppy-Operation, and the proposals and declines an origin answers with.
// testdata/fuzz holds more seeds and every finding.

// checkApproval fails unless a is an approval that passes its own rules.
func checkApproval(t *testing.T, a *Approval) {
	t.Helper()
	switch {
	case a == nil:
		t.Fatal("no approval and no error")
	case !sessions.ValidID(a.OperationID) || !sessions.ValidID(a.Revision):
		t.Fatalf("accepted the IDs of %+v", a)
	case a.Approver != ApproverUser && a.Approver != ApproverAgent:
		t.Fatalf("accepted approver %q", a.Approver)
	case a.Approver == ApproverAgent && a.InputType != "":
		t.Fatalf("kept input_type %q with agent", a.InputType)
	case len(a.InputType) > 64 || len(a.Reference) > 256:
		t.Fatalf("kept long optional members: %+v", a)
	case !utf8.ValidString(a.InputType+a.Reference) || strings.ContainsRune(a.InputType+a.Reference, 0):
		t.Fatalf("kept optional members PostgreSQL cannot store: %+v", a)
	}
}

// approvalHeader writes a as Poppy-Approval.
func approvalHeader(t *testing.T, a *Approval) string {
	t.Helper()
	d := httpsfv.NewDictionary()
	d.Add("operation_id", httpsfv.NewItem(a.OperationID))
	d.Add("revision", httpsfv.NewItem(a.Revision))
	d.Add("approver", httpsfv.NewItem(a.Approver))
	if a.ApprovedAt != 0 {
		d.Add("approved_at", httpsfv.NewItem(a.ApprovedAt))
	}
	if a.InputType != "" {
		d.Add("input_type", httpsfv.NewItem(a.InputType))
	}
	if a.Reference != "" {
		d.Add("reference", httpsfv.NewItem(a.Reference))
	}
	s, err := httpsfv.Marshal(d)
	if err != nil {
		t.Fatalf("an accepted approval %+v does not serialize: %v", a, err)
	}
	return s
}

// FuzzParseApprovalHeader feeds Poppy-Approval, in one or two field
// lines, to ParseApprovalHeader: a failure is ErrApproval; an approval
// passes its own rules, and reads the same when written again as the
// header or as JSON.
func FuzzParseApprovalHeader(f *testing.F) {
	for _, seed := range [][2]string{
		{`operation_id="exc_5Rt2", revision="1791487200-k3Jd9Qx2mW8v", approver="user", approved_at=1791487260, input_type="tap", reference="apr_01JD8ZK3Q9", later_member=?1;p=2`, ""},
		{`operation_id="exc_5Rt2", revision="r1"`, `approver="agent", input_type="voice"`},
		{`operation_id="exc_5Rt2", revision="r1", approver="robot"`, ""},
		{`operation_id=exc_5Rt2, revision="r1", approver="user"`, ""},
		{`operation_id="e", revision="r", approver="user", approved_at="now"`, ""},
		{`operation_id="e", revision="r", approver="user", approved_at=(1 2)`, ""},
		{`operation_id="e", revision="r", approver="user", approved_at=999999999999999`, ""},
		{`operation_id="e", revision="r", approver="user"; (`, ""},
		{`operation_id="e", revision="r", approver="user", operation_id="f"`, ""},
		{`operation_id=("e"), revision="r", approver="user"`, ""},
		{"", ""},
	} {
		f.Add(seed[0], seed[1])
	}
	f.Fuzz(func(t *testing.T, line1, line2 string) {
		values := []string{line1}
		if line2 != "" {
			values = append(values, line2)
		}
		a, err := ParseApprovalHeader(values)
		if err != nil {
			if a != nil || !errors.Is(err, ErrApproval) {
				t.Fatalf("approval %+v, error %v", a, err)
			}
			return
		}
		checkApproval(t, a)
		again, err := ParseApprovalHeader([]string{approvalHeader(t, a)})
		if err != nil || *again != *a {
			t.Fatalf("written again as a header, %+v reads as %+v, %v", a, again, err)
		}
		raw, _ := json.Marshal(a)
		fromJSON, err := ParseApprovalJSON(raw)
		if err != nil || *fromJSON != *a {
			t.Fatalf("written as JSON, %+v reads as %+v, %v", a, fromJSON, err)
		}
	})
}

// FuzzParseApprovalJSON feeds JSON approvals (MCP _meta, conversation
// messages) to ParseApprovalJSON: a failure is ErrApproval; an approval
// passes its own rules and reads the same when written again.
func FuzzParseApprovalJSON(f *testing.F) {
	for _, seed := range []string{
		`{"operation_id": "exc_5Rt2", "revision": "r1", "approver": "user", "extra": [1]}`,
		`{"operation_id": "exc_5Rt2", "revision": "r1", "approver": "agent", "input_type": "voice", "approved_at": 1791487260}`,
		`{"operation_id": "o", "revision": "r", "approver": "user", "input_type": "t\u0000ap", "reference": "` + strings.Repeat("é", 200) + `"}`,
		`{"operation_id": "o", "revision": "r", "approver": "user", "reference": "\ud800"}`,
		`{"operation_id": "exc_5Rt2", "revision": "r1"}`,
		`{"OPERATION_ID": "exc_5Rt2", "revision": "r1", "approver": "user"}`,
		`{"operation_id": "exc_5Rt2", "revision": "r1", "approver": "user", "approver": "agent"}`,
		`{"operation_id": "o", "revision": "r", "approver": "user", "approved_at": 1e300}`,
		`[1]`,
		`null`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		a, err := ParseApprovalJSON(raw)
		if err != nil {
			if a != nil || !errors.Is(err, ErrApproval) {
				t.Fatalf("approval %+v, error %v", a, err)
			}
			return
		}
		checkApproval(t, a)
		out, _ := json.Marshal(a)
		again, err := ParseApprovalJSON(out)
		if err != nil || *again != *a {
			t.Fatalf("written again, %+v reads as %+v, %v", a, again, err)
		}
	})
}

// FuzzDeclared feeds Poppy-Extensions to Declared: whatever the header, a
// Session that declares the extension declares it, and a header declares
// it only when it is an RFC 9651 List.
func FuzzDeclared(f *testing.F) {
	for _, seed := range []string{
		`"operations";v="3"`,
		`"mediated-sign-in";v="1", "operations";v="3"`,
		`"operations";v="3", operations;v=3`,
		`"operations";v="2";v="3"`,
		`operations;v="3"`,
		`"operations";v=3`,
		`("operations";v="3")`,
		`"operations";v=:Mw==:`,
		`"operations";v="3" ((`,
		`"operations";v="3", "operations";v="3";a=@1659578233`,
		"",
	} {
		f.Add(seed)
	}
	declaring := &sessions.Session{Extensions: map[string]string{Name: Version}}
	f.Fuzz(func(t *testing.T, header string) {
		if !Declared(declaring, []string{header}) {
			t.Fatal("a Session's declaration was lost to the header")
		}
		if Declared(nil, []string{header}) {
			if _, err := httpsfv.UnmarshalList([]string{header}); err != nil {
				t.Fatalf("%q declares the extension and is not a List: %v", header, err)
			}
		}
	})
}

// FuzzParseRef feeds references from Poppy-Operation, as a Personal Agent
// sends them back to the operations endpoint, to ParseRef: a reference it
// accepts is one Ref makes, of IDs, and bounded.
func FuzzParseRef(f *testing.F) {
	for _, seed := range []string{
		"exc_5Rt2.1791487200-k3Jd9Qx2mW8v",
		"exc_5Rt2.1791487200.k3Jd9Qx2mW8v",
		"exc_5Rt2.",
		".r",
		"a..b",
		"exc 5Rt2.r",
		strings.Repeat("a", 300) + ".r",
		"",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, ref string) {
		id, rev, ok := ParseRef(ref)
		if !ok {
			return
		}
		if !sessions.ValidID(id) || !sessions.ValidID(rev) || len(ref) > MaxRef || Ref(id, rev) != ref {
			t.Fatalf("accepted %q as %q, %q", ref, id, rev)
		}
	})
}

// FuzzParseProposal feeds an origin's proposal bodies to ParseProposal: a
// failure is ErrProposal; a proposal has a bounded action key and
// summary that reads as it is, terms that are a JSON object the
// canonical form and PostgreSQL can hold, and an expiry within bounds.
func FuzzParseProposal(f *testing.F) {
	for _, seed := range []string{
		`{"action_key": "exchange o1", "terms": {"a": 1}, "summary": "Exchange", "unknown": true}`,
		`{"action_key": "k", "terms": {"amount": 9007199254740993}, "expires_in": 604800}`,
		`{"action_key": "k", "terms": {"amount": 1, "amount": 100}}`,
		`{"action_key": "k", "action_key": "j", "terms": {}}`,
		`{"terms": {"a": 1}}`,
		`{"action_key": "k", "terms": [1]}`,
		`{"action_key": "k", "terms": {}, "expires_in": -1}`,
		`{"action_key": "k", "terms": {}, "expires_in": 99999999999999999999}`,
		`{"action_key": "k\u0000", "terms": {}}`,
		`{"action_key": "k", "terms": {"a": "x\u0000y"}}`,
		`{"action_key": "k", "terms": {"a": "x\\u0000y"}}`,
		`{"action_key": "k", "terms": {}, "summary": "Refund \u202e001$ to your card"}`,
		`{"action_key": "k", "terms": {"n": 1e2147483647}}`,
		`{"action_key": "k", "terms": {"a": [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]}}`,
		`not json`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		p, err := ParseProposal(body)
		if err != nil {
			if p != nil || !errors.Is(err, ErrProposal) {
				t.Fatalf("proposal %+v, error %v", p, err)
			}
			return
		}
		switch t0 := bytes.TrimSpace(p.Terms); {
		case p.ActionKey == "" || len(p.ActionKey) > maxActionKey || strings.ContainsRune(p.ActionKey, 0):
			t.Fatalf("accepted action_key %q", p.ActionKey)
		case len(t0) == 0 || t0[0] != '{' || bytes.Contains(t0, []byte(`\u0000`)):
			t.Fatalf("accepted terms %s", p.Terms)
		case len(p.Summary) > maxSummary || httpx.DisguiseProblem(p.Summary) != "":
			t.Fatalf("accepted summary %q", p.Summary)
		case p.expiry() <= 0 || p.expiry() > MaxExpiry:
			t.Fatalf("accepted expiry %v", p.expiry())
		}
		canon, err := Canonical(p.Terms)
		if err != nil {
			t.Fatalf("accepted terms %s with no canonical form: %v", p.Terms, err)
		}
		again, err := Canonical(canon)
		if err != nil || !bytes.Equal(again, canon) {
			t.Fatalf("canonical terms %s read again as %s, %v", canon, again, err)
		}
	})
}

// FuzzParseDecline feeds declines from origins and hooks to ParseDecline:
// it always answers, keeps a reason only when it is bounded text, and an
// alternative only when it is one spec 9.2 describes with https
// references; what it keeps reads the same again.
func FuzzParseDecline(f *testing.F) {
	for _, seed := range []string{
		`{"reason": "Only the account holder can.", "alternative": {"instructions": "Use the app.", "references": [{"type": "web", "url": "https://example.com/account/close"}]}}`,
		`{"alternative": {"references": [{"type": "web", "url": "http://example.com/x"}]}}`,
		`{"alternative": {"references": [{"type": "web", "url": "javascript:alert(1)"}]}}`,
		`{"alternative": {"references": [{"type": "mcp", "url": "https://u:p@example.com"}]}}`,
		`{"alternative": {"references": [{"type": "ftp", "url": "https://example.com"}]}}`,
		`{"alternative": {}}`,
		`{"alternative": "call us"}`,
		`{"reason": "a\u0000b"}`,
		`{"reason": 1}`,
		`not json`,
		``,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		d := ParseDecline(body)
		if d == nil {
			t.Fatal("no decline")
		}
		if len(d.Reason) > maxSummary || strings.ContainsRune(d.Reason, 0) {
			t.Fatalf("kept reason %q", d.Reason)
		}
		if d.Alternative != nil && !validAlternative(d.Alternative) {
			t.Fatalf("kept alternative %s", d.Alternative)
		}
		out, err := json.Marshal(d)
		if err != nil {
			t.Fatalf("the decline kept does not serialize: %v", err)
		}
		again := ParseDecline(out)
		if again.Reason != d.Reason || (again.Alternative == nil) != (d.Alternative == nil) {
			t.Fatalf("%s read again as %+v", out, again)
		}
	})
}

// FuzzCanonical feeds JSON documents to Canonical, which decides whether
// the terms of a request are those approved: a failure is ErrNotJSON or
// ErrDuplicateMember; a canonical text is JSON, its own canonical text,
// means what the document does, and grows little beyond it.
func FuzzCanonical(f *testing.F) {
	for _, seed := range []string{
		`{"a": 1, "b": [1, 2]}`,
		`{"b":[1,2],"a":1}`,
		`{"amount": 9007199254740993, "x": 1.0, "y": 10e-1, "z": 0.1e1, "w": -0}`,
		`{"amount": 1, "amount": 100}`,
		`{"n": 1e2147483647}`,
		`{"n": 1e-2147483648}`,
		`"\ud800"`,
		`[1, 2] 3`,
		`{"a": "\u00e9\u2028<>&"}`,
		`null`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		canon, err := Canonical(raw)
		if err != nil {
			if !errors.Is(err, ErrNotJSON) && !errors.Is(err, ErrDuplicateMember) {
				t.Fatalf("error %v", err)
			}
			return
		}
		if !json.Valid(canon) {
			t.Fatalf("%s: canonical text %s is not JSON", raw, canon)
		}
		again, err := Canonical(canon)
		if err != nil || !bytes.Equal(again, canon) {
			t.Fatalf("%s: canonical text %s reads again as %s, %v", raw, canon, again, err)
		}
		if !SameJSON(raw, canon) {
			t.Fatalf("%s is not the same as its canonical text %s", raw, canon)
		}
		// A number grows to at most its digits and an exponent; a string
		// to six bytes for each byte escaped.
		if len(canon) > 6*len(raw)+16 {
			t.Fatalf("%d bytes grew to %d", len(raw), len(canon))
		}
	})
}
