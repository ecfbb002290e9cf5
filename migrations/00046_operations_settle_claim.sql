-- +goose Up
-- The claim of an operation that has its settle job. The job is no longer
-- inserted with the claim (issue 19): a sweep every few seconds gives one
-- to each claim whose send lease lapsed, and marks the claim here in the
-- job's transaction so that the next run passes it by. A new claim differs
-- from the mark, so it is given its own job when its lease lapses.
ALTER TABLE operations ADD COLUMN settle_claim text;

-- +goose Down
ALTER TABLE operations DROP COLUMN settle_claim;
