-- +goose Up
-- Conversations between Personal Agents and a Company's agent or staff
-- (spec 8, internal/conversations). Owned by client_id and User ID, and by
-- the account once one is used (8.2).
CREATE TABLE conversations (
    company_id        bigint      NOT NULL REFERENCES companies (id) ON DELETE CASCADE,
    id                text        NOT NULL,
    client_id         text        NOT NULL,
    user_id           text        NOT NULL,
    account_id        bigint,
    -- A Direct Conversation's parent and the user_requested event it
    -- accepted, if any (8.10).
    parent_id         text,
    user_requested_event_id text,
    -- On a parent: its open Direct Conversation.
    open_direct_id    text,
    status            text        NOT NULL CHECK (status IN ('working', 'idle', 'queued', 'closed')),
    responder         text        NOT NULL CHECK (responder IN ('agent', 'human')),
    context           jsonb       NOT NULL DEFAULT '{}',
    -- Events are numbered 1, 2, ... per conversation; last_seq is the
    -- newest, first_seq the oldest still kept (older ones were pruned).
    last_seq          bigint      NOT NULL DEFAULT 0,
    first_seq         bigint      NOT NULL DEFAULT 1,
    -- The newest event the Company's agent webhook has received.
    delivered_seq     bigint      NOT NULL DEFAULT 0,
    created_at        timestamptz NOT NULL,
    last_activity_at  timestamptz NOT NULL,
    queued_at         timestamptz,
    closed_at         timestamptz,
    PRIMARY KEY (company_id, id),
    FOREIGN KEY (company_id, parent_id) REFERENCES conversations (company_id, id) ON DELETE CASCADE
);
CREATE UNIQUE INDEX conversations_accepted ON conversations (company_id, parent_id, user_requested_event_id)
    WHERE user_requested_event_id IS NOT NULL;
CREATE INDEX conversations_owner ON conversations (company_id, client_id, user_id);
CREATE INDEX conversations_activity ON conversations (last_activity_at) WHERE status <> 'closed';
CREATE INDEX conversations_queued ON conversations (queued_at) WHERE status = 'queued';

-- The events of each conversation, in order (8.5).
CREATE TABLE conversation_events (
    company_id      bigint      NOT NULL,
    conversation_id text        NOT NULL,
    seq             bigint      NOT NULL,
    type            text        NOT NULL,
    body            jsonb       NOT NULL,
    created_at      timestamptz NOT NULL,
    PRIMARY KEY (company_id, conversation_id, seq),
    FOREIGN KEY (company_id, conversation_id) REFERENCES conversations (company_id, id) ON DELETE CASCADE
);
CREATE INDEX conversation_events_created_at ON conversation_events (created_at);

-- Message IDs the Personal Agent chose, unique per User (8.3): a retry
-- with the same content gets the original response, other content
-- message_id_conflict.
CREATE TABLE conversation_message_ids (
    company_id      bigint      NOT NULL,
    client_id       text        NOT NULL,
    user_id         text        NOT NULL,
    message_id      text        NOT NULL,
    conversation_id text        NOT NULL,
    content_hash    bytea       NOT NULL,
    response        jsonb       NOT NULL,
    PRIMARY KEY (company_id, client_id, user_id, message_id),
    FOREIGN KEY (company_id, conversation_id) REFERENCES conversations (company_id, id) ON DELETE CASCADE
);

-- +goose Down
DROP TABLE conversation_message_ids;
DROP TABLE conversation_events;
DROP TABLE conversations;
