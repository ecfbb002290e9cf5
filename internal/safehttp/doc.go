// Package safehttp owns outbound HTTP for URLs a stranger gave us: a
// Personal Agent's client_id and jwks_uri, a Company's discovery and
// metadata documents, skill artifacts, a Company Agent's webhook. Every
// fetch of such a URL in poppyhost goes through Client.Get, and every POST
// to one through Client.Post.
//
// It implements spec 3 "HTTPS" (only https URLs, also after a redirect) and
// "Redirects and addresses": no connection to a loopback, private,
// link-local or otherwise non-public address unless AllowPrivate is set on
// purpose, and no credentials on any request, so none can follow a
// redirect. The address check runs on the address actually dialled: the
// transport resolves the name itself, refuses the whole name when any of
// its addresses is blocked, and dials the checked IP, so DNS cannot rebind
// between check and connect. Request.FollowRedirects lets callers fetch
// client metadata documents without following redirects, as CIMD §5 and
// spec 5.3 step 1 require.
//
// It also holds the rules other packages check before any request, so
// that they agree with what is dialled: CheckHost, the address rule for a
// URL registered now and called later, and ValidPath, the one rule for
// request paths (gateway calls, proposals, scope rules, client_ids).
//
// The package never logs, and its errors leave out URLs' query strings.
package safehttp
