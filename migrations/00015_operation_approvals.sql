-- +goose Up
-- Recorded approvals of website operations (Operations extension 6,
-- "Websites"): a Personal Agent approves an operation its Company's
-- website returned at {issuer}/poppy/operations, where nothing is
-- performed; the approval is recorded here until the browser's next
-- request for exactly that revision uses it up (used_at, set by one
-- conditional UPDATE, so one request uses one approval). A revision has
-- at most one recorded approval. Rows go with their operation when the
-- expiry sweep forgets it, which is never before the revision's
-- expires_at (extension 6: kept until then).
CREATE TABLE operation_approvals (
    company_id   bigint      NOT NULL,
    operation_id text        NOT NULL,
    revision     text        NOT NULL,
    -- The approval as received, and the facts of the endpoint request
    -- that carried it (its Session, account and scopes), for audits.
    approval     jsonb       NOT NULL,
    facts        jsonb       NOT NULL,
    recorded_at  timestamptz NOT NULL,
    used_at      timestamptz,
    PRIMARY KEY (company_id, operation_id, revision),
    FOREIGN KEY (company_id, operation_id) REFERENCES operations (company_id, id) ON DELETE CASCADE
);
CREATE INDEX operation_approvals_unused ON operation_approvals (company_id, recorded_at) WHERE used_at IS NULL;

-- +goose Down
DROP TABLE operation_approvals;
