-- +goose Up
-- A Session JWT's jti is recorded on every Session request (spec 5.3,
-- "Replayed JWTs"), in an unlogged table so that recording it writes no
-- WAL. Its foreign key to companies undid that: checking it locks the
-- Company's row (FOR KEY SHARE), a WAL-logged change of a shared row that
-- every concurrent request of the Company makes (a MultiXact when they
-- overlap), and which made the jti's own commit wait for the WAL flush. A
-- jti outlives its Company by a few minutes at most (the sweep deletes it
-- when it expires, and Company IDs are never reused), so the key goes.
ALTER TABLE session_jtis DROP CONSTRAINT IF EXISTS session_jtis_company_id_fkey;

-- +goose Down
DELETE FROM session_jtis j WHERE NOT EXISTS (SELECT FROM companies c WHERE c.id = j.company_id);
ALTER TABLE session_jtis ADD CONSTRAINT session_jtis_company_id_fkey
    FOREIGN KEY (company_id) REFERENCES companies (id) ON DELETE CASCADE;
