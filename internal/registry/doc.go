// Package registry keeps the APIs and tools a Company registers to serve
// through poppyhost (spec 7; docs/gateway.md): the registration API under
// /company/v1 and the admin API, their store (tables gateway_apis and
// gateway_tools), the ingestion of an API's OpenAPI description (what it
// declares, and the scopes each operation needs) and the entries they
// give poppy.json (spec 3.2). The API proxy (internal/gateway) and the
// hosted MCP server (internal/mcpserver) look registrations up here.
package registry
