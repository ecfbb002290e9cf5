-- +goose Up
-- Client assertion IDs (jti) a Company's issuer has accepted, so a replayed
-- private_key_jwt assertion is refused on every replica (spec 4.1, RFC 7523
-- §3). Keyed by the issuer URL rather than company_id: clientauth's
-- ReplayStore is given the issuer, and an issuer is {PUBLIC_URL}/t/{slug}
-- whose slug is never reused (retired_slugs), so one issuer stands for
-- exactly one Company. Rows of a deleted Company outlive it by at most their
-- window, until the sweep. Unlogged for the same reason as session_jtis: a
-- row matters for minutes, and losing the table in a crash only reopens that
-- window.
CREATE UNLOGGED TABLE client_assertion_jtis (
    issuer     text        NOT NULL,
    client_id  text        NOT NULL,
    jti        text        NOT NULL,
    expires_at timestamptz NOT NULL,
    PRIMARY KEY (issuer, client_id, jti)
);
CREATE INDEX client_assertion_jtis_expires_at ON client_assertion_jtis (expires_at);

-- +goose Down
DROP TABLE client_assertion_jtis;
