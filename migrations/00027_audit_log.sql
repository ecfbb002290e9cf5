-- +goose Up
-- The audit log: one row per change made through the admin and Company
-- APIs (internal/audit). company_id has no foreign key on purpose: the
-- entry that says who deleted a Company outlives it, until the retention
-- sweep deletes it with the other old entries. No secret is stored: the
-- actor is named by its credential's id and prefix, the change by its
-- route and the names of the fields it changed.
CREATE TABLE audit_log (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at           timestamptz NOT NULL DEFAULT now(),
    company_id   bigint,
    company_slug text        NOT NULL DEFAULT '',
    actor_kind   text        NOT NULL CHECK (actor_kind IN ('operator_token', 'api_key')),
    actor_id     bigint      NOT NULL,
    actor_prefix text        NOT NULL DEFAULT '',
    actor_name   text        NOT NULL DEFAULT '',
    action       text        NOT NULL,
    path         text        NOT NULL,
    fields       text[]      NOT NULL DEFAULT '{}'
);
-- A Company's entries newest first, and the retention sweep's oldest.
CREATE INDEX audit_log_company ON audit_log (company_id, id DESC);
CREATE INDEX audit_log_at ON audit_log (at);

-- +goose Down
DROP TABLE audit_log;
