package loadgen

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"
)

// Kind is one kind of request in the mix.
type Kind string

// The kinds of the mix.
const (
	// Discovery fetches poppy.json on the Company's domain.
	Discovery Kind = "discovery"
	// SignedOut calls a gateway operation that needs no token, with a
	// Session JWT.
	SignedOut Kind = "api_signed_out"
	// SignedIn calls a gateway operation that needs a scope, with an
	// access token and a Session JWT bound to it.
	SignedIn Kind = "api_signed_in"
	// MCP calls a tool through the hosted MCP server, signed out.
	MCP Kind = "mcp_call"
	// Message sends a conversation message that a reader is waiting for.
	Message Kind = "conversation_message"
	// Refresh exchanges a refresh token at the token endpoint.
	Refresh Kind = "token_refresh"
)

// Kinds are the kinds in report order.
var Kinds = []Kind{Discovery, SignedOut, SignedIn, MCP, Message, Refresh}

// DefaultMix is each kind's share of the rate.
var DefaultMix = map[Kind]float64{Discovery: 0.10, SignedOut: 0.25, SignedIn: 0.35, MCP: 0.15, Message: 0.10, Refresh: 0.05}

// maker makes one kind's next target, signing it now.
type maker func(t *vegeta.Target) error

// conversation is a conversation of the load with its User.
type conversation struct {
	id   string
	user *user
}

// pools are what the makers draw from, each used in turn.
type pools struct {
	signedOut []*user
	signedIn  []signedIn
	convs     []*conversation
	refresh   chan string // refresh tokens not yet used
	// refreshing are the refresh tokens sent and not yet answered, by
	// the id their request's URL fragment carries (never sent on the
	// wire; vegeta's result keeps the URL): a refresh refused before it
	// was used (429, 503) gives its token back (sentRefresh).
	refreshing sync.Map
	refreshes  atomic.Uint64
	n          atomic.Uint64
	sent       sentTimes
}

// sentRefresh returns the refresh token the refresh answered by r sent,
// and forgets it; "" when there is none.
func (p *pools) sentRefresh(r *vegeta.Result) string {
	_, id, ok := strings.Cut(r.URL, "#")
	if !ok {
		return ""
	}
	rt, _ := p.refreshing.LoadAndDelete(id)
	s, _ := rt.(string)
	return s
}

// signedIn is a signed-in User's Session and access token.
type signedIn struct {
	user  *user
	token string
}

func (p *pools) next(n int) int { return int(p.n.Add(1) % uint64(n)) }

