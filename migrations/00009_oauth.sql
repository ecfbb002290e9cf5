-- +goose Up
-- What each Company's OAuth issuer stores (internal/issuer). Every row is
-- scoped by Company, and every secret is stored as a SHA-256 hash: the
-- token or code itself exists only in the response that carried it.

-- Authorization codes, PKCE requests, access tokens and refresh tokens, as
-- fosite stores them: one row per code or token, keyed by the hash of its
-- signature. request_id is the grant: a refresh token's rotations and the
-- access tokens issued under it share it, so revoking a refresh token ends
-- them all (RFC 7009 §2.1). Rows are inactive once used, rotated or
-- revoked, and swept after they expire.
CREATE TABLE oauth_tokens (
    company_id     bigint      NOT NULL REFERENCES companies (id) ON DELETE CASCADE,
    kind           text        NOT NULL CHECK (kind IN ('code', 'pkce', 'access', 'refresh')),
    signature      bytea       NOT NULL,
    request_id     text        NOT NULL,
    client_id      text        NOT NULL,
    account_id     bigint      REFERENCES accounts (id) ON DELETE CASCADE,
    requested_at   timestamptz NOT NULL,
    scopes         text[]      NOT NULL,
    granted_scopes text[]      NOT NULL,
    form           jsonb       NOT NULL,
    session        jsonb       NOT NULL,
    active         boolean     NOT NULL DEFAULT true,
    expires_at     timestamptz NOT NULL,
    PRIMARY KEY (company_id, kind, signature)
);
CREATE INDEX oauth_tokens_request ON oauth_tokens (company_id, request_id);
CREATE INDEX oauth_tokens_account ON oauth_tokens (company_id, account_id, client_id) WHERE kind = 'refresh' AND active;
CREATE INDEX oauth_tokens_expires_at ON oauth_tokens (expires_at);

-- Device Sign-In requests (RFC 8628). status moves pending -> approved or
-- denied -> used with one conditional UPDATE each, so a device code yields
-- tokens once.
CREATE TABLE device_grants (
    company_id       bigint      NOT NULL REFERENCES companies (id) ON DELETE CASCADE,
    device_code      bytea       NOT NULL,
    user_code        text        NOT NULL,
    client_id        text        NOT NULL,
    scopes           text[]      NOT NULL,
    resource         text        NOT NULL DEFAULT '',
    status           text        NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'approved', 'denied', 'used')),
    account_id       bigint      REFERENCES accounts (id) ON DELETE CASCADE,
    granted_scopes   text[]      NOT NULL DEFAULT '{}',
    interval_seconds int         NOT NULL,
    last_polled_at   timestamptz,
    created_at       timestamptz NOT NULL,
    expires_at       timestamptz NOT NULL,
    PRIMARY KEY (company_id, device_code),
    UNIQUE (company_id, user_code)
);
CREATE INDEX device_grants_expires_at ON device_grants (expires_at);

-- Browsers signed in to a Company's issuer pages (login, consent, device
-- approval, account), by the hash of their cookie.
CREATE TABLE issuer_logins (
    company_id bigint      NOT NULL REFERENCES companies (id) ON DELETE CASCADE,
    token      bytea       NOT NULL,
    account_id bigint      NOT NULL REFERENCES accounts (id) ON DELETE CASCADE,
    created_at timestamptz NOT NULL,
    expires_at timestamptz NOT NULL,
    PRIMARY KEY (company_id, token)
);
CREATE INDEX issuer_logins_expires_at ON issuer_logins (expires_at);

-- The account a Session first acted for with an access token (spec 5.4): a
-- later token for another account ends the Session.
ALTER TABLE sessions ADD COLUMN account_id bigint;

-- +goose Down
ALTER TABLE sessions DROP COLUMN account_id;
DROP TABLE issuer_logins;
DROP TABLE device_grants;
DROP TABLE oauth_tokens;
