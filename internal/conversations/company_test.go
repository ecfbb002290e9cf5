package conversations_test

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/testkit/peers"
)

// The Company side of conversations: the Company API under
// /company/v1/conversations, driven over HTTPS with Company API keys,
// against conversations a test Personal Agent starts.

const (
	coSlug  = "acme"
	coRival = "rival"
)

// companySide is a rig with Company acme (an issuer with
// scopes orders:read and orders:write, an extension, a handoff message),
// Company rival, an API key for each, and a test Personal Agent.
type companySide struct {
	env      *rig
	agent    *peers.Agent
	id       int64 // acme's company ID
	key      string
	rivalKey string
	// hook receives acme's webhook deliveries when asked for.
	hook *peers.Webhook
}

// companyOptions shape newCompanySide.
type companyOptions struct {
	// webhook gives acme an agent webhook served by a test receiver.
	webhook bool
	// conversations are merged into acme's conversations settings.
	conversations map[string]any
}

func newCompanySide(t *testing.T, o companyOptions) *companySide {
	t.Helper()
	env := newRig(t)
	cs := &companySide{env: env, agent: env.StartAgent(t, "agent.test")}
	conv := map[string]any{"handoff_unavailable_message": "Nobody from the team is free right now."}
	if o.webhook {
		cs.hook = env.startWebhook(t)
		conv["agent_webhook"] = cs.hook.URL
	}
	for k, v := range o.conversations {
		conv[k] = v
	}
	env.CreateCompany(t, map[string]any{
		"slug":         coSlug,
		"organization": map[string]any{"name": "Acme", "domain": "acme.example"},
		"auth": map[string]any{"scopes": map[string]any{
			"orders:read":  "See your orders",
			"orders:write": "Change your orders",
		}},
		"extensions":    map[string]any{"acme.example/gift-wrap": map[string]any{"version": "2"}},
		"conversations": conv,
	})
	env.CreateCompany(t, map[string]any{
		"slug":         coRival,
		"organization": map[string]any{"name": "Rival", "domain": "rival.example"},
		"auth":         map[string]any{"issuer": false},
	})
	cs.key = apiKey(t, env, coSlug)
	cs.rivalKey = apiKey(t, env, coRival)
	require.NoError(t, env.Pool.QueryRow(context.Background(), `SELECT id FROM companies WHERE slug = $1`, coSlug).Scan(&cs.id))
	return cs
}

func apiKey(t *testing.T, env *rig, slug string) string {
	t.Helper()
	resp := env.Admin(t, http.MethodPost, "/admin/v1/companies/"+slug+"/api-keys", map[string]any{"name": "agent"})
	require.Equal(t, http.StatusCreated, resp.Status, "%s", resp.Body)
	return resp.JSON(t)["key"].(string)
}

// pa sends a signed Personal Agent request to acme's (or slug's)
// conversation endpoint + path, as User sub ["usr_test"].
func (cs *companySide) pa(t *testing.T, method, path string, body any, header ...string) *peers.Response {
	t.Helper()
	return cs.paAs(t, coSlug, "", method, path, body, header...)
}

func (cs *companySide) paAs(t *testing.T, slug, sub, method, path string, body any, header ...string) *peers.Response {
	t.Helper()
	var raw []byte
	if body != nil {
		var err error
		raw, err = json.Marshal(body)
		require.NoError(t, err)
	}
	req, err := http.NewRequest(method, cs.env.PublicURL("/t/"+slug+"/poppy/conversations"+path), strings.NewReader(string(raw)))
	require.NoError(t, err)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	aud := cs.env.PublicURL("/t/" + slug)
	if slug == coRival {
		aud = "https://rival.example"
	}
	cs.agent.Sign(t, req, peers.SessionClaims{Aud: aud, Sub: sub}, peers.SessionOptions{})
	return do(t, cs.env.Client, req)
}

func do(t *testing.T, client *http.Client, req *http.Request) *peers.Response {
	t.Helper()
	resp, err := client.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	var buf strings.Builder
	_, err = bufio.NewReader(resp.Body).WriteTo(&buf)
	require.NoError(t, err)
	return &peers.Response{Status: resp.StatusCode, Header: resp.Header, Body: []byte(buf.String())}
}

// paStart starts an acme conversation with a Personal Agent message and
// returns its ID.
func (cs *companySide) paStart(t *testing.T, msgID, text string) string {
	t.Helper()
	resp := cs.pa(t, http.MethodPost, "", map[string]any{"message": map[string]any{
		"id": msgID, "author": map[string]any{"type": "agent"}, "text": text,
		"context": map[string]any{"locale": "en-US", "user_available": true},
	}})
	require.Equal(t, http.StatusCreated, resp.Status, "%s", resp.Body)
	return resp.JSON(t)["conversation_id"].(string)
}

// paEvents reads a conversation's events as the Personal Agent.
func (cs *companySide) paEvents(t *testing.T, id, query string) map[string]any {
	t.Helper()
	resp := cs.pa(t, http.MethodGet, "/"+id+"/events?"+query, nil)
	require.Equal(t, http.StatusOK, resp.Status, "%s", resp.Body)
	return resp.JSON(t)
}

// api calls acme's Company API at /company/v1/conversations + path.
func (cs *companySide) api(t *testing.T, method, path string, body any) *peers.Response {
	t.Helper()
	return cs.apiAs(t, cs.key, method, path, body)
}

