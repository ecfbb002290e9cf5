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
// Private keys and secrets are stored unencrypted in PostgreSQL for now,
// protected by the database's access control and the encryption of its
// backups (docs/operations.md, "Key rotation"). Nothing here logs them.
package signing
