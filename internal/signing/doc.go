// Package signing owns each Company's platform signing keys and its secret,
// kept in PostgreSQL (tables signing_keys and company_secrets) so every
// replica signs and verifies alike.
//
// A Company has one current key, EC P-256 for ES256 (RFC 7518 §3.4), whose
// kid is its RFC 7638 thumbprint; the first use makes it. Rotate, or the
// periodic job once the key is RotateAfter old, retires it and makes a new
// one. A retired key signs nothing more but stays in the published key set
// (Handler.ServeJWKS, RFC 7517 §5) for Retain, so the tokens it signed keep
// verifying until they expire.
//
// Each replica caches a Company's keys for CacheTTL. A token whose kid the
// cache does not hold makes it reload once, so a key made on another
// replica verifies at once; reloads of one Company are coalesced, so a
// flood of unknown kids costs at most one query in flight per replica. In
// the other direction, a replica may go on signing with a key retired
// elsewhere for up to CacheTTL, which is why Retain must cover the longest
// token lifetime plus CacheTTL.
//
// A Company's secret (Secret), the HMAC key of its codes, refresh tokens,
// CSRF tokens and DPoP nonces, is made on first use and changes with
// RotateSecret: the new one signs, and the retired one still verifies
// (RotatedSecrets) until what it signed has expired; the periodic job then
// deletes it. Replicas cache secrets for CacheTTL, like keys.
//
// Private keys and secrets are stored sealed by the Company's data key
// (internal/sealing), bound to their Company and row; rows stored before
// sealing are read as they are until sealing.SealPlaintext seals them
// (docs/operations.md, "Secrets"). Nothing here logs them.
package signing
