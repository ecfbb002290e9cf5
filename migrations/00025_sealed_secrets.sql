-- +goose Up
-- Secrets sealed at rest (internal/sealing, docs/operations.md "Secrets").
-- Each Company has a data key, an AES-256 key kept only sealed by one of
-- the operator's key-encryption keys (KEKs), named by kek_id; the
-- Company's signing keys, HMAC secrets and webhook secrets are stored
-- sealed by that data key in the *_sealed columns. Deleting a Company
-- deletes its data key, and with it every way to read its secrets.
CREATE TABLE company_data_keys (
    company_id bigint      PRIMARY KEY REFERENCES companies (id) ON DELETE CASCADE,
    kek_id     text        NOT NULL,
    sealed_key bytea       NOT NULL,
    created_at timestamptz NOT NULL
);
-- Resealing under the newest KEK looks for the data keys under others.
CREATE INDEX company_data_keys_kek_id ON company_data_keys (kek_id);

-- The plaintext columns stay, nullable, until the first start or
-- `migrate up` with a KEK has sealed every row they hold (only the
-- program knows the KEK): a row is sealed by one UPDATE that fills the
-- sealed column and empties the plaintext one, so an interrupted run loses
-- nothing, and readers take either form meanwhile. New rows are sealed.
ALTER TABLE signing_keys ALTER COLUMN private_jwk DROP NOT NULL,
    ADD COLUMN private_jwk_sealed bytea,
    ADD CONSTRAINT signing_keys_one_form CHECK ((private_jwk IS NULL) <> (private_jwk_sealed IS NULL));

ALTER TABLE conversation_webhook_secrets ALTER COLUMN secret DROP NOT NULL,
    ADD COLUMN secret_sealed bytea,
    ADD COLUMN previous_secret_sealed bytea,
    ADD CONSTRAINT conversation_webhook_secrets_one_form CHECK ((secret IS NULL) <> (secret_sealed IS NULL)),
    ADD CONSTRAINT conversation_webhook_secrets_previous_one_form
        CHECK (previous_secret IS NULL OR previous_secret_sealed IS NULL);

-- A Company's HMAC secret can now be rotated: one row per secret,
-- numbered by version. The current one (retired_at NULL) signs; a retired
-- one still verifies until verifies_until, when what it signed has
-- expired, and is then deleted by the signing sweep.
ALTER TABLE company_secrets ALTER COLUMN secret DROP NOT NULL,
    ADD COLUMN secret_sealed bytea,
    ADD COLUMN version int NOT NULL DEFAULT 1,
    ADD COLUMN retired_at timestamptz,
    ADD COLUMN verifies_until timestamptz,
    ADD CONSTRAINT company_secrets_one_form CHECK ((secret IS NULL) <> (secret_sealed IS NULL)),
    ADD CONSTRAINT company_secrets_retired CHECK ((retired_at IS NULL) = (verifies_until IS NULL)),
    DROP CONSTRAINT company_secrets_pkey,
    ADD PRIMARY KEY (company_id, version);
ALTER TABLE company_secrets ALTER COLUMN version DROP DEFAULT;
CREATE UNIQUE INDEX company_secrets_current ON company_secrets (company_id) WHERE retired_at IS NULL;
CREATE INDEX company_secrets_verifies_until ON company_secrets (verifies_until) WHERE verifies_until IS NOT NULL;

-- +goose Down
-- Going back would need the KEK to unseal what is sealed, which SQL has
-- not: refuse while anything sealed or rotated exists.
-- +goose StatementBegin
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM company_data_keys) OR EXISTS (SELECT 1 FROM company_secrets WHERE version <> 1) THEN
        RAISE EXCEPTION 'sealed secrets exist: rolling back 00025 would lose them';
    END IF;
END
$$;
-- +goose StatementEnd
DROP INDEX company_secrets_verifies_until;
DROP INDEX company_secrets_current;
ALTER TABLE company_secrets DROP CONSTRAINT company_secrets_pkey,
    DROP CONSTRAINT company_secrets_retired,
    DROP CONSTRAINT company_secrets_one_form,
    DROP COLUMN verifies_until,
    DROP COLUMN retired_at,
    DROP COLUMN version,
    DROP COLUMN secret_sealed,
    ALTER COLUMN secret SET NOT NULL,
    ADD PRIMARY KEY (company_id);
ALTER TABLE conversation_webhook_secrets DROP CONSTRAINT conversation_webhook_secrets_previous_one_form,
    DROP CONSTRAINT conversation_webhook_secrets_one_form,
    DROP COLUMN previous_secret_sealed,
    DROP COLUMN secret_sealed,
    ALTER COLUMN secret SET NOT NULL;
ALTER TABLE signing_keys DROP CONSTRAINT signing_keys_one_form,
    DROP COLUMN private_jwk_sealed,
    ALTER COLUMN private_jwk SET NOT NULL;
DROP TABLE company_data_keys;