// makers returns the target maker of each kind.
func (e *env) makers(p *pools) map[Kind]maker {
	signed := func(u *user, method, target, token string, body []byte, h http.Header) (*vegeta.Target, error) {
		htu, _, _ := strings.Cut(target, "?")
		jwt, err := u.sessionJWT(method, htu, token)
		if err != nil {
			return nil, err
		}
		if h == nil {
			h = http.Header{}
		}
		h.Set("Poppy-Session", jwt)
		h.Set("Poppy-Version", "1.0")
		if token != "" {
			h.Set("Authorization", "Bearer "+token)
		}
		return &vegeta.Target{Method: method, URL: target, Body: body, Header: h}, nil
	}
	set := func(t *vegeta.Target, made *vegeta.Target, err error) error {
		if err == nil {
			*t = *made
		}
		return err
	}
	return map[Kind]maker{
		Discovery: func(t *vegeta.Target) error {
			*t = vegeta.Target{Method: http.MethodGet, URL: "https://" + domain + "/.well-known/poppy.json"}
			return nil
		},
		SignedOut: func(t *vegeta.Target) error {
			u := p.signedOut[p.next(len(p.signedOut))]
			made, err := signed(u, http.MethodGet, issuer+"/api/"+apiName+"/products?q=jacket", "", nil, nil)
			return set(t, made, err)
		},
		SignedIn: func(t *vegeta.Target) error {
			s := p.signedIn[p.next(len(p.signedIn))]
			made, err := signed(s.user, http.MethodGet, issuer+"/api/"+apiName+"/orders/ord_"+strconv.Itoa(int(p.n.Load()%1000)), s.token, nil, nil)
			return set(t, made, err)
		},
		MCP: func(t *vegeta.Target) error {
			u := p.signedOut[p.next(len(p.signedOut))]
			body := []byte(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"` + toolName +
				`","arguments":{"query":"jacket"}}}`)
			h := http.Header{"Content-Type": {"application/json"}, "Accept": {"application/json, text/event-stream"},
				"Mcp-Protocol-Version": {"2025-06-18"}}
			made, err := signed(u, http.MethodPost, issuer+"/mcp", "", body, h)
			return set(t, made, err)
		},
		Message: func(t *vegeta.Target) error {
			c := p.convs[p.next(len(p.convs))]
			id := "m" + randomID(9)
			body, err := json.Marshal(map[string]any{"message": map[string]any{"id": id,
				"author": map[string]string{"type": "human"}, "text": "Where is my order?"}})
			if err != nil {
				return err
			}
			made, err := signed(c.user, http.MethodPost, issuer+"/poppy/conversations/"+c.id+"/messages", "", body,
				http.Header{"Content-Type": {"application/json"}, messageHeader: {id}})
			return set(t, made, err)
		},
		Refresh: func(t *vegeta.Target) error {
			// The wait counts as latency when every chain is in flight.
			var rt string
			select {
			case rt = <-p.refresh:
			case <-time.After(10 * time.Second):
				return errors.New(errNoChain + " for 10 s")
			}
			form, err := e.tokenForm(url.Values{"grant_type": {"refresh_token"}, "refresh_token": {rt}})
			if err != nil {
				return err
			}
			id := strconv.FormatUint(p.refreshes.Add(1), 36)
			p.refreshing.Store(id, rt)
			*t = vegeta.Target{Method: http.MethodPost, URL: issuer + "/oauth/token#" + id, Body: []byte(form.Encode()),
				Header: http.Header{"Content-Type": {"application/x-www-form-urlencoded"}}}
			return nil
		},
	}
}

// errNoChain starts the error of a refresh that found no refresh token
// free: every chain was in flight (Options.Chains is too small for the
// rate and latency), a limit of the generator, not of the server.
const errNoChain = "no refresh token came back"

// messageHeader carries a message's ID on its request, so the result can
// be matched with the reader that gets it; the platform ignores it.
const messageHeader = "X-Loadgen-Message"

// presign runs next ahead of the attack: a producer keeps lead's worth of
// signed targets (at least 4) ready, so signing is not on the request's
// path yet no Session JWT is older than a few seconds when sent.
func presign(ctx context.Context, next maker, rate float64, lead float64) vegeta.Targeter {
	ready := make(chan signedTarget, int(max(rate*lead, 4)))
	go func() {
		defer close(ready)
		for {
			var t vegeta.Target
			if err := next(&t); err != nil {
				ready <- signedTarget{err: err}
				return
			}
			select {
			case ready <- signedTarget{t: t}:
			case <-ctx.Done():
				return
			}
		}
	}()
	return func(t *vegeta.Target) error {
		st, ok := <-ready
		if !ok {
			return vegeta.ErrNoTargets
		}
		if st.err != nil {
			return st.err
		}
		*t = st.t
		return nil
	}
}

type signedTarget struct {
	t   vegeta.Target
	err error
}

// refreshed reads a refresh answer: a success must carry a new refresh
// token, which goes back to the pool.
func refreshed(p *pools, body []byte) error {
	var g grant
	if err := json.Unmarshal(body, &g); err != nil || g.AccessToken == "" || g.RefreshToken == "" {
		return fmt.Errorf("no tokens in the answer")
	}
	p.refresh <- g.RefreshToken
	return nil
}

// mcpFailed reports whether an MCP answer is a JSON-RPC error or a tool
// error.
func mcpFailed(body []byte) bool {
	var rpc struct {
		Error  json.RawMessage `json:"error"`
		Result *struct {
			IsError bool `json:"isError"`
		} `json:"result"`
	}
	if err := json.Unmarshal(body, &rpc); err != nil {
		return true
	}
	return rpc.Error != nil || rpc.Result == nil || rpc.Result.IsError || !bytes.Contains(body, []byte("ord_1"))
}
