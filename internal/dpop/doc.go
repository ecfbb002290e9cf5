// Package dpop verifies DPoP proofs (RFC 9449 §4.3): their form, key,
// signature, method and URL, age, access token hash, and replay, with
// the replay record kept in PostgreSQL so that every replica refuses a
// reused proof (RFC 9449 §11.1). Resources use it for DPoP-bound access
// tokens (spec 4.5, 5.2, 7), the issuer for the proofs of token requests.
package dpop
