-- +goose Up
-- Companies (tenants). The settings document is validated by internal/tenant
-- before it is stored; slug and domains live in columns because requests are
-- routed by them.
CREATE TABLE companies (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    slug       text        NOT NULL UNIQUE,
    settings   jsonb       NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now()
);

-- Every domain of a Company, the primary one (organization.domain) included.
-- The primary key makes a domain belong to at most one Company.
CREATE TABLE company_domains (
    domain     text    PRIMARY KEY,
    company_id bigint  NOT NULL REFERENCES companies (id) ON DELETE CASCADE,
    is_primary boolean NOT NULL DEFAULT false
);
CREATE INDEX company_domains_company_id ON company_domains (company_id);

-- Company API keys, stored as SHA-256 hashes of high-entropy secrets.
CREATE TABLE company_api_keys (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    company_id bigint      NOT NULL REFERENCES companies (id) ON DELETE CASCADE,
    name       text        NOT NULL DEFAULT '',
    key_hash   bytea       NOT NULL UNIQUE,
    created_at timestamptz NOT NULL DEFAULT now(),
    revoked_at timestamptz
);
CREATE INDEX company_api_keys_company_id ON company_api_keys (company_id);

-- Platform operator tokens for /admin/v1, stored as SHA-256 hashes.
CREATE TABLE operator_tokens (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name       text        NOT NULL DEFAULT '',
    token_hash bytea       NOT NULL UNIQUE,
    created_at timestamptz NOT NULL DEFAULT now(),
    revoked_at timestamptz
);

-- +goose Down
DROP TABLE operator_tokens;
DROP TABLE company_api_keys;
DROP TABLE company_domains;
DROP TABLE companies;
