-- +goose Up
-- A DPoP proof's jti is recorded on every DPoP-bound request, in an
-- unlogged table so that recording it writes no WAL. Its foreign key to
-- companies undid that, as session_jtis' did (migration 00042): checking
-- it locks the Company's row (FOR KEY SHARE), a WAL-logged change of a row
-- every concurrent request of the Company shares. A jti outlives its
-- Company by a few minutes at most (the sweep deletes it when it expires,
-- and Company IDs are never reused), so the key goes.
ALTER TABLE dpop_jtis DROP CONSTRAINT IF EXISTS dpop_jtis_company_id_fkey;

-- +goose Down
DELETE FROM dpop_jtis j WHERE NOT EXISTS (SELECT FROM companies c WHERE c.id = j.company_id);
ALTER TABLE dpop_jtis ADD CONSTRAINT dpop_jtis_company_id_fkey
    FOREIGN KEY (company_id) REFERENCES companies (id) ON DELETE CASCADE;
