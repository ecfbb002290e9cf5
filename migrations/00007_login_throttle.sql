-- +goose Up
-- Failed sign-in attempts per username at a Company, shared by every replica
-- (internal/accounts). A row exists only while there are failures to count:
-- a successful sign-in deletes it. Unknown usernames get rows too, so
-- probing for usernames is throttled like guessing passwords. Rows older
-- than a day count for nothing (the count restarts) and can be swept.
-- Logged, unlike the replay tables: losing it in a crash would lift every
-- lock.
CREATE TABLE login_failures (
    company_id      bigint      NOT NULL REFERENCES companies (id) ON DELETE CASCADE,
    username        text        NOT NULL,
    failures        int         NOT NULL,
    last_failure_at timestamptz NOT NULL,
    locked_until    timestamptz NOT NULL,
    PRIMARY KEY (company_id, username)
);
CREATE INDEX login_failures_last_failure_at ON login_failures (last_failure_at);

-- +goose Down
DROP TABLE login_failures;
