// Package gateway is the API proxy: it puts a Company's own HTTP APIs
// behind poppyhost (spec 7; DESIGN.md, the origin contract). A Personal
// Agent calls {issuer}/api/{name}/...; the proxy verifies the Session
// header, the access token and the scopes the API's OpenAPI description
// requires, applies size limits, and forwards the call to the Company's
// origin through internal/origin, with the verified facts in
// Poppy-Verified and none of the Personal Agent's credentials. With the
// Operations extension on (extension 4, 6, 7), an origin's proposal
// becomes approval_required and an approved call is performed by the
// operations engine. It also serves each API's description, as
// published, at {issuer}/openapi/{name}.json.
//
// The APIs are registered in internal/registry (docs/gateway.md).
package gateway
