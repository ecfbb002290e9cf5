-- +goose Up
-- Staff change things through the console: the audit log names them as
-- actor kind 'staff' (by their id and email). A TOTP code is accepted once:
-- totp_last_step is the time step of the last code accepted, so the same
-- code cannot sign in twice. A session waiting for its second factor
-- counts the wrong codes sent to it, and ends after a few.
ALTER TABLE audit_log DROP CONSTRAINT audit_log_actor_kind_check;
ALTER TABLE audit_log ADD CONSTRAINT audit_log_actor_kind_check
    CHECK (actor_kind IN ('operator_token', 'api_key', 'staff'));
ALTER TABLE staff ADD COLUMN totp_last_step bigint NOT NULL DEFAULT 0;
ALTER TABLE console_sessions ADD COLUMN failures integer NOT NULL DEFAULT 0;

-- +goose Down
ALTER TABLE console_sessions DROP COLUMN failures;
ALTER TABLE staff DROP COLUMN totp_last_step;
DELETE FROM audit_log WHERE actor_kind = 'staff';
ALTER TABLE audit_log DROP CONSTRAINT audit_log_actor_kind_check;
ALTER TABLE audit_log ADD CONSTRAINT audit_log_actor_kind_check
    CHECK (actor_kind IN ('operator_token', 'api_key'));
