package api

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/testkit/peers"
)

// contractFeedback sends feedback, reads the reports and ends Sessions. It
// returns the Company API key of acme it made, which later areas use.
func contractFeedback(t *testing.T, c *contract, f *fixture) (acmeKey string) {
	env, issuer, agent := f.env, f.issuer, f.agent

	t.Run("feedback", func(t *testing.T) {
		signed := func(slug string) func(*http.Request) {
			return func(req *http.Request) {
				agent.Sign(t, req, peers.SessionClaims{Aud: issuer, SID: "contract-" + slug}, peers.SessionOptions{})
			}
		}
		path := "/t/acme/poppy/feedback"
		report := `{"task":"Return a gift","description":"The User wanted to return a gift without the receipt."}`

		// A task without an alternative is taken; one with an alternative,
		// matched without case or surrounding space, gets it (spec 9.3).
		r := c.do(t, call{method: post, path: path, session: signed("acme"), want: 202, body: report})
		assert.Empty(t, r.Body)
		r = c.do(t, call{method: post, path: path, session: signed("acme"), want: 200,
			body: `{"task":"  PAY WITH A GIFT CARD ","description":"No field for a gift card at checkout.","extra":"ignored"}`})
		alts := fullCompany()["feedback"].(map[string]any)["alternatives"].([]any)
		want, _ := json.Marshal(alts[0].(map[string]any)["alternative"])
		assert.JSONEq(t, string(want), string(r.Body))

		// The Session header is required, and verified.
		r = c.do(t, call{method: post, path: path, want: 400, docRejects: true, body: report})
		assert.Equal(t, "invalid_session", r.JSON(t)["error"])
		r = c.do(t, call{method: post, path: path, want: 400, body: report, session: func(req *http.Request) {
			agent.Sign(t, req, peers.SessionClaims{Aud: env.PublicURL("/t/minimal")}, peers.SessionOptions{})
		}})
		assert.Equal(t, "invalid_session", r.JSON(t)["error"], "a Session JWT for another Company")
		r = c.do(t, call{method: post, path: path, session: signed("acme"), want: 400, docRejects: true, body: `{"task":"","description":"x"}`})
		assert.Equal(t, "task", r.JSON(t)["fields"].([]any)[0].(map[string]any)["field"])
		// Spec 9.3: a report that is malformed or too long is invalid_request.
		for _, k := range []call{
			{body: padded(t, map[string]string{"task": "T", "description": "D"}, 16<<10)},
			{body: `{"task":"T","description":"` + strings.Repeat("d", 4001) + `"}`, docRejects: true},
			{body: report, ctype: "text/plain", docRejects: true},
			{body: `{"task":"T",`, docRejects: true},
		} {
			k.method, k.path, k.session, k.want = post, path, signed("acme"), 400
			assert.Equal(t, "invalid_request", c.do(t, k).JSON(t)["error"])
		}

		// A Personal Agent the Company does not accept gets invalid_session.
		c.do(t, call{method: patch, path: "/admin/v1/companies/acme", token: admin, want: 200,
			body: map[string]any{"agents": map[string]any{"client_ids": []string{agent.ClientID, "https://blocked.example/agent.json"}}}})
		r = c.do(t, call{method: post, path: path, session: signed("acme"), want: 400, body: report})
		assert.Equal(t, "invalid_session", r.JSON(t)["error"])
		assert.Contains(t, r.JSON(t)["error_description"], "does not accept")
		c.do(t, call{method: patch, path: "/admin/v1/companies/acme", token: admin, want: 200,
			body: `{"agents":{"client_ids":["https://blocked.example/agent.json"]}}`})
		c.do(t, call{method: post, path: path, session: signed("acme"), want: 202, body: report})

		// Feedback off: 404, before the Session header is looked at.
		c.do(t, call{method: post, path: "/t/corner/poppy/feedback", session: signed("corner"), want: 404, body: report})
		c.do(t, call{method: post, path: "/t/nosuch/poppy/feedback", session: signed("nosuch"), want: 404, body: report})
	})

	// reports is a page of feedback reports as the admin and Company APIs
	// show it.
	type report struct {
		ID          int64  `json:"id"`
		ClientID    string `json:"client_id"`
		UserID      string `json:"user_id"`
		AgentID     string `json:"agent_id"`
		SID         string `json:"sid"`
		Task        string `json:"task"`
		Description string `json:"description"`
		Answered    bool   `json:"answered"`
		CreatedAt   string `json:"created_at"`
	}
	type reports struct {
		Feedback []report `json:"feedback"`
		Next     string   `json:"next"`
	}
	// minimalID is minimal's identifier, the audience of its Session JWTs
	// (it has no issuer now).
	var minimalID string

	t.Run("feedback reports", func(t *testing.T) {
		acmeKey = decode[struct {
			Key string `json:"key"`
		}](t, c.do(t, call{method: post, path: "/admin/v1/companies/acme/api-keys", token: admin, want: 201, body: `{"name":"reports"}`})).Key
		tasks := func(l reports) (out []string) {
			for _, r := range l.Feedback {
				out = append(out, r.Task)
			}
			return out
		}
		path := "/admin/v1/companies/acme/feedback"

		// The feedback test's reports, newest first, as sent, each with
		// the verified Session it came from.
		r := c.do(t, call{method: get, path: path, token: admin, want: 200})
		assert.NotContains(t, string(r.Body), "agent_id", "no Agent ID in the Session JWTs")
		assert.NotContains(t, r.JSON(t), "next", "the page is not full")
		l := decode[reports](t, r)
		assert.Equal(t, []string{"Return a gift", "  PAY WITH A GIFT CARD ", "Return a gift"}, tasks(l))
		require.Len(t, l.Feedback, 3)
		assert.Greater(t, l.Feedback[0].ID, l.Feedback[1].ID)
		assert.Greater(t, l.Feedback[1].ID, l.Feedback[2].ID)
		assert.Equal(t, []bool{false, true, false}, []bool{l.Feedback[0].Answered, l.Feedback[1].Answered, l.Feedback[2].Answered})
		for _, rep := range l.Feedback {
			assert.Equal(t, agent.ClientID, rep.ClientID)
			assert.Equal(t, "usr_test", rep.UserID)
			assert.Equal(t, "contract-acme", rep.SID)
		}
		assert.Equal(t, "No field for a gift card at checkout.", l.Feedback[1].Description)
		// The Company reads the same list with its API key.
		assert.Equal(t, l, decode[reports](t, c.do(t, call{method: get, path: "/company/v1/feedback", token: acmeKey, want: 200})))

		// Each Company sees its own reports only. minimal has none yet;
		// without an issuer (turned off by "not available yet", and here
		// again so that this test does not depend on that one) its
		// Session JWTs name its domain.
		minimalID = c.do(t, call{method: patch, path: "/admin/v1/companies/minimal", token: admin, want: 200,
			body: `{"auth":{"issuer":false}}`}).JSON(t)["identifier"].(string)
		require.Equal(t, "https://minimal.example", minimalID)
		path = "/admin/v1/companies/minimal/feedback"
		r = c.do(t, call{method: get, path: path, token: admin, want: 200})
		assert.JSONEq(t, `{"feedback":[]}`, string(r.Body))
		for i, task := range []string{"First", "Second", "Third"} {
			c.do(t, call{method: post, path: "/t/minimal/poppy/feedback", want: 202,
				session: func(req *http.Request) {
					agent.Sign(t, req, peers.SessionClaims{Aud: minimalID, SID: fmt.Sprintf("reports-%d", i+1), AgentID: "agt_1"}, peers.SessionOptions{})
				},
				body: map[string]string{"task": task, "description": "Could not do it."}})
		}

		// Paging: a full page names the next page's before.
		l = decode[reports](t, c.do(t, call{method: get, path: path + "?limit=2", token: admin, want: 200}))
		assert.Equal(t, []string{"Third", "Second"}, tasks(l))
		assert.Equal(t, "agt_1", l.Feedback[0].AgentID)
		assert.Equal(t, "reports-3", l.Feedback[0].SID)
		assert.Equal(t, strconv.FormatInt(l.Feedback[1].ID, 10), l.Next)
		l = decode[reports](t, c.do(t, call{method: get, path: path + "?limit=2&before=" + l.Next, token: admin, want: 200}))
		assert.Equal(t, []string{"First"}, tasks(l))
		assert.Empty(t, l.Next)
		l = decode[reports](t, c.do(t, call{method: get, path: fmt.Sprintf("%s?before=%d", path, l.Feedback[0].ID), token: admin, want: 200}))
		assert.Empty(t, l.Feedback)
		l = decode[reports](t, c.do(t, call{method: get, path: "/company/v1/feedback?limit=1", token: acmeKey, want: 200}))
		assert.Equal(t, []string{"Return a gift"}, tasks(l))
		assert.NotEmpty(t, l.Next)
		l = decode[reports](t, c.do(t, call{method: get, path: "/company/v1/feedback?limit=500&before=" + l.Next, token: acmeKey, want: 200}))
		assert.Equal(t, []string{"  PAY WITH A GIFT CARD ", "Return a gift"}, tasks(l))

		// Bad paging names the parameter, on both APIs.
		for _, q := range []string{"limit=0", "limit=501", "limit=ten", "before=0", "before=-1", "before=abc"} {
			field, _, _ := strings.Cut(q, "=")
			for _, k := range []call{{path: path + "?" + q, token: admin}, {path: "/company/v1/feedback?" + q, token: acmeKey}} {
				k.method, k.want, k.docRejects = get, 400, true
				r := c.do(t, k)
				assert.Equal(t, field, r.JSON(t)["fields"].([]any)[0].(map[string]any)["field"], q)
			}
		}

		c.do(t, call{method: get, path: "/admin/v1/companies/nosuch/feedback", token: admin, want: 404})
		c.do(t, call{method: get, path: "/admin/v1/companies/Not_A_Slug/feedback", token: admin, want: 404, docRejects: true})
		r = c.do(t, call{method: get, path: path, want: 401, docRejects: true})
		assert.Equal(t, `Bearer realm="poppyhost-admin"`, r.Header.Get("WWW-Authenticate"))
		c.do(t, call{method: get, path: path, token: bogus, want: 401})
		c.do(t, call{method: get, path: path, token: acmeKey, want: 401})
		r = c.do(t, call{method: get, path: "/company/v1/feedback", want: 401, docRejects: true})
		assert.Equal(t, `Bearer realm="poppyhost-company"`, r.Header.Get("WWW-Authenticate"))
		c.do(t, call{method: get, path: "/company/v1/feedback", token: bogus, want: 401})
		c.do(t, call{method: get, path: "/company/v1/feedback", token: admin, want: 401})
	})

	t.Run("end sessions", func(t *testing.T) {
		adminPath, companyPath := "/admin/v1/companies/acme/sessions/end", "/company/v1/sessions/end"
		feedback := "/t/acme/poppy/feedback"
		report := `{"task":"Return a gift","description":"No receipt."}`
		in := func(aud, sid string) func(*http.Request) {
			return func(req *http.Request) {
				agent.Sign(t, req, peers.SessionClaims{Aud: aud, SID: sid}, peers.SessionOptions{})
			}
		}
		end := func(sid string) map[string]string { return map[string]string{"client_id": agent.ClientID, "sid": sid} }

		// The operator ends the feedback test's Session: at once, and for
		// good (spec 5.5). Ending it again is fine.
		c.do(t, call{method: post, path: feedback, session: in(issuer, "contract-acme"), want: 202, body: report})
		c.do(t, call{method: post, path: adminPath, token: admin, body: end("contract-acme"), want: 204})
		c.do(t, call{method: post, path: adminPath, token: admin, body: end("contract-acme"), want: 204})
		r := c.do(t, call{method: post, path: feedback, session: in(issuer, "contract-acme"), want: 400, body: report})
		assert.Equal(t, "session_ended", r.JSON(t)["error"])
		assert.Contains(t, r.JSON(t)["error_description"], "new sid")
		r = c.do(t, call{method: post, path: feedback, session: in(issuer, "contract-acme"), want: 400, body: report})
		assert.Equal(t, "session_ended", r.JSON(t)["error"], "an ended Session does not start again")

		// A new sid is a new Session; the Company ends it with its API key.
		c.do(t, call{method: post, path: feedback, session: in(issuer, "end-sessions-2"), want: 202, body: report})
		c.do(t, call{method: post, path: companyPath, token: acmeKey, body: end("end-sessions-2"), want: 204})
		c.do(t, call{method: post, path: companyPath, token: acmeKey, body: end("end-sessions-2"), want: 204})
		r = c.do(t, call{method: post, path: feedback, session: in(issuer, "end-sessions-2"), want: 400, body: report})
		assert.Equal(t, "session_ended", r.JSON(t)["error"])

		// Only a Session of the Company named, by its exact client_id and
		// sid: minimal's reports-1 is not acme's.
		for _, body := range []map[string]string{
			end("never-started"),
			{"client_id": "https://other.example/agent.json", "sid": "contract-acme"},
			end("reports-1"),
		} {
			c.do(t, call{method: post, path: adminPath, token: admin, body: body, want: 404})
			c.do(t, call{method: post, path: companyPath, token: acmeKey, body: body, want: 404})
		}
		c.do(t, call{method: post, path: "/admin/v1/companies/nosuch/sessions/end", token: admin, body: end("contract-acme"), want: 404})
		c.do(t, call{method: post, path: "/admin/v1/companies/minimal/sessions/end", token: admin, body: end("reports-1"), want: 204})
		r = c.do(t, call{method: post, path: "/t/minimal/poppy/feedback", want: 400, body: report, session: func(req *http.Request) {
			agent.Sign(t, req, peers.SessionClaims{Aud: minimalID, SID: "reports-1", AgentID: "agt_1"}, peers.SessionOptions{})
		}})
		assert.Equal(t, "session_ended", r.JSON(t)["error"])

		// Bad bodies name the offending members; unknown ones are refused.
		long := strings.Repeat("s", 257)
		for body, fields := range map[string][]string{
			`{"sid":"contract-acme"}`:                           {"client_id"},
			`{"client_id":"","sid":"contract-acme"}`:            {"client_id"},
			`{"client_id":null,"sid":"contract-acme"}`:          {"client_id"},
			`{"client_id":7,"sid":"contract-acme"}`:             {"client_id"},
			`{"client_id":"x"}`:                                 {"sid"},
			`{"client_id":"x","sid":"not a sid"}`:               {"sid"},
			`{"client_id":"x","sid":"` + long + `"}`:            {"sid"},
			`{}`:                                                {"client_id", "sid"},
			`{"client_id":"x","sid":"s","reason":"suspicious"}`: {"reason"},
		} {
			for _, k := range []call{{path: adminPath, token: admin}, {path: companyPath, token: acmeKey}} {
				k.method, k.body, k.want, k.docRejects = post, body, 400, true
				var got []string
				for _, f := range c.do(t, k).JSON(t)["fields"].([]any) {
					got = append(got, f.(map[string]any)["field"].(string))
				}
				assert.Equal(t, fields, got, body)
			}
		}
		for _, k := range []call{{path: adminPath, token: admin}, {path: companyPath, token: acmeKey}} {
			k.method = post
			for _, bad := range []call{
				{body: `{"client_id":`, want: 400, docRejects: true},
				{body: `[]`, want: 400, docRejects: true},
				{body: "", want: 400, docRejects: true},
				{body: padded(t, end("contract-acme"), 8<<10), want: 413},
				{body: end("contract-acme"), ctype: "text/plain", want: 415, docRejects: true},
				{body: end("contract-acme"), token: "-", want: 401},
			} {
				bad.method, bad.path = k.method, k.path
				if bad.token == "" {
					bad.token = k.token
				}
				c.do(t, bad)
			}
		}
		r = c.do(t, call{method: post, path: adminPath, body: end("contract-acme"), want: 401, docRejects: true})
		assert.Equal(t, `Bearer realm="poppyhost-admin"`, r.Header.Get("WWW-Authenticate"))
		c.do(t, call{method: post, path: adminPath, token: acmeKey, body: end("contract-acme"), want: 401})
		r = c.do(t, call{method: post, path: companyPath, body: end("contract-acme"), want: 401, docRejects: true})
		assert.Equal(t, `Bearer realm="poppyhost-company"`, r.Header.Get("WWW-Authenticate"))
		c.do(t, call{method: post, path: companyPath, token: admin, body: end("contract-acme"), want: 401})
	})

	return acmeKey
}
