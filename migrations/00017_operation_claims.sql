-- +goose Up
-- Operations, safe by construction (internal/operations, engine.go):
-- every claim of an operation has its own ID, so what concludes a send
-- knows which claim it concludes; a send lease says until when a send of
-- that claim may still be in flight, so no second send with the same
-- Idempotency-Key starts before it lapses, on any replica; an operation
-- whose outcome its settle job could not learn is 'unknown' until the
-- Company resolves it (who, when, how); and a declined revision keeps the
-- decline, so a website's lookup of its reference can report it.
ALTER TABLE operations DROP CONSTRAINT operations_status_check;
ALTER TABLE operations ADD CONSTRAINT operations_status_check
    CHECK (status IN ('proposed', 'performing', 'unknown', 'performed'));
ALTER TABLE operations
    ADD COLUMN claim         text,
    ADD COLUMN lease_until   timestamptz,
    ADD COLUMN sends         integer NOT NULL DEFAULT 0,
    ADD COLUMN resolution    jsonb;
ALTER TABLE operation_revisions ADD COLUMN decline jsonb;
-- Claims made before claims had IDs: one each, its lease lapsed.
UPDATE operations SET claim = 'clm_' || id, lease_until = performing_since WHERE status = 'performing';
-- The expiry sweep looks for claims whose settle path may be lost.
CREATE INDEX operations_unsettled ON operations (lease_until) WHERE status = 'performing';

-- +goose Down
DROP INDEX operations_unsettled;
ALTER TABLE operation_revisions DROP COLUMN decline;
UPDATE operations SET status = 'performing' WHERE status = 'unknown';
ALTER TABLE operations DROP COLUMN claim, DROP COLUMN lease_until, DROP COLUMN sends, DROP COLUMN resolution;
ALTER TABLE operations DROP CONSTRAINT operations_status_check;
ALTER TABLE operations ADD CONSTRAINT operations_status_check
    CHECK (status IN ('proposed', 'performing', 'performed'));