func (cs *companySide) apiAs(t *testing.T, key, method, path string, body any, header ...string) *peers.Response {
	t.Helper()
	if key != "" {
		header = append(header, "Authorization", "Bearer "+key)
	}
	return cs.env.Do(t, method, cs.env.PublicURL("/company/v1/conversations"+path), body, header...)
}

// requireCode checks an error answer's status and code.
func requireCode(t *testing.T, resp *peers.Response, status int, code string) {
	t.Helper()
	require.Equal(t, status, resp.Status, "%s", resp.Body)
	require.Equal(t, code, resp.JSON(t)["error"], "%s", resp.Body)
}

// eventsOf lists a read's events.
func eventsOf(rd map[string]any) []map[string]any {
	var out []map[string]any
	for _, e := range rd["events"].([]any) {
		out = append(out, e.(map[string]any))
	}
	return out
}

// typesOf lists a read's event types.
func typesOf(rd map[string]any) []string {
	var out []string
	for _, e := range eventsOf(rd) {
		out = append(out, e["type"].(string))
	}
	return out
}

func TestCompanyListAndGet(t *testing.T) {
	t.Parallel()
	cs := newCompanySide(t, companyOptions{})
	var ids []string
	for _, m := range []string{"msg_a", "msg_b", "msg_c"} {
		ids = append(ids, cs.paStart(t, m, "Hello "+m))
	}
	// Another User's and another Company's conversations.
	other := cs.paAs(t, coSlug, "usr_other", http.MethodPost, "", map[string]any{"message": map[string]any{
		"id": "msg_x", "author": map[string]any{"type": "human"}, "text": "Hi"}})
	require.Equal(t, http.StatusCreated, other.Status, "%s", other.Body)
	ids = append(ids, other.JSON(t)["conversation_id"].(string))
	rival := cs.paAs(t, coRival, "", http.MethodPost, "", map[string]any{"message": map[string]any{
		"id": "msg_r", "author": map[string]any{"type": "agent"}, "text": "Hi"}})
	require.Equal(t, http.StatusCreated, rival.Status, "%s", rival.Body)
	rivalID := rival.JSON(t)["conversation_id"].(string)

	listed := func(resp *peers.Response) ([]string, string) {
		t.Helper()
		require.Equal(t, http.StatusOK, resp.Status, "%s", resp.Body)
		body := resp.JSON(t)
		var got []string
		for _, c := range body["conversations"].([]any) {
			got = append(got, c.(map[string]any)["id"].(string))
		}
		next, _ := body["next"].(string)
		return got, next
	}
	// Newest first, only acme's, paged by before.
	all, next := listed(cs.api(t, http.MethodGet, "", nil))
	require.Equal(t, []string{ids[3], ids[2], ids[1], ids[0]}, all)
	require.Empty(t, next)
	page, next := listed(cs.api(t, http.MethodGet, "?limit=3", nil))
	require.Equal(t, all[:3], page)
	require.Equal(t, all[2], next)
	page, next = listed(cs.api(t, http.MethodGet, "?limit=3&before="+next, nil))
	require.Equal(t, all[3:], page)
	require.Empty(t, next)
	rivalAll, _ := listed(cs.apiAs(t, cs.rivalKey, http.MethodGet, "", nil))
	require.Equal(t, []string{rivalID}, rivalAll)

	// A status filter.
	require.Equal(t, http.StatusOK, cs.api(t, http.MethodPost, "/"+ids[0]+"/close", nil).Status)
	closed, _ := listed(cs.api(t, http.MethodGet, "?status=closed", nil))
	require.Equal(t, []string{ids[0]}, closed)
	open, _ := listed(cs.api(t, http.MethodGet, "?status=idle", nil))
	require.Len(t, open, 3)

	// One conversation: state, context and owner.
	resp := cs.api(t, http.MethodGet, "/"+ids[1], nil)
	require.Equal(t, http.StatusOK, resp.Status, "%s", resp.Body)
	v := resp.JSON(t)
	require.Equal(t, ids[1], v["id"])
	require.Equal(t, "idle", v["status"], "acme has no agent webhook: conversations wait for staff")
	require.Equal(t, "agent", v["responder"])
	require.Equal(t, map[string]any{"locale": "en-US", "user_available": true}, v["context"])
	require.Equal(t, map[string]any{"client_id": cs.agent.ClientID, "user_id": "usr_test", "account": ""}, v["owner"])
	require.Equal(t, "evt_2", v["cursor"])
	for _, k := range []string{"created_at", "last_activity_at"} {
		_, err := time.Parse(time.RFC3339, v[k].(string))
		require.NoError(t, err, k)
	}

	// Events, read as the Personal Agent reads them.
	resp = cs.api(t, http.MethodGet, "/"+ids[1]+"/events", nil)
	require.Equal(t, http.StatusOK, resp.Status, "%s", resp.Body)
	rd := resp.JSON(t)
	require.Equal(t, []string{"message", "state"}, typesOf(rd))
	require.Equal(t, "evt_2", rd["cursor"])
	require.Equal(t, false, rd["has_more"])
	msg := eventsOf(rd)[0]["message"].(map[string]any)
	require.Equal(t, "Hello msg_b", msg["text"])
	require.Equal(t, map[string]any{"locale": "en-US", "user_available": true}, msg["context"])
	resp = cs.api(t, http.MethodGet, "/"+ids[1]+"/events?cursor=evt_1", nil)
	require.Equal(t, []string{"state"}, typesOf(resp.JSON(t)))

	// A long-poll wakes on the Personal Agent's message.
	done := make(chan *peers.Response, 1)
	go func() { done <- cs.api(t, http.MethodGet, "/"+ids[1]+"/events?cursor=evt_2&wait=10", nil) }()
	time.Sleep(200 * time.Millisecond)
	sent := cs.pa(t, http.MethodPost, "/"+ids[1]+"/messages", map[string]any{"message": map[string]any{
		"id": "msg_b2", "author": map[string]any{"type": "agent"}, "text": "More"}})
	require.Equal(t, http.StatusAccepted, sent.Status, "%s", sent.Body)
	woke := <-done
	require.Equal(t, http.StatusOK, woke.Status)
	require.Equal(t, "message", eventsOf(woke.JSON(t))[0]["type"])

	// Errors.
	for _, tt := range []struct {
		name, key, path string
		status          int
		code            string
	}{
		{"no key", "", "", 401, "unauthorized"},
		{"bad key", "phk_nope", "", 401, "unauthorized"},
		{"limit 0", cs.key, "?limit=0", 400, "invalid_request"},
		{"limit 101", cs.key, "?limit=101", 400, "invalid_request"},
		{"unknown status", cs.key, "?status=open", 400, "invalid_request"},
		{"before unknown", cs.key, "?before=cnv_nope", 400, "invalid_request"},
		{"before of another Company", cs.key, "?before=" + rivalID, 400, "invalid_request"},
		{"get unknown", cs.key, "/cnv_nope", 404, "conversation_not_found"},
		{"get malformed", cs.key, "/bad%20id", 404, "conversation_not_found"},
		{"get another Company's", cs.key, "/" + rivalID, 404, "conversation_not_found"},
		{"events of another Company's", cs.key, "/" + rivalID + "/events", 404, "conversation_not_found"},
		{"the rival reads acme's", cs.rivalKey, "/" + ids[1], 404, "conversation_not_found"},
		{"the rival reads acme's events", cs.rivalKey, "/" + ids[1] + "/events", 404, "conversation_not_found"},
		{"bad cursor", cs.key, "/" + ids[1] + "/events?cursor=evt_99", 400, "invalid_request"},
		{"bad wait", cs.key, "/" + ids[1] + "/events?wait=-1", 400, "invalid_request"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			requireCode(t, cs.apiAs(t, tt.key, http.MethodGet, tt.path, nil), tt.status, tt.code)
		})
	}
}

