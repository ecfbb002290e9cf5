// Package httpsig verifies and creates HTTP Message Signatures (RFC 9421)
// on requests: it parses the Signature-Input and Signature fields, builds
// the signature base of RFC 9421 §2.5 from the derived components of §2.2
// (@method, @authority, @scheme, @target-uri, @request-target, @path,
// @query, @query-param) and header fields (§2.1, with the key parameter
// for Dictionary fields), and checks the ed25519, ecdsa-p256-sha256 and
// rsa-pss-sha512 algorithms of §3.3.
//
// It knows nothing of who may sign what: profiles such as Web Bot Auth
// (package botauth) decide which components and parameters a signature
// must carry and where its key comes from.
package httpsig
