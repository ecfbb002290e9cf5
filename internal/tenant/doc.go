// Package tenant owns Companies: their settings and validation, their
// domains, their API keys, the platform's operator tokens, routing a request
// to its Company by Host, and the admin API under /admin/v1.
//
// A Company's settings are what its discovery documents are generated from
// (spec 3, 3.1, 3.2, 3.3, 9.1, 9.4); validation enforces the spec's rules on
// them before anything is stored, so every document we publish is valid.
package tenant
