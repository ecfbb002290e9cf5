// Package issuer is each Company's OAuth authorization server (spec 3.2,
// 4): Direct Sign-In (authorization code with PKCE), Device Sign-In
// (RFC 8628), refresh, revocation and introspection, with the login,
// consent, device and account pages. One fosite provider serves every
// Company: the Company in the request context decides the issuer, the
// secrets, the signing keys, the scopes and the lifetimes, and every stored
// row is scoped by it.
package issuer
