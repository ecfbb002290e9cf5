// Package clientauth authenticates Personal Agents at a Company's OAuth
// issuer with private_key_jwt (spec 4.1, RFC 7523 §3, RFC 7521 §4.2): it
// owns the client assertion rules and the record of used jtis. The issuer
// calls Verifier.Verify from its token, device authorization and
// revocation endpoints, and turns the *Error it gets into its RFC 6749
// §5.2 answer. Replays are remembered in PostgreSQL (PGReplays), so they
// are refused on every replica. A caller that reads the database anyway
// right after authenticating the client can have the jti recorded in that
// read's round trip (Defer), as the refresh grant does.
//
// An assertion is accepted when:
//
//   - client_assertion_type is exactly the jwt-bearer URN and
//     client_assertion is one compact JWS of at most 16 KiB, each sent
//     once;
//   - its alg is ES256 (spec: MUST) or PS384 (SHOULD), nothing else, and
//     its kid names a signing key of the matching type in the client's
//     jwks_uri (agentid.Resolver.Key: keys without "use" count, "enc"
//     keys do not), which verifies the signature;
//   - its typ, when present, is not a Poppy token type, so a Session JWT
//     or a delegation, both signed by the same agents, never passes as a
//     client assertion (RFC 8725 §3.11);
//   - iss == sub == the client_id (and the form's client_id when sent),
//     whose client metadata document agentid resolves;
//   - aud is one string equal to the issuer character for character: an
//     array, the token endpoint URL or any other endpoint is refused (spec
//     4.1, draft-ietf-oauth-rfc7523bis);
//   - exp has not passed, iat is present and at most Skew ahead, exp -
//     iat is at most MaxLifetime, nbf (optional) is at most Skew ahead;
//   - jti has not been used before for this issuer and client_id.
//
// Every refusal is an *Error with invalid_client and a description of the
// rule broken. Only the replay store's own failures are server_error.
//
// Why not fosite's DefaultClientAuthenticationStrategy (v0.49.0,
// client_authentication.go; ../shared/notes/fosite-v0.49.md): it accepts
// an aud array that contains the issuer, does not bound the assertion's
// lifetime, answers a slightly future iat with a 500, answers a replayed
// jti with the non-standard error jti_known, keys jti by its value alone
// rather than per client, and skips JWKS keys without "use":"sig", which
// spec 4.1 key sets need not carry. The issuer should therefore
// authenticate clients with this package before handing the request to
// fosite.
package clientauth
