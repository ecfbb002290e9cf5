-- +goose Up
-- The staff console's inbox (internal/console, conversations.Store.Inbox):
-- a Company's conversations waiting for a person, the longest waiting
-- first. They are those queued (a handoff, spec 8.9; queued_at is set
-- exactly while queued) and the open Direct Conversations that accepted
-- the Company's user_requested event while no person answers them (spec
-- 8.10), which wait since they began. Few rows match; the predicate keeps
-- the index out of every statement that does not repeat it, so no lookup
-- by key can take it for the primary key's. Its columns change only with
-- status or responder, so an update that moves only last_activity_at
-- stays in place (a HOT update, migration 00032).
CREATE INDEX conversations_company_waiting ON conversations (company_id, (coalesce(queued_at, created_at)), id)
    WHERE status = 'queued' OR (user_requested_event_id IS NOT NULL AND status <> 'closed' AND responder = 'agent');

-- +goose Down
DROP INDEX conversations_company_waiting;
