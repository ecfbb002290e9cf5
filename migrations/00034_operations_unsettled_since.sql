-- +goose Up
-- The operations being performed or whose outcome is unknown, by how long
-- ago their sending began: the metrics collector reads the count and the
-- oldest of each at every scrape (operations.UnsettledCollector). Every
-- such operation has performing_since (a claim sets it, and only a release
-- to approved clears it); the predicate says so, so that no statement of
-- the hot path that names one operation by its key and a status can take
-- this index for the primary key's.
CREATE INDEX operations_unsettled_since ON operations (status, performing_since)
    WHERE status IN ('performing', 'unknown') AND performing_since IS NOT NULL;

-- +goose Down
DROP INDEX operations_unsettled_since;
