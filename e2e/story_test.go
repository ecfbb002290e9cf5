package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/agent"
	"github.com/poppyhost/poppyhost/internal/demoagent"
	"github.com/poppyhost/poppyhost/internal/verified"
)

// TestStory runs the jacket story of the demo (issue 10) against the built
// server and the built demo origin, on a fresh database, with the
// reference Personal Agent: in a conversation, through the orders API,
// the MCP tool and the website, a declined agent approval, a retry storm
// after an origin timeout, and sign-out; then the metrics the story moved.
// Each step has its own User (the shop seeds each account with the
// jacket's order) and leaves the agent's transcript in the artifact
// directory. The steps run one after another:
// the storm's stall applies to the shop's next exchange, whoever makes it.
func TestStory(t *testing.T) {
	t.Parallel()
	e := startStory(t)
	t.Logf("the demo: %s", e)
	t.Run("Conversation", e.storyConversation)
	t.Run("API", e.storyAPI)
	t.Run("MCP", e.storyMCP)
	t.Run("Website", e.storyWebsite)
	t.Run("DeclinedAgentApproval", e.storyDeclined)
	t.Run("RetryStorm", e.storyRetryStorm)
	t.Run("SignOut", e.storySignOut)
	t.Run("Metrics", e.storyMetrics)
}

func storyContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// storyConversation: a signed-out question; the Company Agent needs the
// account; Direct Sign-In; the exchange proposed in the conversation,
// approved by the User, performed once; the Company Agent says so.
func (e *storyEnv) storyConversation(t *testing.T) {
	ctx := storyContext(t)
	a := e.personalAgent(t)
	username, password := e.newUser(t, "conversation")
	co, err := a.Discover(ctx, storyDomain)
	require.NoError(t, err)
	require.Equal(t, "Stormline Outfitters", co.Name())
	s := co.NewSession()

	conv, events, err := s.StartConversation(ctx, agent.Message{
		Text:    "The jacket from my last order isn't warm enough. Can I exchange it for a warmer one?",
		Context: map[string]any{"locale": "en-US", "user_available": true},
	}, 10)
	require.NoError(t, err, "a signed-out question starts a conversation")
	require.NotEmpty(t, conv.ID)
	events, need := untilEvent(ctx, t, conv, events, func(ev agent.Event) bool { return ev.Type == "authorization" })
	require.ElementsMatch(t, []string{"orders:read", "orders:write"}, strings.Fields(need.Scope), "the authorization need")
	require.Nil(t, lastProposal(events), "nothing proposed signed out")

	require.NoError(t, a.SignInDirect(ctx, co, strings.Fields(need.Scope), agent.PasswordUser(username, password)))
	events, err = conv.Send(ctx, agent.Message{Text: "I've signed in. Please exchange it for the insulated jacket in the same size."}, 10)
	require.NoError(t, err)
	_, proposal := untilEvent(ctx, t, conv, events, proposes)
	op := proposal.Message.Operation()
	var terms map[string]any
	require.NoError(t, json.Unmarshal(op.Terms, &terms))
	require.Equal(t, jacketOrder, terms["order_id"])
	require.Equal(t, jacketSKU, terms["replacement_sku"])
	require.Equal(t, map[string]any{"amount": "70.00", "currency": "USD"}, terms["price_difference"])
	require.Empty(t, e.jacketExchanges(ctx, t, s), "nothing performed before the approval")

	res, replies, err := conv.ApproveOperation(ctx, op, jacketTerms(), userSays(t, true), 10)
	require.NoError(t, err)
	require.Equal(t, "user", res.Approval.Approver)
	require.Equal(t, 1, requestsCarrying(a, conv.ID, `"approval"`), "the approval was sent once")
	_, told := untilEvent(ctx, t, conv, replies, companySays)
	require.Equal(t, demoagent.ExchangeDone, told.Message.Text, "the Company Agent says how it went")
	e.requireOneExchange(ctx, t, s, op.OperationID, "user", 1)
}

// lastProposal is the last operation a Company message proposed, or nil.
func lastProposal(events []agent.Event) *agent.Operation {
	for i := len(events) - 1; i >= 0; i-- {
		if proposes(events[i]) {
			return events[i].Message.Operation()
		}
	}
	return nil
}

