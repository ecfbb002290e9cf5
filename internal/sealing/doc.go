// Package sealing keeps the platform's secrets sealed at rest by envelope
// encryption (docs/operations.md, "Secrets"; docs/decisions.md, "Secrets
// sealed at rest").
//
// The operator gives one or more key-encryption keys (KEKs), each with an
// id, in a Keyring; the last one is current. Each Company has a data key,
// a random AES-256 key stored in company_data_keys only as sealed by a KEK,
// which is named next to it. A Sealer seals and opens a Company's secrets
// with its data key, AES-256-GCM with a random nonce, and binds each
// sealed value to where it is stored (its Purpose, the Company and the
// row) as associated data: a value copied to another Company, column or
// row does not open. Data keys are bound to their Company and KEK alike.
//
// A Sealer keeps each Company's opened data key in memory once read, so
// sealing and opening cost one AES-GCM operation and no database round
// trip; the packages that own the secrets cache what they open as well.
//
// Rotating the KEK is adding a new one last and running Reseal, which
// seals every data key again under it; the secrets sealed by the data
// keys are untouched. SealPlaintext seals the secrets stored before
// sealing existed.
package sealing
