// Package doctor checks a Company's Poppy deployment from the outside, as
// a Personal Agent sees it, given only its domain: that the domain answers
// over TLS, that /.well-known/poppy.json is valid and names that domain,
// the protected resource and authorization server metadata it leads to,
// the issuer's key set, that the conversations, feedback and MCP paths
// reach a Poppy server (each answers a request without a Session with the
// spec's invalid_session), and that the published OpenAPI descriptions
// parse.
//
// Every request is public (no credentials) and goes through a
// safehttp.Client, so the address and HTTPS rules are the server's own.
// Each check has its own timeout. A check whose input an earlier check
// could not provide is skipped, which is not a pass.
package doctor
