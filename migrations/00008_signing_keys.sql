-- +goose Up
-- The keys a Company's issuer signs its tokens with (internal/signing): one
-- current key (retired_at NULL) that signs, and retired keys that only
-- verify until retired_at plus the retention period, after which the
-- periodic job deletes them. kid is the key's RFC 7638 thumbprint.
-- private_jwk is the private key's JWK (EC P-256, ES256) and is stored
-- unencrypted for now: it is protected only by the database's access control
-- and by the encryption of its backups.
CREATE TABLE signing_keys (
    company_id  bigint      NOT NULL REFERENCES companies (id) ON DELETE CASCADE,
    kid         text        NOT NULL,
    private_jwk jsonb       NOT NULL,
    created_at  timestamptz NOT NULL,
    retired_at  timestamptz,
    PRIMARY KEY (company_id, kid)
);
-- At most one current key per Company: racing first uses and rotations on
-- several replicas settle on one (INSERT ... ON CONFLICT DO NOTHING).
CREATE UNIQUE INDEX signing_keys_current ON signing_keys (company_id) WHERE retired_at IS NULL;
CREATE INDEX signing_keys_retired_at ON signing_keys (retired_at) WHERE retired_at IS NOT NULL;

-- A Company's 32-byte random secret, for HMACs of its codes and tokens
-- (internal/signing), made on first use and never changed. Unencrypted, like
-- signing_keys.private_jwk.
CREATE TABLE company_secrets (
    company_id bigint      PRIMARY KEY REFERENCES companies (id) ON DELETE CASCADE,
    secret     bytea       NOT NULL CHECK (length(secret) = 32),
    created_at timestamptz NOT NULL
);

-- +goose Down
DROP TABLE company_secrets;
DROP TABLE signing_keys;
