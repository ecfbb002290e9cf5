-- +goose Up
-- The Company Agent's side of conversations (internal/conversations,
-- docs/company-agent.md): its webhook, the Company API, and the jobs that
-- time out handoffs, close idle conversations and prune old events.

-- The facts the platform verified on the Personal Agent request that added
-- an event (client_id, sid, user_id, agent_id, account, scopes, declared
-- extensions), sent to the agent webhook in Poppy-Verified. They live here,
-- not in body, because bodies are what Personal Agents read.
ALTER TABLE conversation_events ADD COLUMN verified jsonb;

-- Who added the event: the Personal Agent side (the default), the Company
-- through its API (never sent back to its own webhook), or the platform's
-- jobs. A transaction that is not the Personal Agent's names itself with
-- set_config('poppyhost.event_origin', ..., true); after it the setting
-- reads '' on that connection, hence nullif.
ALTER TABLE conversation_events ADD COLUMN origin text NOT NULL
    DEFAULT coalesce(nullif(current_setting('poppyhost.event_origin', true), ''), 'personal_agent')
    CHECK (origin IN ('personal_agent', 'company', 'platform'));

-- Each Company's webhook signing secret (Standard Webhooks), 32 random
-- bytes, returned once when made. The one it replaced keeps signing next to
-- it until previous_until, so the Company can switch without failed
-- deliveries. Unencrypted, like company_secrets: the HMAC needs the secret.
CREATE TABLE conversation_webhook_secrets (
    company_id      bigint      PRIMARY KEY REFERENCES companies (id) ON DELETE CASCADE,
    secret          bytea       NOT NULL CHECK (length(secret) = 32),
    created_at      timestamptz NOT NULL,
    previous_secret bytea       CHECK (length(previous_secret) = 32),
    previous_until  timestamptz
);

-- The Company API lists a Company's conversations newest first.
CREATE INDEX conversations_company_created ON conversations (company_id, created_at DESC, id DESC);
-- The jobs work one Company at a time, with its own limits.
CREATE INDEX conversations_company_queued ON conversations (company_id, queued_at) WHERE status = 'queued';
CREATE INDEX conversations_company_open ON conversations (company_id, last_activity_at) WHERE status <> 'closed';
CREATE INDEX conversations_company_closed ON conversations (company_id, last_activity_at) WHERE status = 'closed';
CREATE INDEX conversation_events_company_created ON conversation_events (company_id, created_at);

-- +goose Down
DROP INDEX conversation_events_company_created;
DROP INDEX conversations_company_closed;
DROP INDEX conversations_company_open;
DROP INDEX conversations_company_queued;
DROP INDEX conversations_company_created;
DROP TABLE conversation_webhook_secrets;
ALTER TABLE conversation_events DROP COLUMN origin;
ALTER TABLE conversation_events DROP COLUMN verified;
