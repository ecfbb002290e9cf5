-- +goose Up
-- One row per running server replica, refreshed every few seconds
-- (internal/replicas): the replicas whose row is recent divide each rate
-- limit between them (docs/operations.md, "Rate limits across replicas").
-- Unlogged: a row is rewritten within seconds, so it needs no WAL, and
-- after a crash or a failover the table fills again at the next beats.
CREATE UNLOGGED TABLE replica_heartbeats (
    id text PRIMARY KEY,
    seen_at timestamptz NOT NULL
);

-- +goose Down
DROP TABLE replica_heartbeats;
