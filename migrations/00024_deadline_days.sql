-- +goose Up
-- A retention of n days is n × 24 hours, as the prune sweep counts it
-- (conversations.retentionDays), not n calendar days: in a time zone with
-- daylight saving those are 23 or 25 hours across a change, and a
-- deadline an hour before the sweep's cutoff would be claimed again and
-- again with nothing to prune.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION conversations_set_due() RETURNS trigger LANGUAGE plpgsql AS $$
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
        make_interval(hours => 24 * coalesce(nullif((cv ->> 'retention_days')::int, 0), 90));
    RETURN NEW;
END
$$;
-- +goose StatementEnd

-- +goose Down
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
        make_interval(days => coalesce(nullif((cv ->> 'retention_days')::int, 0), 90));
    RETURN NEW;
END
$$;
-- +goose StatementEnd
