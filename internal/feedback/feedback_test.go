package feedback_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/testkit/peers"
)

// bundle is the feedback handler served on its own database with
// Companies shop (and, when asked, mall) and one test Personal Agent.
type bundle struct {
	env   *env
	agent *peers.Agent
}

func setup(t *testing.T, slugs ...string) *bundle {
	t.Helper()
	if len(slugs) == 0 {
		slugs = []string{"shop"}
	}
	env := newEnv(t)
	for _, slug := range slugs {
		env.CreateCompany(t, company(slug))
	}
	return &bundle{env: env, agent: env.StartAgent(t)}
}

// company is the admin API body of a Company with feedback on and two
// configured alternatives.
func company(slug string) map[string]any {
	return map[string]any{
		"slug":         slug,
		"organization": map[string]any{"name": slug, "domain": slug + ".example"},
		"apis": []any{map[string]any{
			"type": "openapi", "url": "https://api." + slug + ".example/openapi.json", "description": "Orders",
		}},
		"feedback": map[string]any{
			"enabled": true,
			"alternatives": []any{
				map[string]any{"task": "Pay with a gift card", "alternative": giftCard(slug)},
				map[string]any{"task": "Close an account", "alternative": map[string]any{
					"instructions": "Accounts are closed by phone.",
				}},
			},
		},
	}
}

