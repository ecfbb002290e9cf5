package operations

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/sessions"
)

func TestParseApprovalHeader(t *testing.T) {
	a, err := ParseApprovalHeader([]string{`operation_id="exc_5Rt2", revision="1791487200-k3Jd9Qx2mW8v", approver="user", ` +
		`approved_at=1791487260, input_type="tap", reference="apr_01JD8ZK3Q9", later_member=?1;p=2`})
	require.NoError(t, err)
	require.Equal(t, &Approval{OperationID: "exc_5Rt2", Revision: "1791487200-k3Jd9Qx2mW8v", Approver: "user",
		ApprovedAt: 1791487260, InputType: "tap", Reference: "apr_01JD8ZK3Q9"}, a, "unknown members are ignored")

	a, err = ParseApprovalHeader([]string{`operation_id="exc_5Rt2", revision="r1"`, `approver="agent", input_type="voice"`})
	require.NoError(t, err, "a dictionary split over two header lines")
	require.Empty(t, a.InputType, "input_type means nothing with agent")

	none, err := ParseApprovalHeader(nil)
	require.NoError(t, err)
	require.Nil(t, none)

	for _, bad := range []string{
		`operation_id="exc_5Rt2", revision="r1"`,                   // no approver
		`operation_id="exc_5Rt2", revision="r1", approver="robot"`, // unknown approver
		`operation_id="exc 5Rt2", revision="r1", approver="user"`,  // not an ID
		`operation_id="exc_5Rt2", approver="user"`,                 // no revision
		`operation_id=exc_5Rt2, revision="r1", approver="user"`,    // a Token, not a String
		`operation_id="e", revision="r", approver="user", approved_at="now"`,
		`operation_id="e", revision="r", approver="user"; (`, // not a dictionary
	} {
		_, err := ParseApprovalHeader([]string{bad})
		require.ErrorIs(t, err, ErrApproval, bad)
	}
}

func TestParseApprovalJSON(t *testing.T) {
	a, err := ParseApprovalJSON(json.RawMessage(`{"operation_id": "exc_5Rt2", "revision": "r1", "approver": "user", "extra": [1]}`))
	require.NoError(t, err)
	require.Equal(t, "exc_5Rt2", a.OperationID)
	_, err = ParseApprovalJSON(json.RawMessage(`{"operation_id": "exc_5Rt2", "revision": "r1"}`))
	require.ErrorIs(t, err, ErrApproval)
	_, err = ParseApprovalJSON(json.RawMessage(`[1]`))
	require.ErrorIs(t, err, ErrApproval)
	// Member names are exact, and once each (issue 25).
	_, err = ParseApprovalJSON(json.RawMessage(`{"OPERATION_ID": "exc_5Rt2", "revision": "r1", "approver": "user"}`))
	require.ErrorIs(t, err, ErrApproval)
	_, err = ParseApprovalJSON(json.RawMessage(`{"operation_id": "exc_5Rt2", "revision": "r1", "approver": "user", "approver": "agent"}`))
	require.ErrorIs(t, err, ErrApproval)
}

func TestDeclared(t *testing.T) {
	require.True(t, Declared(&sessions.Session{Extensions: map[string]string{"operations": "3"}}, nil), "client metadata")
	require.False(t, Declared(&sessions.Session{Extensions: map[string]string{"operations": "2"}}, nil), "another version")
	for header, want := range map[string]bool{
		`"operations";v="3"`:                           true,
		`"mediated-sign-in";v="1", "operations";v="3"`: true,
		`"operations";v="3", operations;v=3`:           true,
		`"operations";v="2";v="3"`:                     true,
		// The form is a String with a String v (RFC 9651 §3.3.3; extension
		// section 2): a Token or an Integer is another type, and declares
		// nothing.
		`operations;v="3"`:         false,
		`"operations";v=3`:         false,
		`operations;v=3`:           false,
		`"operations";v=3.0`:       false,
		`"operations";v=?1`:        false,
		`"operations";V="3"`:       false,
		`"Operations";v="3"`:       false,
		`("operations";v="3")`:     false,
		`"operations";v=:Mw==:`:    false,
		`"operations";v="3";v="2"`: false,
		`"operations";v="2"`:       false,
		`"operations"`:             false,
		`"other";v="3"`:            false,
		`"operations";v="3" ((`:    false,
	} {
		require.Equal(t, want, Declared(nil, []string{header}), header)
	}
}

func TestParseProposal(t *testing.T) {
	p, err := ParseProposal([]byte(`{"action_key": "exchange o1", "terms": {"a": 1}, "summary": "Exchange", "unknown": true}`))
	require.NoError(t, err)
	require.Equal(t, DefaultExpiry, p.expiry())
	for _, bad := range []string{
		`{"terms": {"a": 1}}`,
		`{"action_key": "k", "terms": [1]}`,
		`{"action_key": "k"}`,
		`{"action_key": "k", "terms": {}, "expires_in": -1}`,
		`{"action_key": "k", "terms": {}, "expires_in": 99999999}`,
		`{"action_key": "k\u0000", "terms": {}}`,
		`{"action_key": "k", "terms": {"a": "x\u0000y"}}`,
		`{"action_key": "k", "terms": {}, "summary": "Refund \u202e001$ to your card"}`,
		`{"action_key": "k", "terms": {}, "summary": "Exchange\u200b"}`,
		`not json`,
	} {
		_, err := ParseProposal([]byte(bad))
		require.ErrorIs(t, err, ErrProposal, bad)
	}
}

