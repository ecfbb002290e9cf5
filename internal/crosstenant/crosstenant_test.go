package crosstenant_test

// What the suite covers. Each covered method is called as Company B on
// data Company A made, must fail or find nothing, and A's data is then
// read back as A unchanged. Subtests are named store/method.
//
//	store                    method                          covered  how B's call must end
//	tenant.Store             CreateAPIKey                    yes      B's key resolves to B, never to A
//	                         ListAPIKeys                     yes      A's keys not listed
//	                         RevokeAPIKey                    yes      ErrNotFound, A's key still valid
//	                         CompanyForAPIKey, APIKeyFor     yes      A's secret resolves to A (and A's key) only
//	                         Modify                          yes      B cannot take A's domain (ConflictError)
//	                         Create, Get, GetByID,           no       the operator's view of all Companies: keyed
//	                         GetByDomain, List, Delete                by the Company itself, not within one
//	                         EnsureOperatorToken, Operator-  no       operator tokens belong to no Company
//	                         TokenFor, Create/Revoke/List-
//	                         OperatorToken(s)
//	audit.Store              List                            yes      A's entries not listed as B's
//	                         Sweep                           no       a sweep over every Company
//	accounts.Store           Create                          yes      the same username as A's is B's own account
//	                         Lookup                          yes      ErrNotFound
//	                         Authenticate                    yes      A's password does not sign in at B
//	                         SetPassword                     yes      ErrNotFound, A's password unchanged
//	                         (login failures) Authenticate   yes      B's failures never lock A; B's success
//	                                                                  never clears A's lock
//	                         DeleteStaleLoginFailures        no       a sweep over every Company
//	sessions.Store           Get                             yes      ErrNotFound
//	                         End                             yes      ErrNotFound, A's Session not ended
//	                         BindAccount                     yes      ErrNotFound, A's Session unbound
//	                         SweepJTIs                       no       a sweep over every Company
//	                         (lookup, create, touch)         no       unexported, reached with a signed Session
//	                                                                  JWT through sessions.Manager
//	signing.Keys             Sign / Verify                   yes      A's token does not verify as B
//	                         Signer, PublicSet               yes      B's keys are not A's
//	                         Rotate                          yes      A's current key unchanged
//	                         Secret                          yes      B's secret is not A's
//	                         ServeJWKS, MountAdmin           no       HTTP handlers over PublicSet and Rotate
//	issuer.Store             Create/Get AuthorizeCode-       yes      fosite.ErrNotFound as B (Company from the
//	                         Session, InvalidateAuthorize-            context); invalidate refused; A's code
//	                         CodeSession                              still active
//	                         Get/DeletePKCERequestSession    yes      not found; A's kept
//	                         Get/DeleteAccessTokenSession    yes      not found; A's still active
//	                         Get/DeleteRefreshTokenSession   yes      not found; A's still active
//	                         RotateRefreshToken              yes      refused; A's still active
//	                         RevokeRefreshToken,             yes      nothing revoked of A's grant
//	                         RevokeAccessToken
//	                         AccessTokenActive               yes      false
//	                         Connections                     yes      none
//	                         Disconnect                      yes      A's tokens and approved device grant kept
//	                         GetClient                       no       clients are not stored: a client_id is a
//	                                                                  URL resolved by internal/agentid
//	                         Client assertion JWT methods    no       no-ops (clientauth keeps the jti store)
//	                         BeginTX, Commit, Rollback       no       hold no data
//	                         DeleteExpired                   no       a sweep over every Company
//	                         (device grant, issuer logins)   no       unexported, reached through fosite's
//	                                                                  device and login pages over HTTP;
//	                                                                  Disconnect covers device grants
//	browserjoin.Store        LookupToken (Handler)           yes      nil: A's web session not found as B
//	                         End (Handler)                   yes      false, A's web session still active
//	                         SignedOut                       yes      A's web session keeps its account
//	                         (submit) step 3 over HTTP       yes      400 at B's router; A's code not used up
//	                                                                  and still joins A's browser
//	                         (newCode) step 1                no       makes a new code of the Company in the
//	                                                                  context only: nothing of A's to reach
//	                         (authorize) step 2              no       needs a verified Session in the context,
//	                                                                  which only sessions.Manager puts there
//	feedback.Store           List                            yes      A's reports not listed
//	                         (add)                           no       unexported, reached through the
//	                                                                  feedback endpoint
//	registry.Store           GetAPI, APIUpdatedAt            yes      ErrNotFound
//	                         ListAPIs, ListAPINames          yes      A's APIs not listed
//	                         PutAPI                          yes      B's own API; A's unchanged
//	                         DeleteAPI                       yes      ErrNotFound, A's kept
//	                         GetTool                         yes      ErrNotFound
//	                         ListTools, HasTools             yes      none
//	                         PutTool                         yes      B's own tool; A's unchanged
//	                         PutAPIIf, PutToolIf             yes      the condition sees none of A's; B's own
//	                         DeleteTool                      yes      ErrNotFound, A's kept
//	conversations.Store      Get                             yes      nil
//	                         Events                          yes      none
//	                         Send, Handoff, Close            yes      conversation_not_found; A's unchanged
//	                         CompanyGet, CompanyList         yes      nil / none
//	                         CompanyPost, CompanyStatus,     yes      conversation_not_found; A's events and
//	                         CompanyJoin, CompanyHandoff-             status unchanged
//	                         Unavailable, CompanyUser-
//	                         Requested, CompanyAuthorization,
//	                         CompanyHandBack, CompanyClose,
//	                         CompanyDelta
//	                         Inbox, CompanyList's search     yes      none of A's
//	                         Start                           yes      a parent of A's is not found; A's
//	                                                                  message ID starts B's own conversation
//	conversations.Delivery   RotateSecret                    yes      A's webhook secret unchanged
//	conversations.Hub        Watch, PublishDelta             yes      B's delta under A's conversation ID
//	                                                                  reaches no reader of A's
//	                         WatchCompany                    yes      A's event wakes no inbox of B's
//	operations.Store         Get, List, Lookup, RevisionOf,  yes      not found / none / Stale
//	                         State, Check
//	                         Propose                         yes      B's own operation, never A's
//	                         Claim, Record, Find, UseUp,     yes      nothing claimed, recorded or used;
//	                         GiveBack, DeclineUnclaimed               A's approval and revision unchanged
//	                         Lease, Performing, Performed,   yes      nothing leased, performed, released or
//	                         Release, GiveUp                          given up of A's claim
//	                         Resolve                         yes      ErrNotFound, A's unknown operation kept
//	                         Stalled, Sweep                  no       the rescue's and the sweep's scans over
//	                                                                  every Company
//	                         (conversation operation         no       written by the operations collaborator's
//	                         outcomes)                                jobs, reached through the engine
//	clientauth.PGReplays     Use                             yes      keyed by the Company's issuer: A's jti
//	                                                                  does not count at B, and stays seen at A
//	                         Sweep                           no       a sweep over every Company
//	dpop.Store               Seen                            yes      A's proof jti does not count at B, and
//	                                                                  stays seen at A
//	                         Sweep                           no       a sweep over every Company
//	console.Store            List                            yes      none of A's staff
//	                         Authenticate                    yes      A's email and password do not sign in at B
//	                         SetRole, Remove                 yes      ErrNotFound, A's member unchanged
//	                         CreateInvite, AcceptInvite      yes      A's invite token is not found at B; A's
//	                                                                  still works at A
//	                         Invites, RevokeInvite           yes      A's invite not listed; ErrNotFound, kept
//	                         Create                          yes      the same email as A's is B's own member
//	                         DeleteExpired                   no       a sweep over every Company
//	                         (sessions, passkeys, ceremo-    yes      in package console (store_tenant_test.go:
//	                         nies, TOTP, invite lookup)               unexported): B finds none of A's, A's kept

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/tenant"
	"github.com/poppyhost/poppyhost/internal/testkit/testdb"
)

// world is one test's database with two Companies: A owns the data, B
// tries to reach it.
type world struct {
	ctx       context.Context
	pool      *pgxpool.Pool
	companies *tenant.Store
	a, b      *tenant.Company
}

func newWorld(t *testing.T) *world {
	t.Helper()
	pool := testdb.NewPool(t)
	w := &world{ctx: context.Background(), pool: pool, companies: tenant.NewStore(pool)}
	w.a = w.company(t, "alpha", "alpha.example")
	w.b = w.company(t, "bravo", "bravo.example")
	return w
}

func (w *world) company(t *testing.T, slug, domain string) *tenant.Company {
	t.Helper()
	s := tenant.DefaultSettings()
	s.Organization.Name = slug
	s.Organization.Domain = domain
	s.Auth.Scopes = map[string]string{"orders": "Your orders"}
	c, err := w.companies.Create(w.ctx, slug, s)
	require.NoError(t, err)
	return c
}

// asA and asB are contexts carrying A or B, for stores that take the
// Company from the context.
func (w *world) asA() context.Context { return tenant.WithCompany(w.ctx, w.a) }
func (w *world) asB() context.Context { return tenant.WithCompany(w.ctx, w.b) }
