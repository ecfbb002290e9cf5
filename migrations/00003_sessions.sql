-- +goose Up
-- Sessions (spec 5): one User at one Company through one Personal Agent,
-- named by (client_id, sid). Ended Sessions are remembered (5.5).
CREATE TABLE sessions (
    company_id   bigint      NOT NULL REFERENCES companies (id) ON DELETE CASCADE,
    client_id    text        NOT NULL,
    sid          text        NOT NULL,
    user_id      text        NOT NULL,
    agent_id     text        NOT NULL DEFAULT '',
    created_at   timestamptz NOT NULL DEFAULT now(),
    last_seen_at timestamptz NOT NULL DEFAULT now(),
    ended_at     timestamptz,
    PRIMARY KEY (company_id, client_id, sid)
);

-- Session JWT IDs seen within the acceptance window, so a replayed JWT is
-- refused on every replica (spec 5.3, "Replayed JWTs"). Unlogged: a row
-- matters for about a minute, and losing the table in a crash only reopens
-- that minute, which is cheaper than a durable commit on every request.
CREATE UNLOGGED TABLE session_jtis (
    company_id bigint      NOT NULL REFERENCES companies (id) ON DELETE CASCADE,
    client_id  text        NOT NULL,
    jti        text        NOT NULL,
    expires_at timestamptz NOT NULL,
    PRIMARY KEY (company_id, client_id, jti)
);
CREATE INDEX session_jtis_expires_at ON session_jtis (expires_at);

-- +goose Down
DROP TABLE session_jtis;
DROP TABLE sessions;