// storyAPI: 403 approval_required, the User's approval, 201; the same
// approval again gets the same answer, nothing performed again; the
// order shows the exchange.
func (e *storyEnv) storyAPI(t *testing.T) {
	ctx := storyContext(t)
	a := e.personalAgent(t)
	username, password := e.newUser(t, "api")
	co := e.signedIn(ctx, t, a, username, password)
	s := co.NewSession()
	desc := co.API("openapi")
	require.NotEmpty(t, desc, "poppy.json lists the orders API")
	base, err := co.OpenAPIBase(ctx, desc)
	require.NoError(t, err)
	require.Equal(t, e.issuer+"/api/"+storyAPI, base)

	// The Company binds tokens: the sign-in answered token_type DPoP and
	// the API calls carry proofs (spec 4.5, RFC 9449).
	require.Positive(t, countRequests(a, func(x agent.Exchange) bool {
		var tr struct {
			TokenType string `json:"token_type"`
		}
		return strings.HasSuffix(x.URL, "/oauth/token") && x.RequestHeaders.Get("DPoP") != "" &&
			json.Unmarshal([]byte(x.ResponseBody), &tr) == nil && tr.TokenType == "DPoP"
	}), "a DPoP-bound token")
	// The Company requires server nonces: the agent's first token request
	// was answered use_dpop_nonce with one, and the proofs that followed
	// carried it.
	require.Positive(t, countRequests(a, func(x agent.Exchange) bool {
		return strings.HasSuffix(x.URL, "/oauth/token") && x.Status == http.StatusBadRequest &&
			strings.Contains(x.ResponseBody, "use_dpop_nonce") && x.ResponseHeaders.Get("DPoP-Nonce") != ""
	}), "a use_dpop_nonce answer with a nonce")

	// The agent signs its requests (Web Bot Auth, spec 5.3): the origin
	// is told its verified operator in Poppy-Verified.
	list, err := s.Do(ctx, agent.Request{Method: http.MethodGet, URL: base + "/orders"})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, list.Status, "%s", list.Body)
	var last verified.Facts
	e.controlDo(t, http.MethodGet, "/last-verified", nil, &last)
	clientID, err := url.Parse(a.ClientID())
	require.NoError(t, err)
	require.Equal(t, clientID.Host, last.AgentOperator, "the verified operator reached the origin")
	require.Equal(t, s.CurrentSID(), last.SID)

	exchange := agent.Request{Method: http.MethodPost, URL: base + "/orders/" + jacketOrder + "/exchanges",
		JSON: map[string]string{"item_id": jacketItem, "replacement_sku": jacketSKU}}
	res, err := s.Call(ctx, exchange, jacketTerms(), userSays(t, true))
	require.NoError(t, err)
	require.Equal(t, 2, res.Attempts, "403 approval_required, then the approval")
	require.Zero(t, countRequests(a, func(x agent.Exchange) bool {
		return strings.Contains(x.URL, "/api/") && x.RequestHeaders.Get("Authorization") != "" && x.RequestHeaders.Get("DPoP") == ""
	}), "every signed-in API call carries a DPoP proof")
	require.NotNil(t, res.Operation)
	require.Equal(t, http.StatusCreated, res.Response.Status, "%s", res.Response.Body)
	require.Equal(t, 1, requestsWith(a, "Poppy-Approval", "/exchanges"), "the approval was sent once")
	requireFirstAnswer(t, a, "/exchanges", http.StatusForbidden, "approval_required")

	header, err := res.Approval.Header()
	require.NoError(t, err)
	again := exchange
	again.Header = http.Header{"Poppy-Approval": {header}}
	retry, err := s.Do(ctx, again)
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, retry.Status)
	require.JSONEq(t, string(res.Response.Body), string(retry.Body), "the stored answer")
	e.requireOneExchange(ctx, t, s, res.Operation.OperationID, "user", 1)
}

// storyMCP: the exchange_item tool answers with the operation; the call
// again with the approval in _meta performs it.
func (e *storyEnv) storyMCP(t *testing.T) {
	ctx := storyContext(t)
	a := e.personalAgent(t)
	username, password := e.newUser(t, "mcp")
	co := e.signedIn(ctx, t, a, username, password)
	s := co.NewSession()
	server := co.API("mcp")
	require.NotEmpty(t, server, "poppy.json lists the MCP server")
	require.NoError(t, s.MCPInitialize(ctx, server))

	result, res, err := s.CallTool(ctx, server, "exchange_item", jacketTerms(), jacketTerms(), userSays(t, true))
	require.NoError(t, err)
	require.NotNil(t, result)
	require.False(t, result.IsError, "%s", result.Text())
	require.NotNil(t, res.Operation, "the first call's result carried the operation")
	require.Equal(t, 2, res.Attempts)
	require.Equal(t, "user", res.Approval.Approver)
	require.Equal(t, 1, requestsCarrying(a, server, `"personalagentprotocol.org/approval"`), "the approval went in _meta, once")
	e.requireOneExchange(ctx, t, s, res.Operation.OperationID, "user", 1)
}

