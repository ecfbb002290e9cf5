// Package origin calls a Company's origins with Poppy-Verified: the only
// way the API proxy (internal/gateway), the hosted MCP server
// (internal/mcpserver), the website proxy (internal/website) and the
// operations engine (approved calls and approval hooks, Caller.Send) reach
// them (DESIGN.md, the origin contract; spec 5.3, 7). It states what the
// platform verified as the Poppy-Verified JWT (the facts of a Session and
// grant, signed with the Company's key, aud the origin), strips the
// Personal Agent's credentials and our cookies, bounds each wait for the
// origin and the size of its answer, and names where an approved
// operation is performed (Router, for internal/operations).
package origin
