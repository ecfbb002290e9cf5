// Package testkit gives tests real peers: a PostgreSQL database per test,
// cloned from a migrated template; a test CA; and the whole platform served
// over HTTPS with a client that reaches any Company domain on it.
//
// Databases come from POPPYHOST_TEST_DATABASE_URL, else PostgreSQL on
// 127.0.0.1:5432 as user postgres, else a private cluster started from the
// system's PostgreSQL binaries in the temporary directory.
package testkit
