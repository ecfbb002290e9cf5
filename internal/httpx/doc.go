// Package httpx holds the HTTP plumbing every poppyhost handler shares: the
// one JSON error writer and its code table (spec 5.3, 8.13, 9.3 error bodies),
// the one collector of a body's field errors (Fields) and its text rule,
// strict and lenient JSON decoding with body limits, request IDs, access
// logs, Prometheus metrics, panic recovery, and the client address as seen
// through trusted proxies.
package httpx
