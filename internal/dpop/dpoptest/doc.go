// Package dpoptest makes DPoP proofs (RFC 9449 §4.2) for tests, well formed
// or broken on purpose, and keeps an in-memory replay store.
package dpoptest
