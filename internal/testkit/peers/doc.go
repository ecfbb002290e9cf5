// Package peers gives tests the real HTTPS parties the platform talks to:
// a test Personal Agent (its documents, keys, Session JWTs and client
// assertions), a Company origin that verifies Poppy-Verified, a Company
// Agent's webhook that records deliveries, a static resolver for their
// host names, a site serving one package's handlers for every host name,
// a form-filling browser with Direct Sign-In and revocation on a site
// that serves the issuer, and helpers that send requests and read whole
// responses. Every peer serves HTTPS with a certificate from a test
// CA (internal/devca); nothing here needs a database or the platform.
package peers