// giftCard is the 9.2 example alternative on slug's domains.
func giftCard(slug string) map[string]any {
	return map[string]any{
		"instructions": "Gift cards are applied with the payment API, before the order is placed.",
		"references": []any{
			map[string]any{"type": "openapi", "url": "https://api." + slug + ".example/openapi.json", "operation_id": "applyGiftCard"},
			map[string]any{"type": "web", "url": "https://" + slug + ".example/checkout"},
		},
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	raw, err := json.Marshal(v)
	require.NoError(t, err)
	return raw
}

// reportOptions shape a feedback request. Zero values send a valid,
// signed application/json request to the Company it is sent to.
type reportOptions struct {
	// ContentType replaces application/json; "-" sends none.
	ContentType string
	// Unsigned leaves out the Session header.
	Unsigned bool
	// Claims of the Session JWT; Aud defaults to the Company's identifier.
	Claims peers.SessionClaims
}

// report POSTs body to slug's feedback endpoint: a string or []byte as is,
// anything else as JSON.
func (b *bundle) report(t *testing.T, slug string, body any, o reportOptions) *peers.Response {
	t.Helper()
	var raw []byte
	switch v := body.(type) {
	case string:
		raw = []byte(v)
	case []byte:
		raw = v
	default:
		raw = mustJSON(t, v)
	}
	req, err := http.NewRequest(http.MethodPost, b.env.PublicURL("/t/"+slug+"/poppy/feedback"), bytes.NewReader(raw))
	require.NoError(t, err)
	switch o.ContentType {
	case "":
		req.Header.Set("Content-Type", "application/json")
	case "-":
	default:
		req.Header.Set("Content-Type", o.ContentType)
	}
	if !o.Unsigned {
		if o.Claims.Aud == "" {
			o.Claims.Aud = b.env.PublicURL("/t/" + slug)
		}
		b.agent.Sign(t, req, o.Claims, peers.SessionOptions{})
	}
	resp, err := b.env.Client.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	var out bytes.Buffer
	_, err = out.ReadFrom(resp.Body)
	require.NoError(t, err)
	return &peers.Response{Status: resp.StatusCode, Header: resp.Header, Body: out.Bytes()}
}

// stored is a feedback row as the database holds it.
type stored struct {
	ClientID, UserID, AgentID, SID, Task, Description string
	Answered                                          bool
}

// rows returns slug's stored reports, oldest first.
func (b *bundle) rows(t *testing.T, slug string) []stored {
	t.Helper()
	rs, err := b.env.Pool.Query(context.Background(), `SELECT f.client_id, f.user_id, f.agent_id, f.sid, f.task, f.description, f.answered
		FROM feedback f JOIN companies c ON c.id = f.company_id WHERE c.slug = $1 ORDER BY f.id`, slug)
	require.NoError(t, err)
	defer rs.Close()
	var out []stored
	for rs.Next() {
		var s stored
		require.NoError(t, rs.Scan(&s.ClientID, &s.UserID, &s.AgentID, &s.SID, &s.Task, &s.Description, &s.Answered))
		out = append(out, s)
	}
	require.NoError(t, rs.Err())
	return out
}

// apiError is the JSON error body.
type apiError struct {
	Error       string `json:"error"`
	Description string `json:"error_description"`
	Fields      []struct {
		Field   string `json:"field"`
		Message string `json:"message"`
	} `json:"fields"`
}

func requireError(t *testing.T, resp *peers.Response, status int, code string) apiError {
	t.Helper()
	require.Equal(t, status, resp.Status, "body: %s", resp.Body)
	require.Equal(t, "application/json", resp.Header.Get("Content-Type"))
	var e apiError
	require.NoError(t, json.Unmarshal(resp.Body, &e), "body: %s", resp.Body)
	require.Equal(t, code, e.Error, "body: %s", resp.Body)
	require.NotEmpty(t, e.Description, "body: %s", resp.Body)
	return e
}

// valid is a report of a task shop and mall have an alternative for;
// valid2 one they have none for.
var (
	valid = map[string]any{
		"task":        "Pay with a gift card",
		"description": "The User wanted to pay for a new order with a gift card. No interface can apply one.",
	}
	valid2 = map[string]any{"task": "Pay in instalments", "description": "No interface offers instalments."}
)

func TestFeedbackAccepted(t *testing.T) {
	t.Parallel()
	b := setup(t)
	tests := []struct {
		name string
		body any
		o    reportOptions
	}{
		{name: "no alternative", body: map[string]any{"task": "Pay in instalments", "description": "No interface offers instalments."}},
		{name: "close but not the same task", body: map[string]any{"task": "Pay with gift cards", "description": "x"}},
		// Spec 3.3: unknown members are ignored, whatever their type.
		{name: "unknown members", body: map[string]any{
			"task": "Pay in instalments", "description": "x",
			"where": "api", "user_id": "usr_forged", "extensions": map[string]any{"a.test/x": map[string]any{"version": "1"}},
			"nested": []any{1, nil, map[string]any{}},
		}},
		{name: "task of 200 characters", body: map[string]any{"task": strings.Repeat("é", 200), "description": "x"}},
		{name: "description of 4000 characters", body: map[string]any{"task": "t", "description": strings.Repeat("€", 4000)}},
		{name: "newlines and tabs", body: map[string]any{"task": "t", "description": "line 1\nline 2\r\n\tindented"}},
		{name: "non-ASCII", body: map[string]any{"task": "Régler avec une carte cadeau 🎁", "description": "Aucun moyen."}},
		{name: "body of exactly 16 KiB", body: func() []byte {
			raw := mustJSON(t, map[string]any{"task": "t", "description": "d", "padding": ""})
			return mustJSON(t, map[string]any{"task": "t", "description": "d", "padding": strings.Repeat("a", 16<<10-len(raw))})
		}()},
		{"content type with charset", valid2, reportOptions{ContentType: "application/json; charset=utf-8"}},
		{"+json content type", valid2, reportOptions{ContentType: "application/vnd.poppy+json"}},
		{"no content type", valid2, reportOptions{ContentType: "-"}},
	}
	t.Run("rows", func(t *testing.T) {
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				t.Parallel()
				if raw, ok := tt.body.([]byte); ok {
					require.Len(t, raw, 16<<10)
				}
				resp := b.report(t, "shop", tt.body, tt.o)
				require.Equal(t, http.StatusAccepted, resp.Status, "body: %s", resp.Body)
				require.Empty(t, resp.Body)
			})
		}
	})
	require.Len(t, b.rows(t, "shop"), len(tests))
	for _, r := range b.rows(t, "shop") {
		require.False(t, r.Answered)
	}
}

