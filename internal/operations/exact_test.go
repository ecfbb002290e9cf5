package operations_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/operations"
)

// TestSameJSON: documents compare by exact meaning. Numbers that one
// float64 would merge stay apart; member order, spacing and the spelling
// of a number do not count; a member named twice is malformed.
func TestSameJSON(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		a, b string
		same bool
	}{
		{`{"amount": 9007199254740993}`, `{"amount": 9007199254740992}`, false},
		{`{"amount": 9007199254740993}`, `{"amount":9007199254740993.0}`, true},
		{`{"a": 1, "b": [1, 2]}`, `{"b": [1, 2], "a": 1}`, true},
		{`{"b": [1, 2]}`, `{"b": [2, 1]}`, false},
		{`[0.1]`, `[1e-1]`, true},
		{`[100]`, `[1E2]`, true},
		{`[-0]`, `[0]`, true},
		{`[0.30000000000000004]`, `[0.3]`, false},
		{`{"x": "\u00e9"}`, `{"x": "é"}`, true},
		{`{"x": null}`, `{}`, false},
		{`{"x": true}`, `{"x": "true"}`, false},
		{`{"a": 1, "a": 2}`, `{"a": 2}`, false},
		{`{"a": 1, "a": 2}`, `{"a": 1, "a": 2}`, false},
		{`{"a": 1}`, `{"a": 1} x`, false},
	} {
		require.Equal(t, c.same, operations.SameJSON([]byte(c.a), []byte(c.b)), "%s ~ %s", c.a, c.b)
		require.Equal(t, c.same, operations.SameJSON([]byte(c.b), []byte(c.a)), "%s ~ %s", c.b, c.a)
	}
	_, err := operations.Canonical([]byte(`{"t": {"a": 1, "a": 1}}`))
	require.ErrorIs(t, err, operations.ErrDuplicateMember)
	_, err = operations.Canonical([]byte("{\"a\": \"\xff\"}"))
	require.ErrorIs(t, err, operations.ErrNotJSON)
	deep := make([]byte, 0, 200)
	for range 100 {
		deep = append(deep, '[')
	}
	_, err = operations.Canonical(deep)
	require.ErrorIs(t, err, operations.ErrNotJSON)
}

// TestProposalRefusesDuplicateMembers: terms that name a member twice are
// ambiguous, and PostgreSQL's jsonb would keep only the last: refused.
func TestProposalRefusesDuplicateMembers(t *testing.T) {
	t.Parallel()
	_, err := operations.ParseProposal([]byte(`{"action_key": "k", "terms": {"amount": 1, "amount": 100}}`))
	require.ErrorIs(t, err, operations.ErrProposal)
	_, err = operations.ParseProposal([]byte(`{"action_key": "k", "action_key": "j", "terms": {}}`))
	require.ErrorIs(t, err, operations.ErrProposal)
	p, err := operations.ParseProposal([]byte(`{"action_key": "k", "terms": {"amount": 9007199254740993}}`))
	require.NoError(t, err)
	require.JSONEq(t, `{"amount": 9007199254740993}`, string(p.Terms))
}

// TestClassify: what an origin's answer to an approved request means
// (docs/operations-extension.md section 5, "What an answer means").
func TestClassify(t *testing.T) {
	t.Parallel()
	for status, want := range map[int]operations.Class{
		200: operations.ClassPerformed, 201: operations.ClassPerformed, 204: operations.ClassPerformed,
		303: operations.ClassPerformed, 400: operations.ClassPerformed, 404: operations.ClassPerformed,
		422: operations.ClassPerformed,
		408: operations.ClassRetry, 425: operations.ClassRetry, 429: operations.ClassRetry,
		409: operations.ClassUnknown, 500: operations.ClassUnknown, 502: operations.ClassUnknown,
		503: operations.ClassUnknown, 504: operations.ClassUnknown, 101: operations.ClassUnknown,
	} {
		require.Equal(t, want, operations.Classify(&operations.Response{Status: status}), "status %d", status)
	}
	for _, status := range []int{200, 403, 409, 500} {
		require.Equal(t, operations.ClassNewTerms, operations.Classify(&operations.Response{Status: status,
			ContentType: "application/poppy-proposal+json; charset=utf-8"}))
		require.Equal(t, operations.ClassDeclined, operations.Classify(&operations.Response{Status: status,
			ContentType: operations.DeclineType}))
	}
}
