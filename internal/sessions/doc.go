// Package sessions verifies the Poppy-Session header (spec 5.2, 5.3) and
// keeps the Session store (5.3 step 4, 5.5). Nothing in poppyhost may use a
// Session's claims until Verify has passed: the middleware puts only
// verified Sessions in the request context.
//
// Verification follows 5.3: the client metadata and key set are resolved
// through internal/agentid; the delegation is verified as "Delegated keys"
// orders it and cached until it expires (or five minutes, so that a key
// removed from jwks_uri stops working soon); then the Session JWT's
// signature, typ and claims; then ath against the access token; then the
// Session by (client_id, sid). Cheap structural checks come first, since
// every failure is the same invalid_session error.
package sessions
