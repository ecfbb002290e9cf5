// Package plans holds tests only: the plan test of issue 24. It drives
// the stores' exported methods on the hot paths (docs/benchmarks.md) on a
// pool that records every statement (internal/testkit/plancheck), loads
// rows for several Companies, one of them large, and checks that each
// recorded statement is planned through the index it needs, as a custom
// and as a generic plan, on tables never analyzed and after ANALYZE.
// docs/decisions.md, "Query plans that hold", says which index each
// statement needs and why the plans cannot change without statistics.
package plans