func TestCompanyMessages(t *testing.T) {
	t.Parallel()
	cs := newCompanySide(t, companyOptions{})
	id := cs.paStart(t, "msg_1", "Can I return the jacket?")

	// The Company Agent answers: role company, an ID of ours, idle after.
	resp := cs.api(t, http.MethodPost, "/"+id+"/messages", map[string]any{"message": map[string]any{
		"author": map[string]any{"type": "agent", "name": "Acme Assistant"}, "text": "Yes, within 30 days.",
		"data": map[string]any{"days": 30}}, "status": "working"})
	require.Equal(t, http.StatusCreated, resp.Status, "%s", resp.Body)
	posted := resp.JSON(t)
	require.Equal(t, "evt_3", posted["event_id"])
	require.Equal(t, "working", posted["status"])
	msgID := posted["message"].(map[string]any)["id"].(string)
	require.True(t, strings.HasPrefix(msgID, "msg_"), msgID)

	rd := cs.paEvents(t, id, "cursor=evt_2")
	require.Equal(t, []string{"message", "state"}, typesOf(rd))
	got := eventsOf(rd)[0]["message"].(map[string]any)
	require.Equal(t, map[string]any{"id": msgID, "role": "company", "author": map[string]any{"type": "agent", "name": "Acme Assistant"},
		"text": "Yes, within 30 days.", "data": map[string]any{"days": float64(30)}}, got)
	require.Equal(t, map[string]any{"type": "state", "status": "working", "responder": "agent"},
		withoutMeta(eventsOf(rd)[1]))

	// Without a status it goes idle; a person's message makes the
	// responder human.
	resp = cs.api(t, http.MethodPost, "/"+id+"/messages", map[string]any{"message": map[string]any{
		"id": "msg_alex1", "author": map[string]any{"type": "human", "id": "aut_alex", "name": "Alex",
			"image": "https://cdn.acme.example/alex.png"}, "text": "Hi, Alex here."}})
	require.Equal(t, http.StatusCreated, resp.Status, "%s", resp.Body)
	require.Equal(t, "idle", resp.JSON(t)["status"])
	require.Equal(t, "human", resp.JSON(t)["responder"])
	first := resp.JSON(t)

	// The same ID and content again changes nothing; other content is a
	// conflict.
	again := cs.api(t, http.MethodPost, "/"+id+"/messages", map[string]any{"message": map[string]any{
		"id": "msg_alex1", "author": map[string]any{"type": "human", "id": "aut_alex", "name": "Alex",
			"image": "https://cdn.acme.example/alex.png"}, "text": "Hi, Alex here."}})
	require.Equal(t, http.StatusOK, again.Status, "%s", again.Body)
	require.Equal(t, first["event_id"], again.JSON(t)["event_id"])
	before := cs.api(t, http.MethodGet, "/"+id, nil).JSON(t)["cursor"]
	requireCode(t, cs.api(t, http.MethodPost, "/"+id+"/messages", map[string]any{"message": map[string]any{
		"id": "msg_alex1", "author": map[string]any{"type": "human"}, "text": "Something else"}}), 409, "message_id_conflict")
	// Text that would read otherwise than it is, to the User or a model,
	// is refused (docs/decisions.md).
	requireCode(t, cs.api(t, http.MethodPost, "/"+id+"/messages", map[string]any{"message": map[string]any{
		"author": map[string]any{"type": "agent"}, "text": "Your refund: \u202e001$"}}), 400, "invalid_request")
	require.Equal(t, before, cs.api(t, http.MethodGet, "/"+id, nil).JSON(t)["cursor"])

	// Extension content goes only to a Personal Agent that declares the
	// extension with the Company's version (spec 8.4).
	ext := map[string]any{"message": map[string]any{"author": map[string]any{"type": "agent"}, "text": "Wrapped?",
		"extensions": map[string]any{"acme.example/gift-wrap": map[string]any{"paper": "red"}}}}
	resp = cs.api(t, http.MethodPost, "/"+id+"/messages", ext)
	require.Equal(t, http.StatusCreated, resp.Status, "%s", resp.Body)
	require.Nil(t, resp.JSON(t)["message"].(map[string]any)["extensions"], "no verified facts declare it")
	setVerified(t, cs, id, 1, map[string]any{"client_id": cs.agent.ClientID, "user_id": "usr_test", "sid": "s", "agent_id": "",
		"account": "", "scopes": []string{}, "extensions": map[string]any{"acme.example/gift-wrap": "2"}})
	resp = cs.api(t, http.MethodPost, "/"+id+"/messages", ext)
	require.Equal(t, http.StatusCreated, resp.Status, "%s", resp.Body)
	require.Equal(t, map[string]any{"acme.example/gift-wrap": map[string]any{"paper": "red"}},
		resp.JSON(t)["message"].(map[string]any)["extensions"])
	setVerified(t, cs, id, 1, map[string]any{"client_id": cs.agent.ClientID, "user_id": "usr_test",
		"scopes": []string{}, "extensions": map[string]any{"acme.example/gift-wrap": "1"}})
	onlyExt := map[string]any{"message": map[string]any{"author": map[string]any{"type": "agent"},
		"extensions": map[string]any{"acme.example/gift-wrap": map[string]any{"paper": "red"}}}}
	requireCode(t, cs.api(t, http.MethodPost, "/"+id+"/messages", onlyExt), 400, "invalid_request")

	closedID := cs.paStart(t, "msg_2", "Bye")
	require.Equal(t, http.StatusOK, cs.pa(t, http.MethodPost, "/"+closedID+"/close", map[string]any{}).Status)
	rivalID := rivalConversation(t, cs)
	ok := map[string]any{"message": map[string]any{"author": map[string]any{"type": "agent"}, "text": "Hi"}}
	for _, tt := range []struct {
		name   string
		key    string
		id     string
		body   any
		status int
		code   string
	}{
		{"no message", cs.key, id, map[string]any{}, 400, "invalid_request"},
		{"empty message", cs.key, id, map[string]any{"message": map[string]any{"author": map[string]any{"type": "agent"}}}, 400, "invalid_request"},
		{"author type missing", cs.key, id, map[string]any{"message": map[string]any{"text": "x"}}, 400, "invalid_request"},
		{"author type bot", cs.key, id, map[string]any{"message": map[string]any{"author": map[string]any{"type": "bot"}, "text": "x"}}, 400, "invalid_request"},
		{"author image http", cs.key, id, map[string]any{"message": map[string]any{"author": map[string]any{"type": "agent", "image": "http://x.example/a.png"}, "text": "x"}}, 400, "invalid_request"},
		{"author name too long", cs.key, id, map[string]any{"message": map[string]any{"author": map[string]any{"type": "agent", "name": strings.Repeat("n", 201)}, "text": "x"}}, 400, "invalid_request"},
		{"author name with control", cs.key, id, map[string]any{"message": map[string]any{"author": map[string]any{"type": "agent", "name": "a\u0000b"}, "text": "x"}}, 400, "invalid_request"},
		{"context", cs.key, id, map[string]any{"message": map[string]any{"author": map[string]any{"type": "agent"}, "text": "x", "context": map[string]any{"locale": "en"}}}, 400, "invalid_request"},
		{"role", cs.key, id, map[string]any{"message": map[string]any{"role": "company", "author": map[string]any{"type": "agent"}, "text": "x"}}, 400, "invalid_request"},
		{"unknown field", cs.key, id, map[string]any{"message": map[string]any{"author": map[string]any{"type": "agent"}, "text": "x"}, "urgent": true}, 400, "invalid_request"},
		{"bad id", cs.key, id, map[string]any{"message": map[string]any{"id": "msg 1", "author": map[string]any{"type": "agent"}, "text": "x"}}, 400, "invalid_request"},
		{"data a string", cs.key, id, map[string]any{"message": map[string]any{"author": map[string]any{"type": "agent"}, "data": "x"}}, 400, "invalid_request"},
		{"extension not listed", cs.key, id, map[string]any{"message": map[string]any{"author": map[string]any{"type": "agent"}, "text": "x",
			"extensions": map[string]any{"other.example/x": map[string]any{}}}}, 400, "invalid_request"},
		{"extension not an object", cs.key, id, map[string]any{"message": map[string]any{"author": map[string]any{"type": "agent"}, "text": "x",
			"extensions": map[string]any{"acme.example/gift-wrap": 1}}}, 400, "invalid_request"},
		{"too large", cs.key, id, map[string]any{"message": map[string]any{"author": map[string]any{"type": "agent"}, "text": strings.Repeat("x", 33<<10)}}, 400, "invalid_request"},
		{"status closed", cs.key, id, map[string]any{"message": ok["message"], "status": "closed"}, 400, "invalid_request"},
		{"closed conversation", cs.key, closedID, ok, 409, "conversation_closed"},
		{"unknown conversation", cs.key, "cnv_nope", ok, 404, "conversation_not_found"},
		{"another Company's conversation", cs.key, rivalID, ok, 404, "conversation_not_found"},
		{"the rival posts to acme's", cs.rivalKey, id, ok, 404, "conversation_not_found"},
		{"no key", "", id, ok, 401, "unauthorized"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			requireCode(t, cs.apiAs(t, tt.key, http.MethodPost, "/"+tt.id+"/messages", tt.body), tt.status, tt.code)
		})
	}
	resp = cs.api(t, http.MethodPost, "/"+id+"/messages", "not json")
	requireCode(t, resp, 400, "invalid_request")
	resp = cs.apiAs(t, cs.key, http.MethodPost, "/"+id+"/messages", `{}`, "Content-Type", "text/plain")
	requireCode(t, resp, 415, "unsupported_media_type")
}