func TestFeedbackAlternative(t *testing.T) {
	t.Parallel()
	b := setup(t)
	tests := []struct {
		task string
		want map[string]any
	}{
		{"Pay with a gift card", giftCard("shop")},
		{"pay with a GIFT CARD", giftCard("shop")},
		{"  Pay with a gift card\n", giftCard("shop")},
		{"\tCLOSE AN ACCOUNT ", map[string]any{"instructions": "Accounts are closed by phone."}},
	}
	t.Run("rows", func(t *testing.T) {
		for _, tt := range tests {
			t.Run(tt.task, func(t *testing.T) {
				t.Parallel()
				resp := b.report(t, "shop", map[string]any{"task": tt.task, "description": "x"}, reportOptions{})
				require.Equal(t, http.StatusOK, resp.Status, "body: %s", resp.Body)
				require.Equal(t, "application/json", resp.Header.Get("Content-Type"))
				require.JSONEq(t, string(mustJSON(t, tt.want)), string(resp.Body))
			})
		}
	})
	rows := b.rows(t, "shop")
	require.Len(t, rows, len(tests))
	tasks := map[string]bool{}
	for _, r := range rows {
		require.True(t, r.Answered)
		tasks[r.Task] = true
	}
	// The task is stored as sent, not normalised.
	for _, tt := range tests {
		require.True(t, tasks[tt.task], "task %q not stored as sent", tt.task)
	}
}

func TestFeedbackInvalid(t *testing.T) {
	t.Parallel()
	b := setup(t)
	tests := []struct {
		name  string
		body  any
		o     reportOptions
		field string // the field named, or "" for none
	}{
		{name: "missing task", body: `{"description":"x"}`, field: "task"},
		{name: "null task", body: `{"task":null,"description":"x"}`, field: "task"},
		{name: "empty task", body: `{"task":"","description":"x"}`, field: "task"},
		{name: "missing description", body: `{"task":"t"}`, field: "description"},
		{name: "empty description", body: `{"task":"t","description":""}`, field: "description"},
		{name: "number task", body: `{"task":5,"description":"x"}`, field: "task"},
		{name: "object task", body: `{"task":{"text":"t"},"description":"x"}`, field: "task"},
		{name: "array description", body: `{"task":"t","description":["x"]}`, field: "description"},
		{name: "task of 201 characters", body: map[string]any{"task": strings.Repeat("a", 201), "description": "x"}, field: "task"},
		{name: "description of 4001 characters", body: map[string]any{"task": "t", "description": strings.Repeat("a", 4001)}, field: "description"},
		{name: "NUL in task", body: `{"task":"a\u0000b","description":"x"}`, field: "task"},
		{name: "escape in description", body: `{"task":"t","description":"a\u001b[31mred"}`, field: "description"},
		{name: "DEL in description", body: `{"task":"t","description":"a\u007f"}`, field: "description"},
		{name: "C1 control in task", body: `{"task":"a\u0085b","description":"x"}`, field: "task"},
		{name: "right-to-left override in description", body: `{"task":"t","description":"refund \u202e001$"}`, field: "description"},
		{name: "tag characters in task", body: `{"task":"t\udb40\udc49\udb40\udc47","description":"x"}`, field: "task"},
		{name: "malformed JSON", body: `{"task":"t","description":`},
		{name: "not JSON", body: `task=t&description=x`},
		{name: "empty body", body: ``},
		{name: "array body", body: `[{"task":"t","description":"x"}]`},
		{name: "string body", body: `"Pay with a gift card"`},
		{name: "null body", body: `null`, field: "task"},
		{name: "two values", body: `{"task":"t","description":"x"}{}`},
		{name: "trailing garbage", body: `{"task":"t","description":"x"} x`},
		{name: "body over 16 KiB", body: map[string]any{"task": "t", "description": "x", "padding": strings.Repeat("a", 16<<10)}},
		{name: "text/plain", body: valid, o: reportOptions{ContentType: "text/plain"}},
		{name: "form", body: valid, o: reportOptions{ContentType: "application/x-www-form-urlencoded"}},
		{name: "malformed content type", body: valid, o: reportOptions{ContentType: "application/json; =="}},
	}
	t.Run("rows", func(t *testing.T) {
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				t.Parallel()
				resp := b.report(t, "shop", tt.body, tt.o)
				// Spec 9.3: invalid_request (400) for a report that is
				// malformed or too long.
				e := requireError(t, resp, http.StatusBadRequest, "invalid_request")
				if tt.field != "" {
					require.Len(t, e.Fields, 1, "body: %s", resp.Body)
					require.Equal(t, tt.field, e.Fields[0].Field)
					require.NotEmpty(t, e.Fields[0].Message)
				}
			})
		}
	})
	require.Empty(t, b.rows(t, "shop"))
}

