// Package testdb gives a test its own PostgreSQL database, cloned from a
// migrated template, and runs River jobs and sweeps to completion on it.
// It imports only the migrations and internal/jobs, so a domain package's
// tests build without the platform.
//
// Databases come from POPPYHOST_TEST_DATABASE_URL, else PostgreSQL on
// 127.0.0.1:5432 as user postgres, else a private cluster started from the
// system's PostgreSQL binaries in the temporary directory.
package testdb
