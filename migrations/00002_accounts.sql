-- +goose Up
-- The user accounts of a Company that sign in at its issuer.
CREATE TABLE accounts (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    company_id    bigint      NOT NULL REFERENCES companies (id) ON DELETE CASCADE,
    username      text        NOT NULL,
    password_hash text        NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT now(),
    UNIQUE (company_id, username)
);

-- +goose Down
DROP TABLE accounts;
