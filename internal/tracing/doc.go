// Package tracing is the platform's OpenTelemetry tracing: Setup turns it
// on from the standard OTEL_* environment variables, Start opens a span
// when it is on, Transport carries a request's trace to a Company's
// origin, and DB traces database statements.
//
// Tracing is off unless configured: no exporter runs, Start returns its
// context unchanged and no span is made, so requests pay one atomic load.
//
// No span carries a token, a credential, personal data, a statement's
// arguments or a URL's query: only route patterns, Company slugs, status
// classes and a statement's first word.
package tracing
