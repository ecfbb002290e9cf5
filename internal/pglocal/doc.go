// Package pglocal runs a private PostgreSQL server from the system's
// PostgreSQL binaries.
//
// The server's dev mode keeps its cluster under .data/postgres, and the test
// kit falls back to a throwaway cluster when no PostgreSQL server is
// reachable. The server listens only on 127.0.0.1, on a port chosen at start,
// and trusts every local connection, so it is unsuitable for production.
//
// Layout of the cluster directory (Options.Dir):
//
//	.poppyhost.lock   flock taken while starting or stopping
//	poppyhost-port    TCP port of the running server
//	server.log        server log (pg_ctl -l)
//	data/             the PostgreSQL data directory (PGDATA)
//	.s.PGSQL.<port>   Unix socket of the running server
//
// PGDATA is a subdirectory rather than the directory itself because initdb
// insists on an empty (or absent) directory and the lock file must exist
// before initdb runs.
package pglocal