func TestFeedbackSession(t *testing.T) {
	t.Parallel()
	b := setup(t)
	tests := []struct {
		name string
		o    reportOptions
	}{
		{"no Session header", reportOptions{Unsigned: true}},
		{"another Company's audience", reportOptions{Claims: peers.SessionClaims{Aud: b.env.PublicURL("/t/mall")}}},
		{"audience with a trailing slash", reportOptions{Claims: peers.SessionClaims{Aud: b.env.PublicURL("/t/shop/")}}},
		{"signed for another URL", reportOptions{Claims: peers.SessionClaims{URL: b.env.PublicURL("/t/shop/poppy/conversations")}}},
		{"signed for GET", reportOptions{Claims: peers.SessionClaims{Method: http.MethodGet}}},
		{"old iat", reportOptions{Claims: peers.SessionClaims{IAT: time.Now().Add(-time.Hour)}}},
	}
	t.Run("rows", func(t *testing.T) {
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				t.Parallel()
				resp := b.report(t, "shop", valid, tt.o)
				requireError(t, resp, http.StatusBadRequest, "invalid_session")
			})
		}
		t.Run("checked before the body", func(t *testing.T) {
			t.Parallel()
			resp := b.report(t, "shop", `not json`, reportOptions{Unsigned: true})
			requireError(t, resp, http.StatusBadRequest, "invalid_session")
		})
	})
	require.Empty(t, b.rows(t, "shop"))

	t.Run("replayed Session JWT", func(t *testing.T) {
		t.Parallel()
		jwt := b.agent.SessionJWT(t, peers.SessionClaims{
			Aud: b.env.PublicURL("/t/shop"), Method: http.MethodPost, URL: b.env.PublicURL("/t/shop/poppy/feedback"),
		}, peers.SessionOptions{})
		url := b.env.PublicURL("/t/shop/poppy/feedback")
		first := b.env.Do(t, http.MethodPost, url, map[string]any{"task": "replay", "description": "x"}, "Poppy-Session", jwt)
		require.Equal(t, http.StatusAccepted, first.Status, "body: %s", first.Body)
		again := b.env.Do(t, http.MethodPost, url, map[string]any{"task": "replay", "description": "x"}, "Poppy-Session", jwt)
		requireError(t, again, http.StatusBadRequest, "invalid_session")
		rows := b.rows(t, "shop")
		require.Len(t, rows, 1, "only the first of the replayed reports is stored")
		require.Equal(t, "replay", rows[0].Task)
	})
}

func TestFeedbackAttribution(t *testing.T) {
	t.Parallel()
	b := setup(t)
	claims := peers.SessionClaims{Sub: "usr_attributed", AgentID: "agt_7", SID: "sid-attributed_1"}
	resp := b.report(t, "shop", map[string]any{"task": "Task one", "description": "first"}, reportOptions{Claims: claims})
	require.Equal(t, http.StatusAccepted, resp.Status, "body: %s", resp.Body)
	// The same Session again, then another Session without an Agent ID.
	resp = b.report(t, "shop", valid, reportOptions{Claims: claims})
	require.Equal(t, http.StatusOK, resp.Status, "body: %s", resp.Body)
	resp = b.report(t, "shop", map[string]any{"task": "Task two", "description": "second", "user_id": "usr_forged", "sid": "forged"},
		reportOptions{Claims: peers.SessionClaims{Sub: "usr_other", SID: "sid-other"}})
	require.Equal(t, http.StatusAccepted, resp.Status, "body: %s", resp.Body)

	require.Equal(t, []stored{
		{ClientID: b.agent.ClientID, UserID: "usr_attributed", AgentID: "agt_7", SID: "sid-attributed_1", Task: "Task one", Description: "first"},
		{ClientID: b.agent.ClientID, UserID: "usr_attributed", AgentID: "agt_7", SID: "sid-attributed_1",
			Task: valid["task"].(string), Description: valid["description"].(string), Answered: true},
		{ClientID: b.agent.ClientID, UserID: "usr_other", AgentID: "", SID: "sid-other", Task: "Task two", Description: "second"},
	}, b.rows(t, "shop"))
}

