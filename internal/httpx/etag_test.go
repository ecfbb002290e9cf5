package httpx

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"
)

// checkIfMatch runs Precondition.Check for a request with the If-Match
// lines given (none: no header), behind RequireIfMatch(required), and
// returns the error code, or "" when the write may go ahead.
func checkIfMatch(t *testing.T, required bool, current string, lines ...string) string {
	t.Helper()
	var code string
	h := RequireIfMatch(required)(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		err := IfMatch(r).Check(current)
		var e *Error
		if err != nil {
			require.True(t, errors.As(err, &e), "%v", err)
			code = e.Code
			require.NotEmpty(t, e.Description)
		}
	}))
	r := httptest.NewRequest(http.MethodPatch, "/", nil)
	for _, l := range lines {
		r.Header.Add("If-Match", l)
	}
	h.ServeHTTP(httptest.NewRecorder(), r)
	return code
}

func TestIfMatch(t *testing.T) {
	t.Parallel()
	tag, err := ETag(map[string]any{"a": 1})
	require.NoError(t, err)
	other, err := ETag(map[string]any{"a": 2})
	require.NoError(t, err)
	require.NotEqual(t, tag, other, "different representations, different tags")
	again, err := ETag(map[string]any{"a": 1})
	require.NoError(t, err)
	require.Equal(t, tag, again, "equal representations, equal tags")
	require.Regexp(t, `^"[A-Za-z0-9_-]+"$`, tag, "a strong tag")

	const ok, failed, required = "", CodePreconditionFailed, CodePreconditionRequired
	for _, c := range []struct {
		name     string
		required bool
		current  string
		lines    []string
		want     string
	}{
		{"the current tag", false, tag, []string{tag}, ok},
		{"another tag", false, tag, []string{other}, failed},
		{"the current tag among others", false, tag, []string{other + ", " + tag}, ok},
		{"the current tag on a second line", false, tag, []string{other, tag}, ok},
		{"the current tag, weak: compared strongly", false, tag, []string{"W/" + tag}, failed},
		{"the current tag unquoted", false, tag, []string{tag[1 : len(tag)-1]}, failed},
		{"a quoted tag holding a comma", false, tag, []string{`"x,` + tag[1:]}, failed},
		{"empty", false, tag, []string{""}, failed},
		{"star on an existing resource", false, tag, []string{"*"}, ok},
		{"star on a missing resource", false, "", []string{"*"}, failed},
		{"a tag on a missing resource", false, "", []string{tag}, failed},
		{"none, not required", false, tag, nil, ok},
		{"none, required, existing resource", true, tag, nil, required},
		{"none, required, creating", true, "", nil, ok},
		{"required and matching", true, tag, []string{tag}, ok},
		{"required and mismatching", true, tag, []string{other}, failed},
	} {
		t.Run(c.name, func(t *testing.T) {
			require.Equal(t, c.want, checkIfMatch(t, c.required, c.current, c.lines...))
		})
	}
	e := &Error{Code: CodePreconditionFailed}
	require.Equal(t, http.StatusPreconditionFailed, e.Status())
	e = &Error{Code: CodePreconditionRequired}
	require.Equal(t, http.StatusPreconditionRequired, e.Status())
}

func TestWriteJSONTagged(t *testing.T) {
	t.Parallel()
	v := map[string]any{"name": "x"}
	rec := httptest.NewRecorder()
	WriteJSONTagged(rec, http.StatusOK, v)
	tag, err := ETag(v)
	require.NoError(t, err)
	require.Equal(t, tag, rec.Header().Get("ETag"))
	plain := httptest.NewRecorder()
	WriteJSON(plain, http.StatusOK, v)
	require.Equal(t, plain.Body.String(), rec.Body.String(), "the body is WriteJSON's")
}

// TestMatchTag checks the Precondition of a version carried in a form:
// it lets through only the current tag, and an empty or malformed tag
// matches nothing, not even "*".
func TestMatchTag(t *testing.T) {
	const cur = `"abc"`
	code := func(p Precondition, current string) string {
		var e *Error
		if err := p.Check(current); errors.As(err, &e) {
			return e.Code
		}
		return ""
	}
	require.True(t, MatchTag(cur).Given())
	require.Empty(t, code(MatchTag(cur), cur))
	require.Equal(t, CodePreconditionFailed, code(MatchTag(`"old"`), cur))
	require.Equal(t, CodePreconditionFailed, code(MatchTag(""), cur))
	require.Equal(t, CodePreconditionFailed, code(MatchTag("*"), cur))
	require.Equal(t, CodePreconditionFailed, code(MatchTag("abc"), cur), "unquoted")
	require.Equal(t, CodePreconditionFailed, code(MatchTag(cur), ""), "the resource is gone")
}