// withoutMeta drops an event's id and created_at.
func withoutMeta(e map[string]any) map[string]any {
	out := map[string]any{}
	for k, v := range e {
		if k != "id" && k != "created_at" {
			out[k] = v
		}
	}
	return out
}

// setVerified sets the verified facts of a conversation's seq-th event,
// as the Personal Agent side stores them.
func setVerified(t *testing.T, cs *companySide, id string, seq int, v map[string]any) {
	t.Helper()
	raw, err := json.Marshal(v)
	require.NoError(t, err)
	_, err = cs.env.Pool.Exec(context.Background(), `UPDATE conversation_events SET verified = $4
		WHERE company_id = $1 AND conversation_id = $2 AND seq = $3`, cs.id, id, seq, raw)
	require.NoError(t, err)
}

// rivalConversation starts a conversation at the rival Company.
func rivalConversation(t *testing.T, cs *companySide) string {
	t.Helper()
	resp := cs.paAs(t, coRival, "", http.MethodPost, "", map[string]any{"message": map[string]any{
		"id": "msg_r", "author": map[string]any{"type": "agent"}, "text": "Hi"}})
	require.Equal(t, http.StatusCreated, resp.Status, "%s", resp.Body)
	return resp.JSON(t)["conversation_id"].(string)
}

