// Package bearer is the resource side of a Company's OAuth: every
// endpoint that accepts access tokens (conversations, operations, the
// gateway, MCP) validates them here, checks them against the request's
// Session, enforces scopes, and answers with RFC 6750 challenges.
package bearer