func TestRequestSameComparesMeaning(t *testing.T) {
	a := &Request{Method: "POST", Path: "/orders/o1/exchanges", Body: []byte(`{"a": 1, "b": [1, 2]}`)}
	require.True(t, a.Same(&Request{Method: "POST", Path: "/orders/o1/exchanges", Body: []byte(`{"b":[1,2],"a":1}`)}))
	require.False(t, a.Same(&Request{Method: "POST", Path: "/orders/o1/exchanges", Body: []byte(`{"a": 2, "b": [1, 2]}`)}))
	require.False(t, a.Same(&Request{Method: "PUT", Path: "/orders/o1/exchanges", Body: a.Body}))
	require.False(t, a.Same(&Request{Method: "POST", Path: "/orders/o2/exchanges", Body: a.Body}))
	require.False(t, a.Same(&Request{Method: "POST", Path: "/orders/o1/exchanges", Query: "x=1", Body: a.Body}))
	text := &Request{Method: "POST", Path: "/x", Body: []byte("a=1")}
	require.True(t, text.Same(&Request{Method: "POST", Path: "/x", Body: []byte("a=1")}))
	require.False(t, text.Same(&Request{Method: "POST", Path: "/x", Body: []byte("a=2")}))

	// Forms and queries by meaning: however a browser percent-encodes them
	// when it submits the form again.
	const form = "application/x-www-form-urlencoded"
	f := &Request{Method: "POST", Path: "/x", Query: "q=a%20b&r=%7e", ContentType: form, Body: []byte("note=a%20b&sku=m%2dl")}
	require.True(t, f.Same(&Request{Method: "POST", Path: "/x", Query: "q=a+b&r=~", ContentType: form + "; charset=utf-8",
		Body: []byte("note=a+b&sku=m-l")}))
	require.False(t, f.Same(&Request{Method: "POST", Path: "/x", Query: "q=a+b&r=~", ContentType: form,
		Body: []byte("sku=m-l&note=a+b")}), "the order of fields counts")
	require.False(t, f.Same(&Request{Method: "POST", Path: "/x", Query: "q=a+c&r=~", ContentType: form, Body: f.Body}))
	require.False(t, f.Same(&Request{Method: "POST", Path: "/x", Query: f.Query, ContentType: "text/plain",
		Body: []byte("note=a+b&sku=m-l")}), "only forms are compared as forms")
}

func TestParseDeclineKeepsOnlyValidAlternatives(t *testing.T) {
	d := ParseDecline([]byte(`{"reason": "Only the account holder can.", "alternative": {"instructions": "Use the app.",
		"references": [{"type": "web", "url": "https://example.com/account/close"}]}}`))
	require.Equal(t, "Only the account holder can.", d.Reason)
	require.NotNil(t, d.Alternative)
	for _, bad := range []string{
		`{"alternative": {"references": [{"type": "web", "url": "http://example.com/x"}]}}`,
		`{"alternative": {"references": [{"type": "web", "url": "javascript:alert(1)"}]}}`,
		`{"alternative": {"references": [{"type": "ftp", "url": "https://example.com"}]}}`,
		`{"alternative": {}}`,
		`{"alternative": "call us"}`,
	} {
		require.Nil(t, ParseDecline([]byte(bad)).Alternative, bad)
	}
	require.Equal(t, &Decline{}, ParseDecline([]byte(`not json`)))
}

// TestParseDeclineLeavesOutDisguisedText: a reason or an alternative that
// could read otherwise than it is (httpx.Disguising) is left out, and the
// decline stands without it: the User and the Company's people read both.
func TestParseDeclineLeavesOutDisguisedText(t *testing.T) {
	for _, bad := range []string{`\u202e`, `\u200b`, `\u2066`, `\udb40\udc49`} {
		d := ParseDecline([]byte(`{"reason": "Only the holder ` + bad + `can.", "alternative": {"instructions": "Use the app.",
			"references": [{"type": "web", "url": "https://example.com/close"}]}}`))
		require.Empty(t, d.Reason, bad)
		require.NotNil(t, d.Alternative, bad)
		d = ParseDecline([]byte(`{"reason": "No.", "alternative": {"instructions": "Call ` + bad + `us.",
			"references": [{"type": "web", "url": "https://example.com/close"}]}}`))
		require.Equal(t, "No.", d.Reason, bad)
		require.Nil(t, d.Alternative, bad)
	}
}

func TestApprovalOptionalMembersAreKeptStorable(t *testing.T) {
	a, err := ParseApprovalJSON(json.RawMessage(`{"operation_id": "o", "revision": "r", "approver": "user",
		"input_type": "t\u0000ap", "reference": "` + strings.Repeat("é", 200) + `"}`))
	require.NoError(t, err, "optional members are never a reason to refuse")
	require.Equal(t, "tap", a.InputType)
	require.LessOrEqual(t, len(a.Reference), 256)
	require.True(t, utf8.ValidString(a.Reference))
}

func TestWithVersionLeavesTheSessionsMapAlone(t *testing.T) {
	session := map[string]string{"example.com/gift-wrap": "1"}
	got := WithVersion(session)
	require.Equal(t, map[string]string{"example.com/gift-wrap": "1", "operations": "3"}, got)
	require.Equal(t, map[string]string{"example.com/gift-wrap": "1"}, session)
	require.Equal(t, map[string]string{"operations": "3"}, WithVersion(nil))
	declared := map[string]string{"operations": "3"}
	require.Equal(t, declared, WithVersion(declared))
}
