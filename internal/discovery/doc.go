// Package discovery generates and serves the documents a Personal Agent
// reads to find a Company (spec 3, 3.1, 3.2, 9.1, 9.4): poppy.json and the
// protected resource metadata (RFC 9728) on each Company domain, the
// issuer's authorization server metadata (RFC 8414), and the excluded
// tasks document. Documents are built from the Company's stored settings
// on each request, so a change through the admin API shows at once.
package discovery
