-- +goose Up
-- Conversations' time-driven work found by due time (internal/conversations,
-- sweeps.go): each conversation keeps when it next needs the platform —
-- its handoff times out (spec 8.9), it closes for want of activity (8.12),
-- its oldest events leave the retention period (8.5) — computed from its
-- Company's settings when the conversation changes, and again when those
-- settings change. One job then takes what is due across all Companies,
-- so a Company with nothing due costs nothing.

-- When the oldest event still kept was added; NULL when none is kept.
ALTER TABLE conversations ADD COLUMN first_event_at timestamptz;
ALTER TABLE conversations ADD COLUMN handoff_due_at timestamptz;
ALTER TABLE conversations ADD COLUMN idle_due_at timestamptz;
ALTER TABLE conversations ADD COLUMN prune_due_at timestamptz;

-- The limits below: the Company's settings.conversations, 0 or missing
-- meaning the defaults conversations.DefaultHandoffTimeout,
-- DefaultIdleClose and DefaultRetentionDays (a test compares them).
-- +goose StatementBegin
CREATE FUNCTION conversations_set_due() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    cv jsonb;
BEGIN
    SELECT settings -> 'conversations' INTO cv FROM companies WHERE id = NEW.company_id;
    NEW.handoff_due_at := CASE WHEN NEW.status = 'queued' THEN NEW.queued_at +
        make_interval(secs => coalesce(nullif((cv ->> 'handoff_timeout_seconds')::bigint, 0), 300)) END;
    -- A parent waits for its open Direct Conversation (spec 8.10).
    NEW.idle_due_at := CASE WHEN NEW.status <> 'closed' AND NEW.open_direct_id IS NULL THEN NEW.last_activity_at +
        make_interval(secs => coalesce(nullif((cv ->> 'idle_close_seconds')::bigint, 0), 604800)) END;
    -- With no event kept, the next one is added at last_activity_at or
    -- later; a closed conversation with none goes at that time too.
    NEW.prune_due_at := coalesce(NEW.first_event_at, NEW.last_activity_at) +
        make_interval(days => coalesce(nullif((cv ->> 'retention_days')::int, 0), 90));
    RETURN NEW;
END
$$;
-- +goose StatementEnd

CREATE TRIGGER conversations_due BEFORE INSERT OR UPDATE OF status, queued_at, last_activity_at, open_direct_id, first_event_at
    ON conversations FOR EACH ROW EXECUTE FUNCTION conversations_set_due();

UPDATE conversations c SET first_event_at = (SELECT e.created_at FROM conversation_events e
    WHERE e.company_id = c.company_id AND e.conversation_id = c.id AND e.seq = c.first_seq);

CREATE INDEX conversations_handoff_due ON conversations (handoff_due_at) WHERE handoff_due_at IS NOT NULL;
CREATE INDEX conversations_idle_due ON conversations (idle_due_at) WHERE idle_due_at IS NOT NULL;
CREATE INDEX conversations_prune_due ON conversations (prune_due_at) WHERE prune_due_at IS NOT NULL;

-- The Company API's list, filtered by status or not, newest first: each an
-- index range scan (conversations_company_created serves no filter).
CREATE INDEX conversations_company_status_created ON conversations (company_id, status, created_at DESC, id DESC);

-- The jobs no longer look for work one Company at a time.
DROP INDEX conversations_company_queued;
DROP INDEX conversations_company_open;
DROP INDEX conversations_company_closed;
DROP INDEX conversations_activity;
DROP INDEX conversations_queued;

-- +goose Down
CREATE INDEX conversations_queued ON conversations (queued_at) WHERE status = 'queued';
CREATE INDEX conversations_activity ON conversations (last_activity_at) WHERE status <> 'closed';
CREATE INDEX conversations_company_closed ON conversations (company_id, last_activity_at) WHERE status = 'closed';
CREATE INDEX conversations_company_open ON conversations (company_id, last_activity_at) WHERE status <> 'closed';
CREATE INDEX conversations_company_queued ON conversations (company_id, queued_at) WHERE status = 'queued';
DROP INDEX conversations_company_status_created;
DROP TRIGGER conversations_due ON conversations;
DROP FUNCTION conversations_set_due();
ALTER TABLE conversations DROP COLUMN prune_due_at;
ALTER TABLE conversations DROP COLUMN idle_due_at;
ALTER TABLE conversations DROP COLUMN handoff_due_at;
ALTER TABLE conversations DROP COLUMN first_event_at;