func TestFeedbackUnknownCompany(t *testing.T) {
	t.Parallel()
	b := setup(t)
	resp := b.report(t, "nosuch", valid, reportOptions{})
	requireError(t, resp, http.StatusNotFound, "not_found")
}

// listed is a report as GET /feedback shows it.
type listed struct {
	ID          int64     `json:"id"`
	ClientID    string    `json:"client_id"`
	UserID      string    `json:"user_id"`
	AgentID     string    `json:"agent_id"`
	SID         string    `json:"sid"`
	Task        string    `json:"task"`
	Description string    `json:"description"`
	Answered    bool      `json:"answered"`
	CreatedAt   time.Time `json:"created_at"`
}

type page struct {
	Feedback []listed `json:"feedback"`
	Next     string   `json:"next"`
}

// apiKey creates a Company API key for slug.
func (b *bundle) apiKey(t *testing.T, slug string) string {
	t.Helper()
	resp := b.env.Admin(t, http.MethodPost, "/admin/v1/companies/"+slug+"/api-keys", map[string]any{"name": "test"})
	require.Equal(t, http.StatusCreated, resp.Status, "body: %s", resp.Body)
	key, _ := resp.JSON(t)["key"].(string)
	require.NotEmpty(t, key)
	return key
}

// list GETs the Company API's feedback with key and query.
func (b *bundle) list(t *testing.T, key, query string) *peers.Response {
	t.Helper()
	return b.env.Do(t, http.MethodGet, b.env.PublicURL("/company/v1/feedback"+query), nil, "Authorization", "Bearer "+key)
}

func decodePage(t *testing.T, resp *peers.Response) page {
	t.Helper()
	require.Equal(t, http.StatusOK, resp.Status, "body: %s", resp.Body)
	var p page
	require.NoError(t, json.Unmarshal(resp.Body, &p), "body: %s", resp.Body)
	require.NotNil(t, p.Feedback, "feedback must be an array: %s", resp.Body)
	return p
}

func tasks(p page) []string {
	out := []string{}
	for _, r := range p.Feedback {
		out = append(out, r.Task)
	}
	return out
}

