package plans_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/ory/fosite"
	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/browserjoin"
	"github.com/poppyhost/poppyhost/internal/clientauth"
	"github.com/poppyhost/poppyhost/internal/conversations"
	"github.com/poppyhost/poppyhost/internal/dpop"
	"github.com/poppyhost/poppyhost/internal/issuer"
	"github.com/poppyhost/poppyhost/internal/operations"
	"github.com/poppyhost/poppyhost/internal/sessions"
	"github.com/poppyhost/poppyhost/internal/tenant"
	"github.com/poppyhost/poppyhost/internal/testkit/plancheck"
	"github.com/poppyhost/poppyhost/internal/verified"
)

// world is a database with several Companies, the first of them the large
// one once loaded, and the stores of the hot paths on a recording pool.
type world struct {
	ctx       context.Context
	rec       *plancheck.Recorder
	pool      *pgxpool.Pool // records its statements
	conn      *pgx.Conn     // explains them
	companies []*tenant.Company
}

const client = "https://agent.test/client"

func newWorld(t *testing.T) *world {
	t.Helper()
	w := &world{ctx: context.Background()}
	w.pool, w.conn, w.rec = plancheck.NewDatabase(t)
	store := tenant.NewStore(w.pool)
	for i, slug := range []string{"large", "small-a", "small-b", "small-c"} {
		s := tenant.DefaultSettings()
		s.Organization.Name = slug
		s.Organization.Domain = slug + ".example"
		s.Auth.Scopes = map[string]string{"orders": "Your orders"}
		c, err := store.Create(w.ctx, slug, s)
		require.NoError(t, err, "company %d", i)
		w.companies = append(w.companies, c)
	}
	return w
}

// hot is one hot path: what it runs, and what each statement it runs
// (in order) must be planned as.
type hot struct {
	name  string
	run   func(t *testing.T)
	wants []plancheck.Want
}

// pk is a lookup of at most one row by table's primary key.
func pk(table string) plancheck.Want {
	return plancheck.Want{Index: map[string]string{table: table + "_pkey"}}
}

// conversationByPK is a lookup of a conversation by its primary key. While
// the table is new (a few rows) it ties with the Company lists' indexes,
// which must lead with company_id; docs/decisions.md says why that tie is
// allowed there and nowhere else. A new list index joins Also.
var conversationByPK = plancheck.Want{Index: map[string]string{"conversations": "conversations_pkey"},
	Also: map[string][]string{"conversations": {"conversations_company_created", "conversations_company_status_created"}}}

// operationByPK is a lookup of an operation by its primary key; it ties
// like conversationByPK with the Company list's index while new.
func operationByPK(more ...string) plancheck.Want {
	w := plancheck.Want{Index: map[string]string{"operations": "operations_pkey"},
		Also: map[string][]string{"operations": {"operations_company_created"}}}
	for _, table := range more {
		w.Index[table] = table + "_pkey"
	}
	return w
}

// insert is an INSERT ... VALUES: no table is scanned, nothing to choose.
var insert = plancheck.Want{}

// TestHotStatementPlans records the statements of every hot path, then
// checks their plans on the Companies' first rows (a new deployment,
// never analyzed), after loading many rows (never analyzed), and after
// ANALYZE.
func TestHotStatementPlans(t *testing.T) {
	w := newWorld(t)
	// The paths run for the Company that is large once loaded and for a
	// small one: with statistics, their estimates differ most.
	paths := append(w.hotPaths(t, w.companies[0]), w.hotPaths(t, w.companies[1])...)
	var checks []plancheck.Checked
	for _, p := range paths {
		stmts := w.rec.Record(func() { p.run(t) })
		checks = append(checks, plancheck.Pair(t, p.name, stmts, p.wants)...)
	}
	t.Run("catches", func(t *testing.T) {
		for _, c := range checks {
			if c.Name == "small-a: refresh grant" {
				w.catches(t, c.Statement, c.Want)
				return
			}
		}
		t.Fatal("no refresh grant statement recorded")
	})
	plancheck.Phases(t, w.conn, checks, w.load)
}

