-- +goose Up
-- The Operations extension, version 3 (internal/operations): operations
-- their origin proposed, the revisions of their terms, and what performing
-- them answered.

-- An operation belongs to a Personal Agent (client_id), a User and, when
-- it was proposed signed in, an account (0: signed out); it was proposed at
-- one interface for one target (an API's name). status moves proposed ->
-- performing -> performed with one conditional UPDATE each, which picks
-- one performer among concurrent retries. A new proposal for the same
-- action (action_key) while it is proposed gets the same operation.
CREATE TABLE operations (
    company_id         bigint      NOT NULL REFERENCES companies (id) ON DELETE CASCADE,
    id                 text        NOT NULL,
    client_id          text        NOT NULL,
    user_id            text        NOT NULL,
    account_id         bigint      NOT NULL DEFAULT 0,
    interface          text        NOT NULL CHECK (interface IN ('api', 'mcp', 'conversation', 'web')),
    target             text        NOT NULL,
    action_key         text        NOT NULL,
    status             text        NOT NULL DEFAULT 'proposed' CHECK (status IN ('proposed', 'performing', 'performed')),
    revision           text        NOT NULL,
    -- The approval being performed or performed, as received, and the
    -- facts of the request that carried it.
    approval           jsonb,
    facts              jsonb,
    performing_since   timestamptz,
    -- The origin's answer: {status, content_type, body (base64)}.
    response           jsonb,
    performed_at       timestamptz,
    created_at         timestamptz NOT NULL,
    updated_at         timestamptz NOT NULL,
    -- Remembered at least until then (extension 7).
    expires_at         timestamptz NOT NULL,
    PRIMARY KEY (company_id, id)
);
CREATE UNIQUE INDEX operations_action ON operations (company_id, client_id, user_id, account_id, interface, target, action_key)
    WHERE status = 'proposed';
CREATE INDEX operations_expires_at ON operations (expires_at);
CREATE INDEX operations_company_created ON operations (company_id, created_at DESC, id);

-- A revision: its terms, summary and expiry, and the origin request that
-- performs it (method, path, query, content type, body), which an
-- approved retry must ask for again. A replaced or declined revision is
-- never performed.
CREATE TABLE operation_revisions (
    company_id   bigint      NOT NULL,
    operation_id text        NOT NULL,
    revision     text        NOT NULL,
    terms        jsonb       NOT NULL,
    summary      text        NOT NULL DEFAULT '',
    request      jsonb       NOT NULL,
    created_at   timestamptz NOT NULL,
    expires_at   timestamptz NOT NULL,
    replaced_at  timestamptz,
    declined_at  timestamptz,
    PRIMARY KEY (company_id, operation_id, revision),
    FOREIGN KEY (company_id, operation_id) REFERENCES operations (company_id, id) ON DELETE CASCADE
);

-- +goose Down
DROP TABLE operation_revisions;
DROP TABLE operations;
