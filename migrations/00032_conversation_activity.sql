-- +goose Up
-- Accepting a message is the conversations' hot path (issue 19). It moves
-- last_activity_at, and the deadline trigger then read the Company's
-- settings and moved idle_due_at, an indexed column, so every message
-- rewrote the row with a new entry in each of its indexes. Now an update
-- that moves only last_activity_at forward does not run the trigger and
-- keeps the deadlines as they are: idle_due_at then comes early, never
-- late, and the idle sweep finds it stale and has the trigger compute it
-- again (store_sweeps.go: stale; every touch there leaves
-- last_activity_at as it is). The row can then be updated in place (a
-- HOT update), its indexes untouched.
DROP TRIGGER conversations_due ON conversations;
CREATE TRIGGER conversations_due_insert BEFORE INSERT ON conversations
    FOR EACH ROW EXECUTE FUNCTION conversations_set_due();
CREATE TRIGGER conversations_due BEFORE UPDATE OF status, queued_at, last_activity_at, open_direct_id, first_event_at
    ON conversations FOR EACH ROW
    WHEN (NOT (NEW.last_activity_at > OLD.last_activity_at
        AND NEW.status = OLD.status
        AND NEW.queued_at IS NOT DISTINCT FROM OLD.queued_at
        AND NEW.open_direct_id IS NOT DISTINCT FROM OLD.open_direct_id
        AND NEW.first_event_at IS NOT NULL AND NEW.first_event_at = OLD.first_event_at))
    EXECUTE FUNCTION conversations_set_due();

-- Room on each page for the new version of a row updated in place.
ALTER TABLE conversations SET (fillfactor = 90);

-- Every read of events is by conversation (the primary key); nothing
-- looks events up by time across conversations since the sweeps went by
-- deadline (migration 00020), and each index costs every event's insert.
DROP INDEX conversation_events_created_at;
DROP INDEX conversation_events_company_created;

-- +goose Down
CREATE INDEX conversation_events_company_created ON conversation_events (company_id, created_at);
CREATE INDEX conversation_events_created_at ON conversation_events (created_at);
ALTER TABLE conversations RESET (fillfactor);
DROP TRIGGER conversations_due ON conversations;
DROP TRIGGER conversations_due_insert ON conversations;
CREATE TRIGGER conversations_due BEFORE INSERT OR UPDATE OF status, queued_at, last_activity_at, open_direct_id, first_event_at
    ON conversations FOR EACH ROW EXECUTE FUNCTION conversations_set_due();
