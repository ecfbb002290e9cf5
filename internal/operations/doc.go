// Package operations implements the Operations extension, version 3
// (spec/operations-extension-v3.md): the Company's origin answers a
// request with a proposal (DESIGN.md, the origin contract), the platform
// returns the operation in the form of the interface, and a retry that
// carries an approval of the revision performs the action at most once.
//
// It holds what every interface shares: the wire forms of operations,
// approvals, proposals and declines, whether a request declares the
// extension, and exact comparison of terms (exact.go); the Store, which
// proposes revisions, checks approvals (extension 6, checks 1 to 3) and
// keeps claims, send leases and the origin's answers (claims.go); and the
// Engine (engine.go), the one performer for the API gateway, the hosted
// MCP server, the website and conversations: approval hook, claim, send
// with Idempotency-Key and the approved terms in Poppy-Verified, and
// conclusion by what the origin's answer means (Classify). Its settle job
// concludes a claim whose outcome was not known (settle.go), the hourly
// sweep forgets expired operations and rescues stalled claims (sweep.go),
// and the Company resolves an outcome left unknown (resolve.go, http.go).
// The interfaces reach origins through the Router they give the engine.
// It owns operations, operation_revisions and operation_approvals (a
// website's recorded approvals).
package operations
