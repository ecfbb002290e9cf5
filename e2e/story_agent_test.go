package e2e

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/agent"
)

// The demo's jacket exchange (docs/demo.md section 2).
const (
	jacketOrder = "ord_7Hk2"
	jacketItem  = "itm_4Qa"
	jacketSKU   = "stormline-insulated-m"
)

// jacketTerms are the terms the Personal Agent asks for.
func jacketTerms() map[string]any {
	return map[string]any{"order_id": jacketOrder, "item_id": jacketItem, "replacement_sku": jacketSKU}
}

// artifactsDir is where the transcripts go: $POPPYHOST_E2E_ARTIFACTS, else
// e2e/artifacts.
func artifactsDir() string {
	if d := os.Getenv("POPPYHOST_E2E_ARTIFACTS"); d != "" {
		return d
	}
	return "artifacts"
}

var unsafeName = regexp.MustCompile(`[^A-Za-z0-9._-]+`)

// compactJWT finds a compact JWS: a JSON header, base64url ("eyJ"), then
// a dot and a payload. A base64 signature that happens to hold "eyJ" (a
// Web Bot Auth Signature header) has no dot after it.
var compactJWT = regexp.MustCompile(`eyJ[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.`)

// agentPorts are the ports story agents have listened on in this run.
var agentPorts = struct {
	sync.Mutex
	used map[string]bool
}{used: map[string]bool{}}

// freshAgentListener listens on a loopback port no story agent of this run
// had. An agent's client_id is its origin, so an agent on a port reused
// from an earlier one would be the same client to the platform with other
// keys, and the platform refetches a key set for an unknown kid at most
// once a minute (agentid): a reused port is a flaky sign-in.
func freshAgentListener(t *testing.T) net.Listener {
	t.Helper()
	agentPorts.Lock()
	defer agentPorts.Unlock()
	var held []net.Listener
	defer func() {
		for _, ln := range held {
			ln.Close()
		}
	}()
	for {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		_, port, _ := net.SplitHostPort(ln.Addr().String())
		if !agentPorts.used[port] {
			agentPorts.used[port] = true
			return ln
		}
		held = append(held, ln) // kept open so the next Listen gets another
	}
}

// personalAgent starts the reference Personal Agent for one User of the
// demo; when the test ends its transcript, secrets redacted, is written to
// the artifact directory, one file per test.
func (e *storyEnv) personalAgent(t *testing.T) *agent.Agent {
	t.Helper()
	a, err := agent.New(agent.Options{
		Listener:     freshAgentListener(t),
		Name:         "e2e story agent",
		Host:         "localhost",
		TLS:          e.ca.ServerTLSConfig(),
		CAPEM:        e.ca.CertPEM(),
		HostMap:      map[string]string{storyDomain: "127.0.0.1:" + e.srv.port},
		AllowPrivate: true,
	})
	require.NoError(t, err)
	a.Recorder.Note("%s: the reference Personal Agent against the demo (%s)", t.Name(), e)
	t.Cleanup(func() {
		a.Close()
		dir := artifactsDir()
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Errorf("artifacts: %v", err)
			return
		}
		path := filepath.Join(dir, unsafeName.ReplaceAllString(t.Name(), "_")+".txt")
		if err := a.Recorder.WriteFile(path); err != nil {
			t.Errorf("transcript: %v", err)
			return
		}
		abs, _ := filepath.Abs(path)
		t.Logf("transcript: %s", abs)
		b, err := os.ReadFile(path)
		if err == nil && (strings.Contains(string(b), passwordPrefix) || compactJWT.Match(b)) {
			t.Errorf("the transcript %s shows a password or a JWT", abs)
		}
	})
	return a
}

// signedIn discovers the demo Company and signs the User in with Direct
// Sign-In in Chromium for the exchange's scopes.
func (e *storyEnv) signedIn(ctx context.Context, t *testing.T, a *agent.Agent, username, password string) *agent.Company {
	t.Helper()
	co, err := a.Discover(ctx, storyDomain)
	require.NoError(t, err)
	require.NoError(t, a.SignInDirect(ctx, co, []string{"orders:read", "orders:write"}, agent.PasswordUser(username, password)))
	require.True(t, co.SignedIn())
	return co
}

