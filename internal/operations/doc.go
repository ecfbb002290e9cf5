// Package operations implements the Operations extension, version 3
// (spec/operations-extension-v3.md): the Company's origin answers a
// request with a proposal (DESIGN.md, the origin contract), the platform
// returns the operation in the form of the interface, and a retry that
// carries an approval of the revision performs the action at most once.
//
// This package holds what every interface shares: the wire forms of
// operations, approvals, proposals and declines; whether a request
// declares the extension; and the Store, whose single conditional UPDATE
// picks one performer among concurrent retries and which keeps the
// origin's answer for every later retry; and the hourly sweep that forgets
// expired operations. The gateway performs operations for its APIs, MCP
// tools and the website, and for conversations through the Performer
// interface. It owns operations, operation_revisions and
// operation_approvals (a website's recorded approvals).
package operations