func TestCompanyDeltas(t *testing.T) {
	t.Parallel()
	cs := newCompanySide(t, companyOptions{})
	id := cs.paStart(t, "msg_1", "Tell me a story")

	// The Personal Agent streams; the Company writes a message in pieces,
	// then posts it whole with the same ID.
	req, err := http.NewRequest(http.MethodGet, cs.env.PublicURL("/t/"+coSlug+"/poppy/conversations/"+id+"/events?cursor=evt_2"), nil)
	require.NoError(t, err)
	req.Header.Set("Accept", "text/event-stream")
	cs.agent.Sign(t, req, peers.SessionClaims{Aud: cs.env.PublicURL("/t/" + coSlug)}, peers.SessionOptions{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stream, err := cs.env.Client.Do(req.WithContext(ctx))
	require.NoError(t, err)
	defer stream.Body.Close()
	require.Equal(t, http.StatusOK, stream.StatusCode)
	frames := make(chan string, 10)
	go func() {
		sc := bufio.NewScanner(stream.Body)
		frame := ""
		for sc.Scan() {
			if sc.Text() == "" {
				if !strings.HasPrefix(frame, ":") {
					frames <- frame
				}
				frame = ""
				continue
			}
			frame += sc.Text() + "\n"
		}
		close(frames)
	}()
	time.Sleep(200 * time.Millisecond) // the stream is listening
	for _, piece := range []string{"Once upon ", "a time."} {
		resp := cs.api(t, http.MethodPost, "/"+id+"/deltas", map[string]any{"message_id": "msg_story", "text": piece})
		require.Equal(t, http.StatusNoContent, resp.Status, "%s", resp.Body)
	}
	resp := cs.api(t, http.MethodPost, "/"+id+"/messages", map[string]any{"message": map[string]any{
		"id": "msg_story", "author": map[string]any{"type": "agent"}, "text": "Once upon a time."}})
	require.Equal(t, http.StatusCreated, resp.Status, "%s", resp.Body)
	next := func() string {
		select {
		case f := <-frames:
			return f
		case <-time.After(10 * time.Second):
			t.Fatal("no frame")
			return ""
		}
	}
	require.Equal(t, "event: text-delta\ndata: {\"message_id\":\"msg_story\",\"text\":\"Once upon \"}\n", next())
	require.Equal(t, "event: text-delta\ndata: {\"message_id\":\"msg_story\",\"text\":\"a time.\"}\n", next())
	require.True(t, strings.HasPrefix(next(), "id: evt_3\ndata: "), "then the whole message")

	closedID := cs.paStart(t, "msg_2", "Bye")
	require.Equal(t, http.StatusOK, cs.api(t, http.MethodPost, "/"+closedID+"/close", nil).Status)
	rivalID := rivalConversation(t, cs)
	for _, tt := range []struct {
		name, key, id string
		body          any
		status        int
		code          string
	}{
		{"bad message_id", cs.key, id, map[string]any{"message_id": "msg 1", "text": "x"}, 400, "invalid_request"},
		{"no message_id", cs.key, id, map[string]any{"text": "x"}, 400, "invalid_request"},
		{"empty text", cs.key, id, map[string]any{"message_id": "m", "text": ""}, 400, "invalid_request"},
		{"text too long", cs.key, id, map[string]any{"message_id": "m", "text": strings.Repeat("x", 6001)}, 400, "invalid_request"},
		{"unknown field", cs.key, id, map[string]any{"message_id": "m", "text": "x", "seq": 1}, 400, "invalid_request"},
		{"closed", cs.key, closedID, map[string]any{"message_id": "m", "text": "x"}, 409, "conversation_closed"},
		{"unknown", cs.key, "cnv_nope", map[string]any{"message_id": "m", "text": "x"}, 404, "conversation_not_found"},
		{"another Company's", cs.key, rivalID, map[string]any{"message_id": "m", "text": "x"}, 404, "conversation_not_found"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			requireCode(t, cs.apiAs(t, tt.key, http.MethodPost, "/"+tt.id+"/deltas", tt.body), tt.status, tt.code)
		})
	}
}

func TestCompanyStatusJoinAndHandoff(t *testing.T) {
	t.Parallel()
	cs := newCompanySide(t, companyOptions{})
	id := cs.paStart(t, "msg_1", "I need a person")
	state := func() (string, string) {
		v := cs.api(t, http.MethodGet, "/"+id, nil).JSON(t)
		return v["status"].(string), v["responder"].(string)
	}

	// Status.
	resp := cs.api(t, http.MethodPost, "/"+id+"/status", map[string]any{"status": "working"})
	require.Equal(t, http.StatusOK, resp.Status, "%s", resp.Body)
	require.Equal(t, map[string]any{"conversation_id": id, "status": "working", "responder": "agent"}, resp.JSON(t))
	require.Equal(t, http.StatusOK, cs.api(t, http.MethodPost, "/"+id+"/status", map[string]any{"status": "working"}).Status)
	rd := cs.paEvents(t, id, "cursor=evt_2")
	require.Equal(t, []string{"state"}, typesOf(rd), "the same status again adds nothing")

	// The Personal Agent asks for a person; nobody is available, with the
	// Company's message or the agent's own words.
	require.Equal(t, http.StatusAccepted, cs.pa(t, http.MethodPost, "/"+id+"/handoff", map[string]any{}).Status)
	resp = cs.api(t, http.MethodPost, "/"+id+"/handoff-unavailable", nil)
	require.Equal(t, http.StatusOK, resp.Status, "%s", resp.Body)
	require.Equal(t, "idle", resp.JSON(t)["status"])
	require.Equal(t, "agent", resp.JSON(t)["responder"])
	rd = cs.paEvents(t, id, "cursor=evt_4")
	require.Equal(t, []string{"message", "state"}, typesOf(rd))
	msg := eventsOf(rd)[0]["message"].(map[string]any)
	require.Equal(t, "Nobody from the team is free right now.", msg["text"])
	require.Equal(t, map[string]any{"type": "agent"}, msg["author"])
	require.Equal(t, http.StatusAccepted, cs.pa(t, http.MethodPost, "/"+id+"/handoff", map[string]any{}).Status)
	resp = cs.api(t, http.MethodPost, "/"+id+"/handoff-unavailable", map[string]any{"text": "Everyone is at lunch."})
	require.Equal(t, http.StatusOK, resp.Status, "%s", resp.Body)
	require.Equal(t, "Everyone is at lunch.", resp.JSON(t)["message"].(map[string]any)["text"])
	requireCode(t, cs.api(t, http.MethodPost, "/"+id+"/handoff-unavailable", nil), 409, "conflict")

	// The Company Agent hands off on its own (spec 8.9), and a person
	// joins: first the state, then their words.
	require.Equal(t, http.StatusOK, cs.api(t, http.MethodPost, "/"+id+"/status", map[string]any{"status": "queued"}).Status)
	st, rs := state()
	require.Equal(t, []string{"queued", "agent"}, []string{st, rs})
	cursor := cs.api(t, http.MethodGet, "/"+id, nil).JSON(t)["cursor"].(string)
	resp = cs.api(t, http.MethodPost, "/"+id+"/join", map[string]any{
		"author": map[string]any{"id": "aut_alex", "name": "Alex"}, "text": "Alex here, how can I help?"})
	require.Equal(t, http.StatusOK, resp.Status, "%s", resp.Body)
	rd = cs.paEvents(t, id, "cursor="+cursor)
	require.Equal(t, []string{"state", "message"}, typesOf(rd))
	require.Equal(t, map[string]any{"type": "state", "status": "idle", "responder": "human"}, withoutMeta(eventsOf(rd)[0]))
	require.Equal(t, map[string]any{"type": "human", "id": "aut_alex", "name": "Alex"}, eventsOf(rd)[1]["message"].(map[string]any)["author"])
	// Joining again, without a body, changes nothing.
	resp = cs.api(t, http.MethodPost, "/"+id+"/join", nil)
	require.Equal(t, http.StatusOK, resp.Status, "%s", resp.Body)
	require.Len(t, eventsOf(cs.paEvents(t, id, "cursor="+cursor)), 2)
	// The Personal Agent's handoff changes nothing while a person is there.
	require.Equal(t, http.StatusAccepted, cs.pa(t, http.MethodPost, "/"+id+"/handoff", map[string]any{}).Status)
	st, rs = state()
	require.Equal(t, []string{"idle", "human"}, []string{st, rs})

	closedID := cs.paStart(t, "msg_2", "Bye")
	require.Equal(t, http.StatusOK, cs.api(t, http.MethodPost, "/"+closedID+"/close", nil).Status)
	rivalID := rivalConversation(t, cs)
	for _, tt := range []struct {
		name, key, id, path string
		body                any
		status              int
		code                string
	}{
		{"status unknown", cs.key, id, "/status", map[string]any{"status": "busy"}, 400, "invalid_request"},
		{"status closed", cs.key, id, "/status", map[string]any{"status": "closed"}, 400, "invalid_request"},
		{"status missing", cs.key, id, "/status", map[string]any{}, 400, "invalid_request"},
		{"status of a closed conversation", cs.key, closedID, "/status", map[string]any{"status": "idle"}, 409, "conversation_closed"},
		{"status of another Company's", cs.key, rivalID, "/status", map[string]any{"status": "idle"}, 404, "conversation_not_found"},
		{"the rival sets acme's status", cs.rivalKey, id, "/status", map[string]any{"status": "idle"}, 404, "conversation_not_found"},
		{"join as an agent", cs.key, id, "/join", map[string]any{"author": map[string]any{"type": "agent"}}, 400, "invalid_request"},
		{"join with empty text", cs.key, id, "/join", map[string]any{"text": ""}, 400, "invalid_request"},
		{"join with a bad image", cs.key, id, "/join", map[string]any{"author": map[string]any{"image": "ftp://x"}}, 400, "invalid_request"},
		{"join a closed conversation", cs.key, closedID, "/join", nil, 409, "conversation_closed"},
		{"join another Company's", cs.key, rivalID, "/join", nil, 404, "conversation_not_found"},
		{"handoff-unavailable of a closed one", cs.key, closedID, "/handoff-unavailable", nil, 409, "conversation_closed"},
		{"handoff-unavailable text too long", cs.key, id, "/handoff-unavailable", map[string]any{"text": strings.Repeat("x", 1001)}, 400, "invalid_request"},
		{"handoff-unavailable of another Company's", cs.key, rivalID, "/handoff-unavailable", nil, 404, "conversation_not_found"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			requireCode(t, cs.apiAs(t, tt.key, http.MethodPost, "/"+tt.id+tt.path, tt.body), tt.status, tt.code)
		})
	}
}