func TestListFeedback(t *testing.T) {
	t.Parallel()
	b := setup(t)
	key := b.apiKey(t, "shop")

	p := decodePage(t, b.list(t, key, ""))
	require.Empty(t, p.Feedback)
	require.Empty(t, p.Next)

	for i := 1; i <= 5; i++ {
		resp := b.report(t, "shop", map[string]any{"task": "task " + strconv.Itoa(i), "description": "report " + strconv.Itoa(i)},
			reportOptions{Claims: peers.SessionClaims{Sub: "usr_list", AgentID: "agt_list", SID: "sid-list"}})
		require.Equal(t, http.StatusAccepted, resp.Status, "body: %s", resp.Body)
	}
	resp := b.report(t, "shop", valid, reportOptions{Claims: peers.SessionClaims{Sub: "usr_list", SID: "sid-list-2"}})
	require.Equal(t, http.StatusOK, resp.Status)

	// Newest first, every field shown.
	all := decodePage(t, b.list(t, key, ""))
	require.Equal(t, []string{"Pay with a gift card", "task 5", "task 4", "task 3", "task 2", "task 1"}, tasks(all))
	require.Empty(t, all.Next)
	newest, fifth := all.Feedback[0], all.Feedback[1]
	require.Equal(t, b.agent.ClientID, fifth.ClientID)
	require.Equal(t, "usr_list", fifth.UserID)
	require.Equal(t, "agt_list", fifth.AgentID)
	require.Equal(t, "sid-list", fifth.SID)
	require.Equal(t, "report 5", fifth.Description)
	require.False(t, fifth.Answered)
	require.WithinDuration(t, time.Now(), fifth.CreatedAt, time.Minute)
	require.True(t, newest.Answered)
	require.Empty(t, newest.AgentID)
	require.NotContains(t, string(b.list(t, key, "?limit=1").Body), "agent_id", "agent_id is left out when empty")
	for i := 1; i < len(all.Feedback); i++ {
		require.Less(t, all.Feedback[i].ID, all.Feedback[i-1].ID)
	}

	// Pages of 2.
	p1 := decodePage(t, b.list(t, key, "?limit=2"))
	require.Equal(t, []string{"Pay with a gift card", "task 5"}, tasks(p1))
	require.Equal(t, strconv.FormatInt(p1.Feedback[1].ID, 10), p1.Next)
	p2 := decodePage(t, b.list(t, key, "?limit=2&before="+p1.Next))
	require.Equal(t, []string{"task 4", "task 3"}, tasks(p2))
	require.NotEmpty(t, p2.Next)
	p3 := decodePage(t, b.list(t, key, "?limit=2&before="+p2.Next))
	require.Equal(t, []string{"task 2", "task 1"}, tasks(p3))
	// A full last page has a next, which leads to an empty page.
	require.NotEmpty(t, p3.Next)
	p4 := decodePage(t, b.list(t, key, "?limit=2&before="+p3.Next))
	require.Empty(t, p4.Feedback)
	require.Empty(t, p4.Next)

	// A short page has none.
	p5 := decodePage(t, b.list(t, key, "?limit=4&before="+p1.Next))
	require.Equal(t, []string{"task 4", "task 3", "task 2", "task 1"}, tasks(p5))
	require.NotEmpty(t, p5.Next)
	p6 := decodePage(t, b.list(t, key, "?limit=5&before="+p1.Next))
	require.Len(t, p6.Feedback, 4)
	require.Empty(t, p6.Next)

	// before need not be an existing report.
	p7 := decodePage(t, b.list(t, key, "?before="+strconv.FormatInt(all.Feedback[0].ID+1000, 10)))
	require.Equal(t, tasks(all), tasks(p7))
	p8 := decodePage(t, b.list(t, key, "?limit=500&before=1"))
	require.Empty(t, p8.Feedback)

	// The admin API lists the same reports.
	admin := b.env.Admin(t, http.MethodGet, "/admin/v1/companies/shop/feedback", nil)
	require.Equal(t, all, decodePage(t, admin))
	admin = b.env.Admin(t, http.MethodGet, "/admin/v1/companies/shop/feedback?limit=2&before="+p1.Next, nil)
	require.Equal(t, p2, decodePage(t, admin))
}

func TestListFeedbackBadQuery(t *testing.T) {
	t.Parallel()
	b := setup(t)
	key := b.apiKey(t, "shop")
	tests := []struct {
		query, field string
	}{
		{"?limit=0", "limit"},
		{"?limit=-1", "limit"},
		{"?limit=501", "limit"},
		{"?limit=x", "limit"},
		{"?limit=1.5", "limit"},
		{"?limit=99999999999999999999", "limit"},
		{"?before=0", "before"},
		{"?before=-3", "before"},
		{"?before=x", "before"},
		{"?before=99999999999999999999", "before"},
	}
	for _, tt := range tests {
		t.Run(tt.query, func(t *testing.T) {
			t.Parallel()
			for _, resp := range []*peers.Response{
				b.list(t, key, tt.query),
				b.env.Admin(t, http.MethodGet, "/admin/v1/companies/shop/feedback"+tt.query, nil),
			} {
				e := requireError(t, resp, http.StatusBadRequest, "invalid_request")
				require.Len(t, e.Fields, 1)
				require.Equal(t, tt.field, e.Fields[0].Field)
			}
		})
	}
}