// storyWebsite: a browser joined to the Session submits the exchange
// form; the website answers with Poppy-Operation; the agent approves at
// the operations endpoint (204), the browser continues, and the exchange
// is performed; the lookup says performed.
func (e *storyEnv) storyWebsite(t *testing.T) {
	ctx := storyContext(t)
	a := e.personalAgent(t)
	username, password := e.newUser(t, "website")
	co := e.signedIn(ctx, t, a, username, password)
	s := co.NewSession()
	landing, err := s.JoinBrowser(ctx)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, landing.Status, "the joined browser lands on the orders page")

	form := co.Origin + "/orders/" + jacketOrder + "/exchange?item=" + jacketItem
	page, err := s.Browse(ctx, form)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, page.Status, "the exchange form")
	page, err = s.BrowserLoad(ctx, chromedp.Steps(
		chromedp.Click(fmt.Sprintf(`input[name="replacement_sku"][value=%q]`, jacketSKU)),
		chromedp.Click(`form button[type=submit], form button:not([type]), form input[type=submit]`),
	))
	require.NoError(t, err)
	require.Equal(t, http.StatusForbidden, page.Status, "the website performs nothing and answers 403")
	ref := s.OperationRef(page)
	require.NotEmpty(t, ref, "Poppy-Operation for this Session")
	require.Empty(t, e.jacketExchanges(ctx, t, s), "nothing performed before the approval")

	res, err := s.ApproveWebsite(ctx, ref, jacketTerms(), userSays(t, true))
	require.NoError(t, err)
	require.Equal(t, http.StatusNoContent, res.Response.Status, "%s", res.Response.Body)
	status, err := s.OperationStatus(ctx, ref)
	require.NoError(t, err)
	require.Equal(t, "approved", status)

	page, err = s.BrowserLoad(ctx, chromedp.Click(`button, input[type=submit]`))
	require.NoError(t, err, "Continue")
	require.Equal(t, http.StatusOK, page.Status, "the order page after Continue (%s)", page.URL)
	require.Contains(t, page.URL, "/orders/"+jacketOrder)
	status, err = s.OperationStatus(ctx, ref)
	require.NoError(t, err)
	require.Equal(t, "performed", status)
	e.requireOneExchange(ctx, t, s, res.Operation.OperationID, "user", 1)
}

// storyDeclined: the agent approves the exchange on the User's
// instruction ("under $100"); the shop declines agent approvals of
// exchanges that cost more: approval_declined, nothing performed, and the
// approval is not sent again.
func (e *storyEnv) storyDeclined(t *testing.T) {
	ctx := storyContext(t)
	a := e.personalAgent(t)
	username, password := e.newUser(t, "declined")
	co := e.signedIn(ctx, t, a, username, password)
	s := co.NewSession()
	exchange := agent.Request{Method: http.MethodPost, URL: e.issuer + "/api/" + storyAPI + "/orders/" + jacketOrder + "/exchanges",
		JSON: map[string]string{"item_id": jacketItem, "replacement_sku": jacketSKU}}
	res, err := s.Call(ctx, exchange, jacketTerms(), agent.AsAgent(agent.Instruction{
		Text: "approve exchanges under $100", Under: "100", Currency: "USD"}))
	var declined *agent.Declined
	require.ErrorAs(t, err, &declined)
	require.Equal(t, "agent", res.Approval.Approver)
	require.Equal(t, res.Operation.OperationID, declined.OperationID)
	require.Contains(t, declined.Reason, "account holder")
	require.Equal(t, http.StatusForbidden, res.Response.Status)
	require.Equal(t, "approval_declined", res.Response.Error())
	require.Equal(t, 1, requestsWith(a, "Poppy-Approval", "/exchanges"), "the declined approval is not sent again")

	require.Empty(t, e.jacketExchanges(ctx, t, s), "nothing performed")
	require.Len(t, e.calls.of(declined.OperationID), 1, "the origin got the approved call once, and declined it")
	require.NotEqual(t, "performed", e.operations(t)[declined.OperationID])
}

