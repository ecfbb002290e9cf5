// Package jobs builds the one River client that inserts and runs
// poppyhost's background work on the same PostgreSQL pool, and runs the
// domain packages' sweeps. Each domain package owns its job kinds and
// workers and registers them here; River elects one leader among the
// replicas for periodic jobs, so a sweep runs once, not once per replica.
// Each sweep run has River's timeout set explicitly and a budget a tenth
// shorter, at which it stops between batches; the poppyhost_sweep_*
// metrics say what it did and what it left.
package jobs