func TestCompanyUserRequestedAndAuthorization(t *testing.T) {
	t.Parallel()
	cs := newCompanySide(t, companyOptions{})
	id := cs.paStart(t, "msg_1", "Exchange the jacket")

	// The Company asks for the User; the Personal Agent accepts with a
	// Direct Conversation, where the Company cannot ask again.
	resp := cs.api(t, http.MethodPost, "/"+id+"/user-requested", map[string]any{"reason": "A specialist needs to confirm the exchange."})
	require.Equal(t, http.StatusCreated, resp.Status, "%s", resp.Body)
	require.Equal(t, map[string]any{"conversation_id": id, "event_id": "evt_3", "status": "idle", "responder": "agent"}, resp.JSON(t))
	rd := cs.paEvents(t, id, "cursor=evt_2")
	require.Equal(t, map[string]any{"type": "user_requested", "reason": "A specialist needs to confirm the exchange."},
		withoutMeta(eventsOf(rd)[0]))
	direct := cs.pa(t, http.MethodPost, "", map[string]any{"parent_conversation_id": id, "user_requested_event_id": "evt_3"})
	require.Equal(t, http.StatusCreated, direct.Status, "%s", direct.Body)
	directID := direct.JSON(t)["conversation_id"].(string)
	requireCode(t, cs.api(t, http.MethodPost, "/"+directID+"/user-requested", map[string]any{"reason": "again"}), 400, "invalid_request")
	v := cs.api(t, http.MethodGet, "/"+directID, nil).JSON(t)
	require.Equal(t, id, v["parent_conversation_id"])
	require.Equal(t, "evt_3", v["user_requested_event_id"])
	require.Equal(t, directID, cs.api(t, http.MethodGet, "/"+id, nil).JSON(t)["direct_conversation_id"])

	// The Company Agent needs the account (spec 8.11).
	resp = cs.api(t, http.MethodPost, "/"+id+"/authorization", map[string]any{"scope": "orders:read  orders:write"})
	require.Equal(t, http.StatusCreated, resp.Status, "%s", resp.Body)
	evt := resp.JSON(t)["event_id"].(string)
	rd = cs.paEvents(t, id, "cursor=evt_4")
	require.Equal(t, evt, eventsOf(rd)[0]["id"])
	require.Equal(t, map[string]any{"type": "authorization", "error": "insufficient_scope", "scope": "orders:read orders:write"},
		withoutMeta(eventsOf(rd)[0]))

	closedID := cs.paStart(t, "msg_2", "Bye")
	require.Equal(t, http.StatusOK, cs.api(t, http.MethodPost, "/"+closedID+"/close", nil).Status)
	rivalID := rivalConversation(t, cs)
	for _, tt := range []struct {
		name, key, id, path string
		body                any
		status              int
		code                string
	}{
		{"reason missing", cs.key, id, "/user-requested", map[string]any{}, 400, "invalid_request"},
		{"reason blank", cs.key, id, "/user-requested", map[string]any{"reason": "  "}, 400, "invalid_request"},
		{"reason too long", cs.key, id, "/user-requested", map[string]any{"reason": strings.Repeat("r", 1001)}, 400, "invalid_request"},
		{"reason with control", cs.key, id, "/user-requested", map[string]any{"reason": "a\u0007"}, 400, "invalid_request"},
		{"user-requested closed", cs.key, closedID, "/user-requested", map[string]any{"reason": "r"}, 409, "conversation_closed"},
		{"user-requested another Company's", cs.key, rivalID, "/user-requested", map[string]any{"reason": "r"}, 404, "conversation_not_found"},
		{"scope missing", cs.key, id, "/authorization", map[string]any{}, 400, "invalid_request"},
		{"scope unknown", cs.key, id, "/authorization", map[string]any{"scope": "orders:read admin"}, 400, "invalid_request"},
		{"scope twice", cs.key, id, "/authorization", map[string]any{"scope": "orders:read orders:read"}, 400, "invalid_request"},
		{"authorization closed", cs.key, closedID, "/authorization", map[string]any{"scope": "orders:read"}, 409, "conversation_closed"},
		{"authorization another Company's", cs.key, rivalID, "/authorization", map[string]any{"scope": "orders:read"}, 404, "conversation_not_found"},
		{"authorization without an issuer", cs.rivalKey, rivalID, "/authorization", map[string]any{"scope": "orders:read"}, 400, "invalid_request"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			requireCode(t, cs.apiAs(t, tt.key, http.MethodPost, "/"+tt.id+tt.path, tt.body), tt.status, tt.code)
		})
	}
}