// catches shows that the check fails when the plan loses its index: the
// token lookup s, checked against want, with the index it needs dropped,
// with a competing index on company_id added, and with the grant index of
// before migration 00019 put back. Each change is made in a transaction
// rolled back afterwards.
func (w *world) catches(t *testing.T, s plancheck.Statement, want plancheck.Want) {
	for _, ddl := range []string{
		`ALTER TABLE oauth_tokens DROP CONSTRAINT oauth_tokens_pkey`,
		`CREATE INDEX oauth_tokens_company ON oauth_tokens (company_id)`,
		`DROP INDEX oauth_tokens_request; CREATE INDEX oauth_tokens_request ON oauth_tokens (company_id, request_id)`,
	} {
		t.Run(ddl, func(t *testing.T) {
			// An index build records the table's size in pg_class as
			// ANALYZE would, and in place, so a rollback keeps it; the
			// check is of a table never analyzed, so that is undone, in
			// the transaction and after it (as the test's superuser).
			const never = "UPDATE pg_class SET reltuples = -1, relpages = 0 WHERE oid = 'oauth_tokens'::regclass"
			_, err := w.conn.Exec(w.ctx, "BEGIN; "+ddl+"; "+never)
			require.NoError(t, err)
			defer func() {
				_, err := w.conn.Exec(w.ctx, "ROLLBACK; "+never)
				require.NoError(t, err)
			}()
			failed := false
			for _, mode := range plancheck.Modes {
				scans, err := plancheck.Explain(w.ctx, w.conn, s, mode)
				require.NoError(t, err)
				problems := plancheck.Problems(scans, want)
				t.Logf("%s: %v", mode, problems)
				failed = failed || len(problems) > 0
			}
			require.True(t, failed, "the check must fail once %q", ddl)
		})
	}
}

// grant is an issuer request of the client, for no account, whose codes
// and tokens all expire in an hour.
func grant(requestID string, now time.Time) *fosite.Request {
	sess := &issuer.Session{}
	sess.SetExpiresAt(fosite.AuthorizeCode, now.Add(time.Hour))
	sess.SetExpiresAt(fosite.AccessToken, now.Add(time.Hour))
	sess.SetExpiresAt(fosite.RefreshToken, now.Add(time.Hour))
	return &fosite.Request{ID: requestID, RequestedAt: now, Client: &issuer.Client{ID: client},
		RequestedScope: fosite.Arguments{"orders"}, GrantedScope: fosite.Arguments{"orders"}, Session: sess}
}

