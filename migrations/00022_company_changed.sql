-- +goose Up
-- Every change to a Company's row (its settings, and with them its
-- domains, which are written in the same transaction) or its deletion
-- notifies every replica, on commit, so the Company caches of all of them
-- (tenant.Cache) drop it. A trigger, so that no write path can forget.
-- +goose StatementBegin
CREATE FUNCTION poppy_company_changed() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('poppy_company_changed', OLD.id::text);
    RETURN NULL;
END
$$;
-- +goose StatementEnd
CREATE TRIGGER companies_changed AFTER UPDATE OR DELETE ON companies
    FOR EACH ROW EXECUTE FUNCTION poppy_company_changed();

-- +goose Down
DROP TRIGGER companies_changed ON companies;
DROP FUNCTION poppy_company_changed();
