-- +goose Up
-- The gateway (internal/gateway, docs/gateway.md): APIs a Company puts
-- behind poppyhost at {issuer}/api/{name}, and the tools of its hosted MCP
-- server at {issuer}/mcp. Each call is verified here and forwarded to the
-- Company's origin with Poppy-Verified.

-- A registered API: its origin base URL and its OpenAPI description, kept
-- as the JSON the platform parsed (uploaded, or fetched once from
-- openapi_url when registered).
CREATE TABLE gateway_apis (
    company_id         bigint      NOT NULL REFERENCES companies (id) ON DELETE CASCADE,
    name               text        NOT NULL,
    origin             text        NOT NULL,
    description        text        NOT NULL DEFAULT '',
    openapi            jsonb       NOT NULL,
    openapi_url        text        NOT NULL DEFAULT '',
    timeout_seconds    integer     NOT NULL,
    max_request_bytes  bigint      NOT NULL,
    max_response_bytes bigint      NOT NULL,
    created_at         timestamptz NOT NULL,
    updated_at         timestamptz NOT NULL,
    PRIMARY KEY (company_id, name)
);

-- A tool of the hosted MCP server: what MCP clients see (name,
-- description, input schema, annotations), the scopes a call needs, and
-- the origin URL that performs it.
CREATE TABLE gateway_tools (
    company_id      bigint      NOT NULL REFERENCES companies (id) ON DELETE CASCADE,
    name            text        NOT NULL,
    title           text        NOT NULL DEFAULT '',
    description     text        NOT NULL DEFAULT '',
    input_schema    jsonb       NOT NULL,
    output_schema   jsonb,
    annotations     jsonb,
    scopes          text[]      NOT NULL DEFAULT '{}',
    url             text        NOT NULL,
    timeout_seconds integer     NOT NULL,
    created_at      timestamptz NOT NULL,
    updated_at      timestamptz NOT NULL,
    PRIMARY KEY (company_id, name)
);

-- +goose Down
DROP TABLE gateway_tools;
DROP TABLE gateway_apis;
