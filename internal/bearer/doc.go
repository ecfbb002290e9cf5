// Package bearer is the resource side of a Company's OAuth: every
// endpoint that accepts access tokens (conversations, operations, the
// gateway, MCP) validates them here, checks them against the request's
// Session, checks the DPoP proof of a DPoP-bound token (RFC 9449 §7),
// enforces scopes, and answers with RFC 6750 and RFC 9449 challenges.
package bearer
