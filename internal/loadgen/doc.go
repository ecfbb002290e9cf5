// Package loadgen drives the built server binary from another process
// with an open-loop mix of Personal Agent traffic (discovery, signed-out
// and signed-in gateway calls, MCP tool calls, conversation messages with
// readers waiting on them, token refreshes) and reports throughput, latency
// quantiles per kind and the server's CPU and memory. vegeta's Attacker
// paces each kind; every request carries a Session JWT signed a few
// seconds ahead of its send. cmd/loadgen is its command line.
package loadgen
