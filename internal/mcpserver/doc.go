// Package mcpserver is each Company's hosted MCP server at {issuer}/mcp
// (spec 7, "MCP servers"): it lists the tools the Company registered
// (internal/registry), checks the Session header, the access token and
// each called tool's scopes, and performs a call as one POST of its
// arguments to the tool's URL with Poppy-Verified (internal/origin). With
// the Operations extension on (extension 4, 6, 7), a tool's proposal
// becomes an operation in the call's result, and an approved call is
// performed by the operations engine at most once.
package mcpserver