// hotPaths makes what the hot paths of Company c need and returns them,
// named after c.
func (w *world) hotPaths(t *testing.T, c *tenant.Company) []hot {
	now := time.Now()
	asC := tenant.WithCompany(w.ctx, c)
	companies := tenant.NewStore(w.pool)
	tokens := issuer.NewStore(w.pool)
	sess := sessions.NewStore(w.pool)
	convs := conversations.NewStore(w.pool, conversations.StoreOptions{})
	owner := conversations.Owner{ClientID: client, UserID: "usr_1"}
	text := "where is my order?"
	message := func(id string) *conversations.Message {
		return &conversations.Message{ID: id, Author: conversations.Author{Type: conversations.ResponderHuman}, Text: &text}
	}
	for _, sig := range []string{"code", "pkce", "access", "refresh"} {
		req := grant("req_1", now)
		var err error
		switch sig {
		case "code":
			err = tokens.CreateAuthorizeCodeSession(asC, sig, req)
		case "pkce":
			err = tokens.CreatePKCERequestSession(asC, sig, req)
		case "access":
			err = tokens.CreateAccessTokenSession(asC, sig, req)
		case "refresh":
			err = tokens.CreateRefreshTokenSession(asC, sig, "", req)
		}
		require.NoError(t, err)
	}
	_, err := w.pool.Exec(w.ctx, `INSERT INTO sessions (company_id, client_id, sid, user_id) VALUES ($1, $2, 'sid_1', 'usr_1')`,
		c.ID, client)
	require.NoError(t, err)
	_, err = w.pool.Exec(w.ctx, `INSERT INTO web_sessions (company_id, token, client_id, sid, scopes, extensions,
			created_at, expires_at)
		VALUES ($1, sha256('cookie_1'), $2, 'sid_1', '{}', '{}', $3::timestamptz, $3::timestamptz + interval '1 hour')`,
		c.ID, client, now)
	require.NoError(t, err)
	// Later than the Session's last use by more than a minute, so the
	// lookup records a use.
	joins := browserjoin.New(browserjoin.Options{Store: browserjoin.NewStore(w.pool),
		Now: func() time.Time { return now.Add(2 * time.Minute) }})
	conv, err := convs.Start(w.ctx, c.ID, owner, conversations.StartRequest{Message: message("m1")}, conversations.Policy{})
	require.NoError(t, err)

	ops := operations.NewStore(w.pool)
	opsOwner := operations.Owner{ClientID: client, UserID: "usr_1"}
	opRequest := &operations.Request{Method: "POST", Path: "/orders/o1/exchanges", Body: []byte(`{}`)}
	op, err := ops.Propose(w.ctx, c.ID, opsOwner, operations.InterfaceAPI, "orders-api",
		&operations.Proposal{ActionKey: "exchange", Terms: json.RawMessage(`{"order_id": "o1"}`), ExpiresIn: 3600},
		opRequest, "", now)
	require.NoError(t, err)
	atOnce, err := ops.Propose(w.ctx, c.ID, opsOwner, operations.InterfaceAPI, "orders-api",
		&operations.Proposal{ActionKey: "exchange 2", Terms: json.RawMessage(`{"order_id": "o2"}`), ExpiresIn: 3600},
		opRequest, "", now)
	require.NoError(t, err)
	webRequest := &operations.Request{Method: "POST", Path: "/cart/checkout", Body: []byte(`{}`)}
	webOp, err := ops.Propose(w.ctx, c.ID, opsOwner, operations.InterfaceWeb, c.Settings.Organization.Domain,
		&operations.Proposal{ActionKey: "checkout", Terms: json.RawMessage(`{"total": "12.00"}`), ExpiresIn: 3600},
		webRequest, "", now)
	require.NoError(t, err)
	webApproval := &operations.Approval{OperationID: webOp.OperationID, Revision: webOp.Revision,
		Approver: operations.ApproverUser}
	recorded, err := ops.Record(w.ctx, c.ID, webApproval, &verified.Facts{}, now)
	require.NoError(t, err)
	require.True(t, recorded)

	tokenByPK := pk("oauth_tokens")
	paths := []hot{
		{name: "company by slug", run: func(t *testing.T) {
			_, err := companies.Get(w.ctx, c.Slug)
			require.NoError(t, err)
		}, wants: []plancheck.Want{{Index: map[string]string{"companies": "companies_slug_key"}}}},
		{name: "company by domain", run: func(t *testing.T) {
			_, err := companies.GetByDomain(w.ctx, c.Settings.Organization.Domain)
			require.NoError(t, err)
		}, wants: []plancheck.Want{{Index: map[string]string{"company_domains": "company_domains_pkey", "companies": "companies_pkey"}}}},
		{name: "client assertion jti", run: func(t *testing.T) {
			_, err := clientauth.NewPGReplays(w.pool).Use(w.ctx, "https://poppy.test/t/"+c.Slug, client, "jti_1", now.Add(time.Minute))
			require.NoError(t, err)
		}, wants: []plancheck.Want{insert}},
		{name: "DPoP jti", run: func(t *testing.T) {
			_, err := dpop.NewStore(w.pool).Seen(w.ctx, c.ID, "jkt_1", "jti_1", now.Add(time.Minute))
			require.NoError(t, err)
		}, wants: []plancheck.Want{insert}},
		{name: "Session", run: func(t *testing.T) {
			_, err := sess.Get(w.ctx, c.ID, client, "sid_1")
			require.NoError(t, err)
		}, wants: []plancheck.Want{pk("sessions")}},
		{name: "web session", run: func(t *testing.T) {
			ws, err := joins.LookupToken(w.ctx, c, "cookie_1")
			require.NoError(t, err)
			require.NotNil(t, ws)
		}, wants: []plancheck.Want{{Index: map[string]string{"web_sessions": "web_sessions_pkey", "sessions": "sessions_pkey",
			"oauth_tokens": "oauth_tokens_account"}}, pk("sessions")}},
		{name: "refresh grant", run: func(t *testing.T) {
			// What fosite's refresh handler asks of the store.
			req, err := tokens.GetRefreshTokenSession(asC, "refresh", nil)
			require.NoError(t, err)
			ctx, err := tokens.BeginTX(asC)
			require.NoError(t, err)
			require.NoError(t, tokens.RotateRefreshToken(ctx, req.GetID(), "refresh"))
			require.NoError(t, tokens.CreateAccessTokenSession(ctx, "access_2", grant("req_1", now)))
			require.NoError(t, tokens.CreateRefreshTokenSession(ctx, "refresh_2", "", grant("req_1", now)))
			require.NoError(t, tokens.Commit(ctx))
		}, wants: []plancheck.Want{tokenByPK, tokenByPK, insert, insert}},
		{name: "code exchange", run: func(t *testing.T) {
			_, err := tokens.GetAuthorizeCodeSession(asC, "code", nil)
			require.NoError(t, err)
			_, err = tokens.GetPKCERequestSession(asC, "pkce", nil)
			require.NoError(t, err)
			require.NoError(t, tokens.DeletePKCERequestSession(asC, "pkce"))
			ctx, err := tokens.BeginTX(asC)
			require.NoError(t, err)
			require.NoError(t, tokens.InvalidateAuthorizeCodeSession(ctx, "code"))
			require.NoError(t, tokens.Commit(ctx))
		}, wants: []plancheck.Want{tokenByPK, tokenByPK, tokenByPK, tokenByPK, tokenByPK}},
		{name: "access token", run: func(t *testing.T) {
			_, err := tokens.AccessTokenActive(w.ctx, c.ID, "access", now)
			require.NoError(t, err)
			_, err = tokens.GetAccessTokenSession(asC, "access", nil)
			require.NoError(t, err)
		}, wants: []plancheck.Want{tokenByPK, tokenByPK}},
		{name: "revoke grant", run: func(t *testing.T) {
			require.NoError(t, tokens.RevokeAccessToken(asC, "req_1"))
		}, wants: []plancheck.Want{{Index: map[string]string{"oauth_tokens": "oauth_tokens_request"}, MaxRows: 10}}},
		{name: "conversation", run: func(t *testing.T) {
			_, err := convs.Get(w.ctx, c.ID, conv.ID)
			require.NoError(t, err)
			_, _, err = convs.Events(w.ctx, c.ID, conv.ID, 0, 100)
			require.NoError(t, err)
		}, wants: []plancheck.Want{conversationByPK, {Index: map[string]string{"conversation_events": "conversation_events_pkey"}, MaxRows: 100}}},
		{name: "message", run: func(t *testing.T) {
			_, err := convs.Send(w.ctx, c.ID, owner, conv.ID, message("m2"), conversations.Policy{})
			require.NoError(t, err)
			// A plain message is one statement: the conversation's row
			// and the message ID, each by its key.
		}, wants: []plancheck.Want{{Index: map[string]string{"conversations": "conversations_pkey",
			"conversation_message_ids": "conversation_message_ids_pkey"}, Also: conversationByPK.Also}}},
		{name: "approved operation", run: func(t *testing.T) {
			a := &operations.Approval{OperationID: op.OperationID, Revision: op.Revision, Approver: operations.ApproverUser}
			_, err := ops.Check(w.ctx, c.ID, opsOwner, operations.InterfaceAPI, "orders-api", a, opRequest, now)
			require.NoError(t, err)
			cl, err := ops.Claim(w.ctx, c.ID, a, &verified.Facts{}, time.Minute, now)
			require.NoError(t, err)
			_, err = ops.Performed(w.ctx, c.ID, op.OperationID, cl.ID, &operations.Response{Status: 201}, now)
			require.NoError(t, err)
		}, wants: []plancheck.Want{operationByPK(), pk("operation_revisions"), operationByPK(),
			operationByPK("operation_revisions"), operationByPK()}},
		// The gateway's path: the checks and the claim in one statement.
		{name: "approved operation at once", run: func(t *testing.T) {
			a := &operations.Approval{OperationID: atOnce.OperationID, Revision: atOnce.Revision,
				Approver: operations.ApproverUser}
			_, cl, err := ops.ClaimChecked(w.ctx, c.ID, opsOwner, operations.InterfaceAPI, "orders-api", a, opRequest,
				&verified.Facts{}, time.Minute, now, func(context.Context, *operations.Checked) error {
					return nil
				})
			require.NoError(t, err)
			require.NotNil(t, cl)
		}, wants: []plancheck.Want{operationByPK("operation_revisions")}},
		{name: "website operation", run: func(t *testing.T) {
			_, err := ops.Lookup(w.ctx, c.ID, webOp.OperationID)
			require.NoError(t, err)
			_, err = ops.Find(w.ctx, c.ID, opsOwner, webRequest, now)
			require.NoError(t, err)
			ok, err := ops.UseUp(w.ctx, c.ID, webApproval, now)
			require.NoError(t, err)
			require.True(t, ok)
		}, wants: []plancheck.Want{operationByPK("operation_revisions", "operation_approvals"),
			{Index: map[string]string{"operations": "operations_action", "operation_approvals": "operation_approvals_pkey",
				"operation_revisions": "operation_revisions_pkey"}, MaxRows: 100,
				Also: map[string][]string{"operations": {"operations_pkey"}}},
			pk("operation_approvals")}},
		{name: "operation", run: func(t *testing.T) {
			_, err = ops.Get(w.ctx, c.ID, op.OperationID)
			require.NoError(t, err)
		}, wants: []plancheck.Want{{Index: map[string]string{"operations": "operations_pkey",
			"operation_revisions": "operation_revisions_pkey"},
			Also: map[string][]string{"operations": {"operations_company_created"}}, MaxRows: 10}}},
	}
	for i := range paths {
		paths[i].name = c.Slug + ": " + paths[i].name
	}
	return paths
}

