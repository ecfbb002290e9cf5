-- +goose Up
-- A message to a conversation whose status it does not change is one
-- UPDATE (conversations.sendAtOnceSQL) that moves last_activity_at forward
-- and sets none of the trigger's other columns. The trigger's WHEN
-- (migration 00032) skipped the call for it, but because last_activity_at
-- was one of the columns the trigger names, PostgreSQL read the WHEN from
-- its stored text and prepared it for every such UPDATE: about 3 % of a
-- message's PostgreSQL CPU. The trigger now names the other columns only,
-- so an UPDATE that sets last_activity_at and none of them does not
-- consider the trigger at all. The one such UPDATE moves last_activity_at
-- forward only (it updates a row whose last_activity_at is earlier than
-- the new one, else send's transaction does the message), where the WHEN
-- skipped the trigger anyway: the deadlines stay those of an earlier
-- activity, early, never late. An UPDATE that sets any other of the
-- columns is decided by the WHEN as before; the idle sweep's stale touch
-- (first_event_at = first_event_at) still runs the trigger.
DROP TRIGGER conversations_due ON conversations;
CREATE TRIGGER conversations_due BEFORE UPDATE OF status, queued_at, open_direct_id, first_event_at
    ON conversations FOR EACH ROW
    WHEN (NOT (NEW.last_activity_at > OLD.last_activity_at
        AND NEW.status = OLD.status
        AND NEW.queued_at IS NOT DISTINCT FROM OLD.queued_at
        AND NEW.open_direct_id IS NOT DISTINCT FROM OLD.open_direct_id
        AND NEW.first_event_at IS NOT NULL AND NEW.first_event_at = OLD.first_event_at))
    EXECUTE FUNCTION conversations_set_due();

-- +goose Down
DROP TRIGGER conversations_due ON conversations;
CREATE TRIGGER conversations_due BEFORE UPDATE OF status, queued_at, last_activity_at, open_direct_id, first_event_at
    ON conversations FOR EACH ROW
    WHEN (NOT (NEW.last_activity_at > OLD.last_activity_at
        AND NEW.status = OLD.status
        AND NEW.queued_at IS NOT DISTINCT FROM OLD.queued_at
        AND NEW.open_direct_id IS NOT DISTINCT FROM OLD.open_direct_id
        AND NEW.first_event_at IS NOT NULL AND NEW.first_event_at = OLD.first_event_at))
    EXECUTE FUNCTION conversations_set_due();
