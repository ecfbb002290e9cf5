-- +goose Up
-- DPoP proof IDs (jti) seen within the acceptance window, per Company and
-- proof key (RFC 7638 thumbprint), so a replayed proof is refused on every
-- replica (RFC 9449 §11.1). Unlogged for the same reason as session_jtis:
-- a row matters for about a minute.
CREATE UNLOGGED TABLE dpop_jtis (
    company_id bigint      NOT NULL REFERENCES companies (id) ON DELETE CASCADE,
    jkt        text        NOT NULL,
    jti        text        NOT NULL,
    expires_at timestamptz NOT NULL,
    PRIMARY KEY (company_id, jkt, jti)
);
CREATE INDEX dpop_jtis_expires_at ON dpop_jtis (expires_at);

-- +goose Down
DROP TABLE dpop_jtis;