// userSays is the User approving (or not) through the agent's own
// interface, after checking that the terms are the ones asked for.
func userSays(t *testing.T, yes bool) agent.Approver {
	return agent.AsUser(func(_ context.Context, ask *agent.Ask) (bool, string, error) {
		if len(ask.Differences) > 0 {
			t.Errorf("the operation's terms differ from what was asked: %v", ask.Differences)
			return false, "", nil
		}
		require.Equal(t, "Stormline Outfitters", ask.Company)
		return yes, "tap", nil
	})
}

// shopExchange is an exchange as the shop's order shows it.
type shopExchange struct {
	ID             string `json:"id"`
	ItemID         string `json:"item_id"`
	ReplacementSKU string `json:"replacement_sku"`
	OperationID    string `json:"operation_id"`
	Approver       string `json:"approver"`
}

// jacketExchanges reads the jacket's order through the orders API and
// returns its exchanges.
func (e *storyEnv) jacketExchanges(ctx context.Context, t *testing.T, s *agent.Session) []shopExchange {
	t.Helper()
	resp, err := s.Do(ctx, agent.Request{Method: http.MethodGet, URL: e.issuer + "/api/" + storyAPI + "/orders/" + jacketOrder})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.Status, "GET the order: %s", resp.Body)
	var order struct {
		ID        string         `json:"id"`
		Exchanges []shopExchange `json:"exchanges"`
	}
	require.NoError(t, resp.Decode(&order))
	require.Equal(t, jacketOrder, order.ID)
	return order.Exchanges
}

// requireOneExchange: the shop performed the exchange exactly once, for
// the operation op, and the platform sent the approved call sent times,
// each with the same Idempotency-Key.
func (e *storyEnv) requireOneExchange(ctx context.Context, t *testing.T, s *agent.Session, op, approver string, sent int) {
	t.Helper()
	keys := e.calls.of(op)
	require.Equal(t, sent, len(keys), "approved calls of %s that reached the origin", op)
	for _, k := range keys {
		require.Equal(t, keys[0], k, "one Idempotency-Key per approved revision")
	}
	ex := e.jacketExchanges(ctx, t, s)
	require.Len(t, ex, 1, "the shop performed the exchange once: %+v", ex)
	require.Equal(t, jacketItem, ex[0].ItemID)
	require.Equal(t, jacketSKU, ex[0].ReplacementSKU)
	require.Equal(t, op, ex[0].OperationID)
	require.Equal(t, approver, ex[0].Approver)
	require.Equal(t, "performed", e.operations(t)[op], "the platform's record of %s", op)
}

// untilEvent reads the conversation until an event matches, for at most
// 30 seconds, and returns every event read, the match last.
func untilEvent(ctx context.Context, t *testing.T, conv *agent.Conversation, got []agent.Event,
	match func(agent.Event) bool) ([]agent.Event, agent.Event) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for seen := 0; ; {
		for _, ev := range got[seen:] {
			if match(ev) {
				return got, ev
			}
		}
		seen = len(got)
		require.True(t, time.Now().Before(deadline), "no such event in the conversation: %s", describe(got))
		more, err := conv.Events(ctx, 5)
		require.NoError(t, err)
		got = append(got, more...)
	}
}

// companySays matches a Company message.
func companySays(ev agent.Event) bool {
	return ev.Type == "message" && ev.Message != nil && ev.Message.Role == "company"
}

// proposes matches a Company message that proposes an operation.
func proposes(ev agent.Event) bool { return companySays(ev) && ev.Message.Operation() != nil }

// describe summarises events for a failure message.
func describe(events []agent.Event) string {
	var b strings.Builder
	for _, ev := range events {
		raw, _ := json.Marshal(ev)
		b.Write(raw)
		b.WriteByte('\n')
	}
	return b.String()
}
