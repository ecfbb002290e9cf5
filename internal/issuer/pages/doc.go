// Package pages renders the HTML pages of a Company's OAuth issuer: sign-in
// (spec 4.2), consent to the requested scopes with their hints in words (4.2,
// 4.7), code entry and code check for Device Sign-In (4.3, with RFC 10027's
// anti-phishing advice), the account page where a User disconnects a
// Personal Agent (5.5), and short done, declined and error messages.
//
// The pages are plain HTML with a little inline CSS and no JavaScript, so they
// work in any browser and with assistive technology. Every string comes from
// html/template, which escapes it; a logo is shown only when its URL is https.
// Each Personal Agent is named together with the host of its client_id, so a
// User can tell look-alike names apart.
//
// The form field names are a contract with the issuer's handlers: every form
// posts csrf and the page's hidden fields, and names its submit button
// "action" (login, approve, deny, continue, disconnect, signout).
package pages
