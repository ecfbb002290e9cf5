-- +goose Up
-- MCP clients that registered themselves at a Company's issuer (Dynamic
-- Client Registration, RFC 7591), where the Company allows it
-- (mcp.dynamic_registration): public clients with no keys, for the
-- Company's MCP server only. A registration expires unless used: each
-- token issued to the client moves expires_at to when its refresh token
-- could last, and the issuer's sweep deletes the expired.
CREATE TABLE mcp_client_registrations (
    company_id    bigint      NOT NULL REFERENCES companies (id) ON DELETE CASCADE,
    client_id     text        NOT NULL,
    client_name   text        NOT NULL DEFAULT '',
    client_uri    text        NOT NULL DEFAULT '',
    logo_uri      text        NOT NULL DEFAULT '',
    redirect_uris text[]      NOT NULL,
    created_at    timestamptz NOT NULL,
    expires_at    timestamptz NOT NULL,
    PRIMARY KEY (company_id, client_id)
);
CREATE INDEX mcp_client_registrations_expires_at ON mcp_client_registrations (expires_at);

-- +goose Down
DROP TABLE mcp_client_registrations;