// storyRetryStorm: the shop holds the answer of the next approved
// exchange past the gateway's timeout; 50 concurrent calls with the
// approval, then 50 concurrent retries after the timeout, each get 503
// with Retry-After or the stored answer, never a failure; the settle job
// finishes it, and the shop performed it once.
func (e *storyEnv) storyRetryStorm(t *testing.T) {
	ctx := storyContext(t)
	a := e.personalAgent(t)
	username, password := e.newUser(t, "storm")
	co := e.signedIn(ctx, t, a, username, password)
	s := co.NewSession()
	exchange := agent.Request{Method: http.MethodPost, URL: e.issuer + "/api/" + storyAPI + "/orders/" + jacketOrder + "/exchanges",
		JSON: map[string]string{"item_id": jacketItem, "replacement_sku": jacketSKU}}
	first, err := s.Do(ctx, exchange)
	require.NoError(t, err)
	require.Equal(t, http.StatusForbidden, first.Status, "%s", first.Body)
	require.Equal(t, "approval_required", first.Error())
	var proposed struct {
		Operation agent.Operation `json:"operation"`
	}
	require.NoError(t, first.Decode(&proposed))
	op := proposed.Operation
	approval := &agent.Approval{OperationID: op.OperationID, Revision: op.Revision, Approver: "user",
		ApprovedAt: time.Now().Unix(), InputType: "tap"}
	header, err := approval.Header()
	require.NoError(t, err)
	approved := exchange
	approved.Header = http.Header{"Poppy-Approval": {header}}

	e.controlDo(t, http.MethodPost, "/stall-next-exchange", nil, nil)
	// The first wave races for the claim: one call reaches the origin,
	// which holds it until the gateway times out; the second wave
	// retries after that timeout, before or while the settle job runs.
	var stored string
	for wave := 1; wave <= 2; wave++ {
		started := time.Now()
		answers, errs := storm(ctx, s, approved, 50)
		performing := 0
		for i, r := range answers {
			require.NoError(t, errs[i], "wave %d, call %d", wave, i)
			switch r.Status {
			case http.StatusServiceUnavailable:
				require.NotEmpty(t, r.Header.Get("Retry-After"), "wave %d, call %d: 503 without Retry-After: %s", wave, i, r.Body)
				performing++
			case http.StatusCreated:
				if stored == "" {
					stored = string(r.Body)
				}
				require.JSONEq(t, stored, string(r.Body), "wave %d, call %d: the stored answer", wave, i)
			default:
				t.Fatalf("wave %d, call %d: %d %s (want 503 with Retry-After, or the stored answer)", wave, i, r.Status, r.Body)
			}
		}
		t.Logf("wave %d: %d of %d answers were 503 with Retry-After, in %s", wave, performing, len(answers),
			time.Since(started).Round(time.Millisecond))
	}

	// The settle job finishes the operation; the approval then gets the
	// stored answer.
	deadline := time.Now().Add(60 * time.Second)
	var done *agent.Response
	for {
		done, err = s.Do(ctx, approved)
		require.NoError(t, err)
		if done.Status != http.StatusServiceUnavailable {
			break
		}
		require.True(t, time.Now().Before(deadline), "the settle job did not settle the operation")
		time.Sleep(time.Second)
	}
	require.Equal(t, http.StatusCreated, done.Status, "%s", done.Body)
	if stored != "" {
		require.JSONEq(t, stored, string(done.Body))
	}
	// The held call and the settle job's; none of the 100 others.
	e.requireOneExchange(ctx, t, s, op.OperationID, "user", 2)
}

// storySignOut: signed in, the conversation uses the account; after
// sign-out (spec 5.5) the Session continues signed out: the conversation
// that used the account answers with a challenge for it, and a new
// signed-out conversation gets the Company Agent's authorization need.
func (e *storyEnv) storySignOut(t *testing.T) {
	ctx := storyContext(t)
	a := e.personalAgent(t)
	username, password := e.newUser(t, "signout")
	co := e.signedIn(ctx, t, a, username, password)
	s := co.NewSession()
	conv, events, err := s.StartConversation(ctx, agent.Message{Text: "Where is my order?"}, 10)
	require.NoError(t, err)
	_, told := untilEvent(ctx, t, conv, events, companySays)
	require.Equal(t, demoagent.OrderStatus, told.Message.Text, "signed in, the Company Agent reads the order")

	require.NoError(t, co.SignOut(ctx))
	require.False(t, co.SignedIn())
	_, err = conv.Send(ctx, agent.Message{Text: "Is my exchange on its way?"}, 5)
	var ce *agent.ConversationError
	require.True(t, errors.As(err, &ce), "a challenge, not %v", err)
	require.Equal(t, http.StatusUnauthorized, ce.Status, "%+v", ce)
	require.True(t, strings.HasPrefix(lastChallenge(a, conv.ID), "Bearer "), "the answer challenges for the account (section 7)")

	signedOut, events, err := s.StartConversation(ctx, agent.Message{Text: "Where is my order?"}, 10)
	require.NoError(t, err, "the Session continues signed out")
	_, need := untilEvent(ctx, t, signedOut, events, func(ev agent.Event) bool { return ev.Type == "authorization" })
	require.Contains(t, strings.Fields(need.Scope), "orders:read")
}

// storm sends the request n times at once and returns the answers.
func storm(ctx context.Context, s *agent.Session, r agent.Request, n int) ([]*agent.Response, []error) {
	answers, errs := make([]*agent.Response, n), make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			answers[i], errs[i] = s.Do(ctx, r)
		}()
	}
	wg.Wait()
	return answers, errs
}
