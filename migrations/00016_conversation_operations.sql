-- +goose Up
-- Operations in conversations (internal/conversations, extension 6 and 7
-- "Conversations"): what became of each approval a Personal Agent sent in
-- a message, as told to the Company Agent's webhook. One row per
-- operation, revision and outcome in a conversation, so a new message
-- repeating a used approval adds nothing (extension 7), and the outcome
-- is delivered (River, retried) even after a restart.
CREATE TABLE conversation_operation_outcomes (
    company_id      bigint      NOT NULL,
    conversation_id text        NOT NULL,
    operation_id    text        NOT NULL,
    revision        text        NOT NULL,
    status          text        NOT NULL CHECK (status IN ('performed', 'declined', 'performing', 'new_terms', 'stale',
                                                           'unapproved', 'needs_account', 'not_allowed',
                                                           'failed_to_check')),
    -- The outcome as the webhook receives it, and the facts of the
    -- request that carried the approval, for Poppy-Verified.
    body            jsonb       NOT NULL,
    facts           jsonb,
    created_at      timestamptz NOT NULL,
    delivered_at    timestamptz,
    PRIMARY KEY (company_id, conversation_id, operation_id, revision, status),
    FOREIGN KEY (company_id, conversation_id) REFERENCES conversations (company_id, id) ON DELETE CASCADE
);

-- +goose Down
DROP TABLE conversation_operation_outcomes;
