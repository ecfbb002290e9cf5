-- +goose Up
-- The operations being performed or whose outcome is unknown, by how long
-- ago their sending began: the metrics collector reads the count and the
-- oldest of each at every scrape (operations.UnsettledCollector).
CREATE INDEX operations_unsettled_since ON operations (status, performing_since)
    WHERE status IN ('performing', 'unknown');

-- +goose Down
DROP INDEX operations_unsettled_since;
