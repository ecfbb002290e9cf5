// Package db is the one way poppyhost's stores reach PostgreSQL: the
// [Executor] a store function runs on (a pool or a transaction), [InTx] for
// work that commits as one, the mapping of PostgreSQL's answers to a
// store's own errors ([NotFound], [IsConflict]) and [DeleteInBatches] for
// sweeps.
//
// Statements live in each domain package's store files (store.go and
// store_*.go); nothing outside them writes SQL. A store keeps a
// *pgxpool.Pool and passes it, or the pgx.Tx that [InTx] gives, to the
// functions that take an [Executor].
package db
