-- +goose Up
-- Accepting a message is the conversations' hot path (issue 19). It moves
-- last_activity_at, and the deadline trigger then read the Company's
-- settings and moved idle_due_at, an indexed column, so every message
-- rewrote the row with a new entry in each of its indexes. Now an update
-- that moves only last_activity_at forward keeps the deadlines as they
-- are: idle_due_at then comes early, never late, and the idle sweep finds
-- it stale and has the trigger compute it again (store_sweeps.go: stale,
-- and every touch there leaves last_activity_at unchanged). The row can
-- then be updated in place (a HOT update), its indexes untouched.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION conversations_set_due() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    cv jsonb;
BEGIN
    IF TG_OP = 'UPDATE' AND NEW.last_activity_at > OLD.last_activity_at
        AND NEW.status = OLD.status
        AND NEW.queued_at IS NOT DISTINCT FROM OLD.queued_at
        AND NEW.open_direct_id IS NOT DISTINCT FROM OLD.open_direct_id
        AND NEW.first_event_at IS NOT NULL AND NEW.first_event_at = OLD.first_event_at THEN
        RETURN NEW;
    END IF;
    SELECT settings -> 'conversations' INTO cv FROM companies WHERE id = NEW.company_id;
    NEW.handoff_due_at := CASE WHEN NEW.status = 'queued' THEN NEW.queued_at +
        make_interval(secs => coalesce(nullif((cv ->> 'handoff_timeout_seconds')::bigint, 0), 300)) END;
    -- A parent waits for its open Direct Conversation (spec 8.10).
    NEW.idle_due_at := CASE WHEN NEW.status <> 'closed' AND NEW.open_direct_id IS NULL THEN NEW.last_activity_at +
        make_interval(secs => coalesce(nullif((cv ->> 'idle_close_seconds')::bigint, 0), 604800)) END;
    -- With no event kept, the next one is added at last_activity_at or
    -- later; a closed conversation with none goes at that time too.
    NEW.prune_due_at := coalesce(NEW.first_event_at, NEW.last_activity_at) +
        make_interval(hours => 24 * coalesce(nullif((cv ->> 'retention_days')::int, 0), 90));
    RETURN NEW;
END
$$;
-- +goose StatementEnd

-- Room on each page for the new version of a row updated in place.
ALTER TABLE conversations SET (fillfactor = 90);

-- Every read of events is by conversation (the primary key); nothing
-- looks events up by time across conversations since the sweeps went by
-- deadline (migration 00020), and each index costs every event's insert.
DROP INDEX conversation_events_created_at;
DROP INDEX conversation_events_company_created;

-- +goose Down
ALTER TABLE conversations RESET (fillfactor);
CREATE INDEX conversation_events_company_created ON conversation_events (company_id, created_at);
CREATE INDEX conversation_events_created_at ON conversation_events (created_at);
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION conversations_set_due() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    cv jsonb;
BEGIN
    SELECT settings -> 'conversations' INTO cv FROM companies WHERE id = NEW.company_id;
    NEW.handoff_due_at := CASE WHEN NEW.status = 'queued' THEN NEW.queued_at +
        make_interval(secs => coalesce(nullif((cv ->> 'handoff_timeout_seconds')::bigint, 0), 300)) END;
    NEW.idle_due_at := CASE WHEN NEW.status <> 'closed' AND NEW.open_direct_id IS NULL THEN NEW.last_activity_at +
        make_interval(secs => coalesce(nullif((cv ->> 'idle_close_seconds')::bigint, 0), 604800)) END;
    NEW.prune_due_at := coalesce(NEW.first_event_at, NEW.last_activity_at) +
        make_interval(hours => 24 * coalesce(nullif((cv ->> 'retention_days')::int, 0), 90));
    RETURN NEW;
END
$$;
-- +goose StatementEnd
