// Package agent is a reference Personal Agent, written from the Personal
// Agent Protocol draft 0.3 and the Operations extension version 3, not
// from poppyhost's code: it imports nothing from poppyhost's internal
// packages (a test checks).
//
// It serves its own client metadata document and key set over HTTPS (spec
// 4.1), discovers a Company with every check of spec 3, signs a Session
// JWT for each request with a delegated key (spec 5.2), signs in with
// Direct Sign-In in headless Chromium or with Device Sign-In (spec 4.2,
// 4.3), refreshes and revokes (spec 4.4, 4.6), calls APIs and MCP servers
// (spec 7), talks in conversations by long-poll and SSE (spec 8), joins
// its browser to a Session (spec 6), and approves operations on every
// interface (Operations extension). A Recorder keeps a transcript of
// every request and response with secrets redacted.
package agent