// load adds rows for every Company: many for the first, fewer for the
// others, as a deployment that has run for a while, without ANALYZE.
func (w *world) load(t *testing.T) {
	t.Helper()
	// Many more Companies than the test made, each with a domain.
	_, err := w.conn.Exec(w.ctx, `WITH c AS (INSERT INTO companies (slug, settings)
		SELECT 'loaded-' || g, '{}' FROM generate_series(1, 2000) g RETURNING id)
		INSERT INTO company_domains (domain, company_id) SELECT 'loaded-' || id || '.example', id FROM c`)
	require.NoError(t, err)
	for i, c := range w.companies {
		n := 300
		if i == 0 {
			n = 30000
		}
		for _, sql := range loads {
			_, err := w.conn.Exec(w.ctx, sql, c.ID, n)
			require.NoError(t, err, sql)
		}
	}
}

// loads insert $2 rows of a table for Company $1.
var loads = []string{
	`INSERT INTO company_domains (domain, company_id) SELECT 'd' || g || '.c' || $1::bigint || '.example', $1
	FROM generate_series(1, $2::int / 1000 + 2) g`,
	`INSERT INTO operations (company_id, id, client_id, user_id, interface, target, action_key, status, revision,
		created_at, updated_at, expires_at)
	SELECT $1, 'op_load_' || g, 'https://agent' || g % 50 || '.test/client', 'usr_' || g % 1000, 'api', 'orders-api',
		'key_' || g, (ARRAY['proposed', 'performed'])[1 + g % 2], 'rev_1', now(), now(), now() + interval '1 day'
	FROM generate_series(1, $2::int / 3) g`,
	`INSERT INTO operation_revisions (company_id, operation_id, revision, terms, request, created_at, expires_at)
	SELECT $1, 'op_load_' || g, 'rev_1', '{}', '{}', now(), now() + interval '1 day'
	FROM generate_series(1, $2::int / 3) g`,
	`INSERT INTO operation_approvals (company_id, operation_id, revision, approval, facts, recorded_at)
	SELECT $1, 'op_load_' || g, 'rev_1', '{}', '{}', now() FROM generate_series(1, $2::int / 3, 2) g`,
	`INSERT INTO oauth_tokens (company_id, kind, signature, request_id, client_id, requested_at, scopes, granted_scopes,
		form, session, active, expires_at)
	SELECT $1, (ARRAY['access', 'refresh', 'code', 'pkce'])[1 + g % 4], sha256(($1::bigint || ' ' || g)::bytea),
		'load_' || $1::bigint || '_' || g / 4, 'https://agent' || g % 50 || '.test/client', now(), '{orders}', '{orders}',
		'{}', '{}', g % 3 <> 0, now() + interval '1 hour'
	FROM generate_series(1, $2::int) g`,
	`INSERT INTO sessions (company_id, client_id, sid, user_id)
	SELECT $1, 'https://agent' || g % 50 || '.test/client', 'sid_load_' || g, 'usr_' || g % 1000
	FROM generate_series(1, $2::int) g`,
	`INSERT INTO web_sessions (company_id, token, client_id, sid, scopes, extensions, created_at, expires_at)
	SELECT $1, sha256(('web ' || g)::bytea), 'https://agent' || g % 50 || '.test/client', 'sid_load_' || g, '{}', '{}',
		now(), now() + interval '1 hour'
	FROM generate_series(1, $2::int, 2) g`,
	`INSERT INTO conversations (company_id, id, client_id, user_id, status, responder, created_at, last_activity_at, last_seq)
	SELECT $1, 'conv_load_' || g, 'https://agent' || g % 50 || '.test/client', 'usr_' || g % 1000,
		(ARRAY['working', 'idle', 'queued', 'closed'])[1 + g % 4], 'agent', now(), now(), 3
	FROM generate_series(1, $2::int / 3) g`,
	`INSERT INTO conversation_events (company_id, conversation_id, seq, type, body, created_at)
	SELECT $1, 'conv_load_' || g, s, 'message', '{}', now()
	FROM generate_series(1, $2::int / 3) g, generate_series(1, 3) s`,
	`INSERT INTO conversation_message_ids (company_id, client_id, user_id, message_id, conversation_id, content_hash, response)
	SELECT $1, 'https://agent' || g % 50 || '.test/client', 'usr_' || g % 1000, 'msg_' || g, 'conv_load_' || g, '\x00', '{}'
	FROM generate_series(1, $2::int / 3) g`,
}
