// Package api holds poppyhost's OpenAPI document, openapi.yaml, which
// describes every HTTP route the server serves: the operator and Company
// APIs and operational endpoints on the platform's own host, the protocol
// and discovery routes of each Company under {PUBLIC_URL}/t/{slug}, and the
// discovery documents served on each Company domain.
//
// The document is embedded as OpenAPI. Its contract test drives the running
// platform through every documented operation and status and validates each
// real request and response against the document, so the two cannot drift
// apart unnoticed.
package api
