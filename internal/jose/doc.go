// Package jose holds the few helpers our JWT verifiers share for reading
// compact JWS and JWKs before jwx verifies them: strict decoding of a
// segment, NumericDate (RFC 7519 §2), the algorithms a Personal Agent's
// keys sign with, and spotting private key members (RFC 7518 §6), which a
// public key set or a cnf.jwk must never carry.
package jose
