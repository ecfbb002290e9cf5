-- +goose Up
-- Slugs of deleted Companies. A slug is part of an issuer, and an issuer
-- must stand for exactly one Company (spec 3.2), so a slug is never reused.
CREATE TABLE retired_slugs (
    slug       text        PRIMARY KEY,
    retired_at timestamptz NOT NULL DEFAULT now()
);

-- +goose Down
DROP TABLE retired_slugs;
