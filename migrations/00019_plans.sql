-- +goose Up
-- Query plans that hold without statistics (issue 24, docs/decisions.md
-- "Query plans that hold"). A token is looked up by its primary key
-- (company_id, kind, signature). The grant and account indexes began with
-- company_id too, so on a table never analyzed (or a prepared statement's
-- generic plan made while the table was small) the planner could read a
-- token through either of them with company_id alone: every token of the
-- Company. Neither lookup they serve needs company_id first: a grant's
-- request_id is random, and an account id is unique across Companies. The
-- statements still say company_id; only the primary key now starts with it.
-- The grant index names the Company and kind after request_id, so a
-- revocation (company_id, kind, request_id) matches it on more columns
-- than the primary key's prefix (company_id, kind), which would read every
-- token of that kind of the Company. The account index is also partial on account_id IS NOT NULL: a
-- statement that names no account (rotating a refresh token: kind
-- 'refresh', active) cannot read the whole index instead of its key.
DROP INDEX oauth_tokens_request;
CREATE INDEX oauth_tokens_request ON oauth_tokens (request_id, company_id, kind);
DROP INDEX oauth_tokens_account;
CREATE INDEX oauth_tokens_account ON oauth_tokens (account_id, client_id)
    WHERE kind = 'refresh' AND active AND account_id IS NOT NULL;

-- The same for the sweep's index of claims being performed: storing an
-- answer (status 'performing', by primary key) implied its predicate, so
-- a small table could be planned as a read of every claim in flight.
-- The sweep asks for lapsed leases, which are never NULL.
DROP INDEX operations_unsettled;
CREATE INDEX operations_unsettled ON operations (lease_until) WHERE status = 'performing' AND lease_until IS NOT NULL;

-- Recorded website approvals were also indexed by Company where unused
-- (used_at IS NULL). Without statistics PostgreSQL takes IS NULL to hold
-- for one row in two hundred, so that index looked tiny and won over the
-- primary key for an approval's lookup and its use, reading every unused
-- approval of the Company. The one statement it served, the approvals an
-- owner can apply to a request, starts from the owner's proposed
-- operations (operations_action) and reaches each approval by its key.
DROP INDEX operation_approvals_unused;

-- Device Sign-In: a poll finds its request by (company_id, device_code),
-- the primary key, but the user code's uniqueness was (company_id,
-- user_code), so a small table could be polled through it. The user code
-- leads its own index now; the device page, which looks up by user code,
-- fixes both its columns.
ALTER TABLE device_grants DROP CONSTRAINT device_grants_company_id_user_code_key,
    ADD CONSTRAINT device_grants_user_code_company_id_key UNIQUE (user_code, company_id);

-- The tables written on every request: replay jtis (a row per request,
-- deleted a minute later), tokens (two rows per refresh) and conversation
-- events. Autovacuum's defaults wait for a fifth of a table to change
-- before vacuuming and a tenth before analyzing; these tables turn over
-- far faster, so they are vacuumed and analyzed after a small share
-- (docs/operations.md, "Autovacuum and statistics").
ALTER TABLE session_jtis SET (autovacuum_vacuum_scale_factor = 0.02, autovacuum_analyze_scale_factor = 0.02);
ALTER TABLE dpop_jtis SET (autovacuum_vacuum_scale_factor = 0.02, autovacuum_analyze_scale_factor = 0.02);
ALTER TABLE client_assertion_jtis SET (autovacuum_vacuum_scale_factor = 0.02, autovacuum_analyze_scale_factor = 0.02);
ALTER TABLE oauth_tokens SET (autovacuum_vacuum_scale_factor = 0.05, autovacuum_analyze_scale_factor = 0.02);
ALTER TABLE conversation_events SET (autovacuum_vacuum_scale_factor = 0.05, autovacuum_analyze_scale_factor = 0.02);

-- +goose Down
ALTER TABLE device_grants DROP CONSTRAINT device_grants_user_code_company_id_key,
    ADD CONSTRAINT device_grants_company_id_user_code_key UNIQUE (company_id, user_code);
CREATE INDEX operation_approvals_unused ON operation_approvals (company_id, recorded_at) WHERE used_at IS NULL;
ALTER TABLE conversation_events RESET (autovacuum_vacuum_scale_factor, autovacuum_analyze_scale_factor);
ALTER TABLE oauth_tokens RESET (autovacuum_vacuum_scale_factor, autovacuum_analyze_scale_factor);
ALTER TABLE client_assertion_jtis RESET (autovacuum_vacuum_scale_factor, autovacuum_analyze_scale_factor);
ALTER TABLE dpop_jtis RESET (autovacuum_vacuum_scale_factor, autovacuum_analyze_scale_factor);
ALTER TABLE session_jtis RESET (autovacuum_vacuum_scale_factor, autovacuum_analyze_scale_factor);
DROP INDEX operations_unsettled;
CREATE INDEX operations_unsettled ON operations (lease_until) WHERE status = 'performing';
DROP INDEX oauth_tokens_account;
CREATE INDEX oauth_tokens_account ON oauth_tokens (company_id, account_id, client_id) WHERE kind = 'refresh' AND active;
DROP INDEX oauth_tokens_request;
CREATE INDEX oauth_tokens_request ON oauth_tokens (company_id, request_id);
