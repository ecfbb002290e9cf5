-- +goose Up
-- A Company's staff change its settings, keys and people through the
-- console (internal/console): the audit log names such a change's actor as
-- kind staff with the staff member's id, as it names a credential.
ALTER TABLE audit_log DROP CONSTRAINT audit_log_actor_kind_check,
    ADD CONSTRAINT audit_log_actor_kind_check CHECK (actor_kind IN ('operator_token', 'api_key', 'staff'));

-- +goose Down
DELETE FROM audit_log WHERE actor_kind = 'staff';
ALTER TABLE audit_log DROP CONSTRAINT audit_log_actor_kind_check,
    ADD CONSTRAINT audit_log_actor_kind_check CHECK (actor_kind IN ('operator_token', 'api_key'));
