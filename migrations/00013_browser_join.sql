-- +goose Up
-- Browser join (spec 6, internal/browserjoin): the one-time codes of the
-- browser-session page, and the web sessions their cookies stand for.
-- Codes and cookies are stored as SHA-256 hashes.

-- A code from step 1, tied to the browser that loaded the page by the hash
-- of its join cookie. Step 2 records the Session (and, signed in, the
-- account and scopes) that authorized it; step 3 uses it up. Each step is
-- one conditional UPDATE, so a code is authorized once and submitted once.
CREATE TABLE browser_join_codes (
    company_id    bigint      NOT NULL REFERENCES companies (id) ON DELETE CASCADE,
    code          bytea       NOT NULL,
    domain        text        NOT NULL,
    browser       bytea       NOT NULL,
    created_at    timestamptz NOT NULL,
    expires_at    timestamptz NOT NULL,
    authorized_at timestamptz,
    client_id     text,
    sid           text,
    account_id    bigint      REFERENCES accounts (id) ON DELETE CASCADE,
    scopes        text[],
    extensions    jsonb,
    submitted_at  timestamptz,
    PRIMARY KEY (company_id, code)
);
CREATE INDEX browser_join_codes_expires_at ON browser_join_codes (expires_at);

-- A browser joined to a Session, by the hash of its cookie: it acts for
-- the Session, and for the account and scopes of its join while the
-- Personal Agent stays signed in to that account (spec 5.5, 6).
CREATE TABLE web_sessions (
    company_id bigint      NOT NULL REFERENCES companies (id) ON DELETE CASCADE,
    token      bytea       NOT NULL,
    client_id  text        NOT NULL,
    sid        text        NOT NULL,
    account_id bigint      REFERENCES accounts (id) ON DELETE CASCADE,
    scopes     text[]      NOT NULL,
    extensions jsonb       NOT NULL,
    created_at timestamptz NOT NULL,
    expires_at timestamptz NOT NULL,
    ended_at   timestamptz,
    PRIMARY KEY (company_id, token),
    FOREIGN KEY (company_id, client_id, sid) REFERENCES sessions (company_id, client_id, sid) ON DELETE CASCADE
);
CREATE INDEX web_sessions_session ON web_sessions (company_id, client_id, sid);
CREATE INDEX web_sessions_expires_at ON web_sessions (expires_at);

-- +goose Down
DROP TABLE web_sessions;
DROP TABLE browser_join_codes;
