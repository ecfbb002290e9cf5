package e2e

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/agent"
)

// What the story tests read in the Personal Agent's transcript: the
// requests it sent and the answers it got.

// requestsWith counts the transcript's requests whose URL contains path
// and that carry the header.
func requestsWith(a *agent.Agent, header, path string) int {
	return countRequests(a, func(x agent.Exchange) bool {
		return strings.Contains(x.URL, path) && x.RequestHeaders.Get(header) != ""
	})
}

// requestsCarrying counts the transcript's requests whose URL contains
// path and whose body contains s.
func requestsCarrying(a *agent.Agent, path, s string) int {
	return countRequests(a, func(x agent.Exchange) bool {
		return strings.Contains(x.URL, path) && strings.Contains(x.RequestBody, s)
	})
}

func countRequests(a *agent.Agent, match func(agent.Exchange) bool) int {
	n := 0
	for _, x := range a.Recorder.Exchanges() {
		if x.Method != "" && match(x) {
			n++
		}
	}
	return n
}

// requireFirstAnswer checks the first answer to a request whose URL
// contains path: its status and error code.
func requireFirstAnswer(t *testing.T, a *agent.Agent, path string, status int, code string) {
	t.Helper()
	for _, x := range a.Recorder.Exchanges() {
		if x.Method == http.MethodPost && strings.Contains(x.URL, path) {
			require.Equal(t, status, x.Status, "%s", x.ResponseBody)
			require.Contains(t, x.ResponseBody, fmt.Sprintf("%q", code))
			return
		}
	}
	t.Fatalf("no request to %s in the transcript", path)
}

// lastChallenge is the WWW-Authenticate header of the transcript's last
// response to a request whose URL contains path.
func lastChallenge(a *agent.Agent, path string) string {
	ex := a.Recorder.Exchanges()
	for i := len(ex) - 1; i >= 0; i-- {
		if ex[i].Method != "" && strings.Contains(ex[i].URL, path) {
			return ex[i].ResponseHeaders.Get("WWW-Authenticate")
		}
	}
	return ""
}
