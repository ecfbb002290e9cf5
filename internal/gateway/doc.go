// Package gateway puts a Company's own HTTP APIs and tools behind
// poppyhost (spec 7, DESIGN.md's origin contract). A Personal Agent calls
// {issuer}/api/{name}/... or the hosted MCP server at {issuer}/mcp; the
// gateway verifies the Session header, the access token and the scopes the
// API's OpenAPI description or the tool requires, applies rate and size
// limits, and forwards the call to the Company's origin with the verified
// facts in Poppy-Verified and none of the Personal Agent's credentials.
//
// Companies register APIs and tools through /company/v1 and the admin API
// (docs/gateway.md); the package owns their tables, gateway_apis and
// gateway_tools.
package gateway
