// Package plancheck checks the query plans of the statements a store
// really runs. A [Recorder] is a pgx tracer: a test builds its stores on
// a pool that records every statement with its arguments, drives the
// store methods of a hot path, and hands each recorded statement to
// [Check], which prepares it and explains it both as a custom plan (the
// arguments' values known) and as a generic one (plan_cache_mode =
// force_generic_plan, what a prepared statement may switch to after five
// executions), and asserts which index each table is read through and
// that no scan is estimated to return more rows than the statement
// needs. The statements are the stores' own, so the check follows the
// code; docs/decisions.md, "Query plans that hold", says why.
package plancheck
