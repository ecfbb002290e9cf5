// Package console is the Company console: the web app, served by the
// platform at {PUBLIC_URL}/console/{slug}, where a Company's staff sign in
// and take handoffs, read operations and feedback and manage settings.
//
// Pages are rendered on the server with html/template inside one layout
// (render), from templates and assets embedded in the binary. Every
// request gets security headers (a strict Content-Security-Policy, no
// framing, no-store); every unsafe request needs the CSRF token of its
// session (csrf) and passes net/http's cross-origin protection. Sessions
// live in a __Host- cookie, SameSite=Strict, one per Company, whose token
// is stored hashed (console_sessions) and ends after an idle and an
// absolute timeout.
//
// Staff members (Member) have one Role; allow guards each route. Who may
// do what is in docs/console.md, "Roles".
//
// The tests live in package console_test: they start the whole platform
// (testkit), which imports this package, so an internal test package would
// be an import cycle. rig_test.go is the rig every page's tests use.
package console