func TestListFeedbackAuth(t *testing.T) {
	t.Parallel()
	b := setup(t)
	url := b.env.PublicURL("/company/v1/feedback")
	requireError(t, b.env.Do(t, http.MethodGet, url, nil), http.StatusUnauthorized, "unauthorized")
	requireError(t, b.env.Do(t, http.MethodGet, url, nil, "Authorization", "Bearer not-a-key"), http.StatusUnauthorized, "unauthorized")
	// The admin token is not a Company API key, nor a key an admin token.
	requireError(t, b.env.Do(t, http.MethodGet, url, nil, "Authorization", "Bearer "+adminToken), http.StatusUnauthorized, "unauthorized")
	key := b.apiKey(t, "shop")
	resp := b.env.Do(t, http.MethodGet, b.env.PublicURL("/admin/v1/companies/shop/feedback"), nil, "Authorization", "Bearer "+key)
	require.Equal(t, http.StatusUnauthorized, resp.Status, "body: %s", resp.Body)
	// A Session JWT does not read reports either.
	req, err := http.NewRequest(http.MethodGet, url, nil)
	require.NoError(t, err)
	b.agent.Sign(t, req, peers.SessionClaims{Aud: b.env.PublicURL("/t/shop")}, peers.SessionOptions{})
	r, err := b.env.Client.Do(req)
	require.NoError(t, err)
	r.Body.Close()
	require.Equal(t, http.StatusUnauthorized, r.StatusCode)
}

func TestFeedbackCrossCompany(t *testing.T) {
	t.Parallel()
	b := setup(t, "shop", "mall")
	shopKey, mallKey := b.apiKey(t, "shop"), b.apiKey(t, "mall")

	for _, task := range []string{"shop one", "shop two"} {
		require.Equal(t, http.StatusAccepted, b.report(t, "shop", map[string]any{"task": task, "description": "for shop"}, reportOptions{}).Status)
	}
	require.Equal(t, http.StatusAccepted, b.report(t, "mall", map[string]any{"task": "mall one", "description": "for mall"}, reportOptions{}).Status)
	// mall's alternative is mall's, not shop's.
	resp := b.report(t, "mall", valid, reportOptions{})
	require.Equal(t, http.StatusOK, resp.Status)
	require.JSONEq(t, string(mustJSON(t, giftCard("mall"))), string(resp.Body))
	// A Session JWT for shop does not report to mall.
	resp = b.report(t, "mall", map[string]any{"task": "misdirected", "description": "x"},
		reportOptions{Claims: peers.SessionClaims{Aud: b.env.PublicURL("/t/shop")}})
	requireError(t, resp, http.StatusBadRequest, "invalid_session")

	require.Equal(t, []string{"shop one", "shop two"}, []string{b.rows(t, "shop")[0].Task, b.rows(t, "shop")[1].Task})
	require.Len(t, b.rows(t, "shop"), 2)
	require.Len(t, b.rows(t, "mall"), 2)

	shopAll := decodePage(t, b.list(t, shopKey, ""))
	require.Equal(t, []string{"shop two", "shop one"}, tasks(shopAll))
	mallAll := decodePage(t, b.list(t, mallKey, ""))
	require.Equal(t, []string{"Pay with a gift card", "mall one"}, tasks(mallAll))

	// Paging from an id of the other Company shows only one's own reports.
	top := max(shopAll.Feedback[0].ID, mallAll.Feedback[0].ID) + 1
	require.Equal(t, tasks(mallAll), tasks(decodePage(t, b.list(t, mallKey, "?before="+strconv.FormatInt(top, 10)))))
	require.Equal(t, []string{"mall one"}, tasks(decodePage(t, b.list(t, mallKey, "?before="+strconv.FormatInt(mallAll.Feedback[0].ID, 10)))))
	require.Equal(t, []string{"shop one"}, tasks(decodePage(t, b.list(t, shopKey, "?before="+strconv.FormatInt(shopAll.Feedback[0].ID, 10)))))

	require.Equal(t, shopAll, decodePage(t, b.env.Admin(t, http.MethodGet, "/admin/v1/companies/shop/feedback", nil)))
	require.Equal(t, mallAll, decodePage(t, b.env.Admin(t, http.MethodGet, "/admin/v1/companies/mall/feedback", nil)))
}
