-- +goose Up
-- The Company console's people (internal/console): staff members of one
-- Company each, with a role, their password (an Argon2id hash, as
-- accounts'), TOTP secret (sealed, as the Companies' secrets) and
-- passkeys; their console sessions, of which only a hash of the cookie's
-- token is stored; the invites an owner sends, of which only a hash of the
-- link's token is stored; and the WebAuthn ceremonies under way.
CREATE TABLE staff (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    company_id    bigint      NOT NULL REFERENCES companies (id) ON DELETE CASCADE,
    email         text        NOT NULL,
    name          text        NOT NULL DEFAULT '',
    role          text        NOT NULL CHECK (role IN ('owner', 'admin', 'agent', 'auditor')),
    password_hash text        NOT NULL DEFAULT '',
    totp_secret   bytea,
    -- The WebAuthn user handle: random, so that it names nobody.
    user_handle   bytea       NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT now(),
    UNIQUE (company_id, email),
    UNIQUE (user_handle)
);

CREATE TABLE staff_passkeys (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    company_id    bigint      NOT NULL,
    staff_id      bigint      NOT NULL REFERENCES staff (id) ON DELETE CASCADE,
    credential_id bytea       NOT NULL UNIQUE,
    name          text        NOT NULL DEFAULT '',
    -- The go-webauthn Credential as JSON (public key, sign count, flags).
    credential    jsonb       NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT now(),
    last_used_at  timestamptz
);
CREATE INDEX staff_passkeys_staff ON staff_passkeys (staff_id);

-- A session is signed in once second_factor is false; until then it has
-- passed the password only and may do nothing but the second factor.
CREATE TABLE console_sessions (
    token_hash    bytea       PRIMARY KEY,
    company_id    bigint      NOT NULL,
    staff_id      bigint      NOT NULL REFERENCES staff (id) ON DELETE CASCADE,
    second_factor boolean     NOT NULL DEFAULT false,
    created_at    timestamptz NOT NULL,
    last_seen_at  timestamptz NOT NULL
);
CREATE INDEX console_sessions_staff ON console_sessions (staff_id);
CREATE INDEX console_sessions_last_seen_at ON console_sessions (last_seen_at);

CREATE TABLE staff_invites (
    token_hash  bytea       PRIMARY KEY,
    company_id  bigint      NOT NULL REFERENCES companies (id) ON DELETE CASCADE,
    email       text        NOT NULL,
    name        text        NOT NULL DEFAULT '',
    role        text        NOT NULL CHECK (role IN ('owner', 'admin', 'agent', 'auditor')),
    invited_by  bigint      REFERENCES staff (id) ON DELETE SET NULL,
    expires_at  timestamptz NOT NULL
);
CREATE INDEX staff_invites_company ON staff_invites (company_id);
CREATE INDEX staff_invites_expires_at ON staff_invites (expires_at);

-- A WebAuthn registration or sign-in under way: the challenge and what
-- go-webauthn needs to finish it, keyed by a hash of the browser's
-- pre-session cookie.
CREATE TABLE console_ceremonies (
    key_hash    bytea       PRIMARY KEY,
    company_id  bigint      NOT NULL REFERENCES companies (id) ON DELETE CASCADE,
    data        jsonb       NOT NULL,
    expires_at  timestamptz NOT NULL
);
CREATE INDEX console_ceremonies_expires_at ON console_ceremonies (expires_at);

-- +goose Down
DROP TABLE console_ceremonies;
DROP TABLE staff_invites;
DROP TABLE console_sessions;
DROP TABLE staff_passkeys;
DROP TABLE staff;
