-- +goose Up
-- Feedback reports (spec 9.3), attributed to the verified Session.
CREATE TABLE feedback (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    company_id  bigint      NOT NULL REFERENCES companies (id) ON DELETE CASCADE,
    client_id   text        NOT NULL,
    user_id     text        NOT NULL,
    agent_id    text        NOT NULL DEFAULT '',
    sid         text        NOT NULL,
    task        text        NOT NULL,
    description text        NOT NULL,
    answered    boolean     NOT NULL DEFAULT false,
    created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX feedback_company_id ON feedback (company_id, id DESC);

-- +goose Down
DROP TABLE feedback;
