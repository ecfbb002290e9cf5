// Package jobs builds the one River client that inserts and runs
// poppyhost's background work on the same PostgreSQL pool, and runs the
// domain packages' sweeps. Each domain package owns its job kinds and
// workers and registers them here; River elects one leader among the
// replicas for periodic jobs, so a sweep runs once, not once per replica.
package jobs
