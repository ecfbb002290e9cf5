// Package browserjoin joins the Personal Agent's browser to a Session
// (spec 6, 10.6) on every Company domain, at /poppy/browser-session:
//
//  1. GET gives the browser a page with a one-time code and, in the same
//     response, a __Host- join cookie that ties the code to it;
//  2. the Personal Agent authorizes the code at /authorize with its
//     Session header and, signed in, its access token;
//  3. the browser posts the code with the join cookie and gets the
//     Session's cookie.
//
// The Session's cookie then stands for a web session: the Session, and
// after a signed-in join the account and scopes of step 2, for as long as
// the Session lasts and the Personal Agent stays signed in to that
// account. The website proxy (internal/website) and the Company's own
// website (/company/v1/web-sessions) ask this package what a cookie acts
// for. The package owns browser_join_codes and web_sessions.
package browserjoin
