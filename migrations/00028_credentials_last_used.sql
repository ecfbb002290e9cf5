-- +goose Up
-- Operator tokens and Company API keys show a prefix of their secret, so
-- a person can tell which one a list entry or an audit entry names, and
-- when each was last used (written at most once a minute per credential).
-- Credentials made before this migration have no known prefix: ''.
ALTER TABLE operator_tokens ADD COLUMN prefix text NOT NULL DEFAULT '',
    ADD COLUMN last_used_at timestamptz;
ALTER TABLE company_api_keys ADD COLUMN prefix text NOT NULL DEFAULT '',
    ADD COLUMN last_used_at timestamptz;

-- +goose Down
ALTER TABLE company_api_keys DROP COLUMN last_used_at, DROP COLUMN prefix;
ALTER TABLE operator_tokens DROP COLUMN last_used_at, DROP COLUMN prefix;