func TestCompanyClose(t *testing.T) {
	t.Parallel()
	cs := newCompanySide(t, companyOptions{})
	id := cs.paStart(t, "msg_1", "Hello")
	require.Equal(t, http.StatusCreated, cs.api(t, http.MethodPost, "/"+id+"/user-requested", map[string]any{"reason": "r"}).Status)
	direct := cs.pa(t, http.MethodPost, "", map[string]any{"parent_conversation_id": id, "user_requested_event_id": "evt_3"})
	require.Equal(t, http.StatusCreated, direct.Status, "%s", direct.Body)
	directID := direct.JSON(t)["conversation_id"].(string)

	// Closing the parent closes its Direct Conversation (spec 8.10).
	resp := cs.api(t, http.MethodPost, "/"+id+"/close", map[string]any{})
	require.Equal(t, http.StatusOK, resp.Status, "%s", resp.Body)
	require.Equal(t, map[string]any{"conversation_id": id, "status": "closed", "responder": "agent"}, resp.JSON(t))
	require.Equal(t, "closed", cs.api(t, http.MethodGet, "/"+directID, nil).JSON(t)["status"])
	rd := cs.paEvents(t, id, "cursor=evt_4")
	require.Equal(t, []string{"direct_closed", "state"}, typesOf(rd))
	// Again: the same answer, nothing added.
	resp = cs.api(t, http.MethodPost, "/"+id+"/close", nil)
	require.Equal(t, http.StatusOK, resp.Status)
	require.Len(t, eventsOf(cs.paEvents(t, id, "cursor=evt_4")), 2)
	// The Personal Agent can no longer send.
	sent := cs.pa(t, http.MethodPost, "/"+id+"/messages", map[string]any{"message": map[string]any{
		"id": "msg_2", "author": map[string]any{"type": "agent"}, "text": "Hello?"}})
	requireCode(t, sent, 409, "conversation_closed")

	rivalID := rivalConversation(t, cs)
	requireCode(t, cs.api(t, http.MethodPost, "/"+rivalID+"/close", nil), 404, "conversation_not_found")
	requireCode(t, cs.apiAs(t, cs.rivalKey, http.MethodPost, "/"+id+"/close", nil), 404, "conversation_not_found")
	requireCode(t, cs.api(t, http.MethodPost, "/cnv_nope/close", nil), 404, "conversation_not_found")
	requireCode(t, cs.api(t, http.MethodPost, "/"+rivalID+"/close", map[string]any{"now": true}), 400, "invalid_request")
	rivalView := cs.apiAs(t, cs.rivalKey, http.MethodGet, "/"+rivalID, nil)
	require.Equal(t, "idle", rivalView.JSON(t)["status"], "the rival's conversation is untouched")
}

func TestCompanyWebhookSecret(t *testing.T) {
	t.Parallel()
	cs := newCompanySide(t, companyOptions{})
	resp := cs.api(t, http.MethodPost, "/webhook-secret", nil)
	require.Equal(t, http.StatusCreated, resp.Status, "%s", resp.Body)
	require.Equal(t, "no-store", resp.Header.Get("Cache-Control"))
	first := resp.JSON(t)["secret"].(string)
	require.Len(t, decodeSecret(t, first), 32)
	second := cs.api(t, http.MethodPost, "/webhook-secret", map[string]any{}).JSON(t)["secret"].(string)
	require.NotEqual(t, first, second)
	var n int
	require.NoError(t, cs.env.Pool.QueryRow(context.Background(), `SELECT count(*) FROM conversation_webhook_secrets`).Scan(&n))
	require.Equal(t, 1, n, "one row per Company, the rival has none")
	requireCode(t, cs.api(t, http.MethodPost, "/webhook-secret", map[string]any{"length": 64}), 400, "invalid_request")
	requireCode(t, cs.apiAs(t, "", http.MethodPost, "/webhook-secret", nil), 401, "unauthorized")
}
