-- +goose Up
-- An access token that stops being valid before it expires (revoked,
-- disconnected, or deleted with its account or Company) notifies every
-- replica on commit, so their caches of verified tokens (bearer) drop it.
-- Expired tokens, which the caches refuse by their exp anyway, do not.
-- +goose StatementBegin
CREATE FUNCTION poppy_access_token_revoked() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('poppy_access_token_revoked', OLD.company_id::text || ' ' || encode(OLD.signature, 'hex'));
    RETURN NULL;
END
$$;
-- +goose StatementEnd
CREATE TRIGGER oauth_access_token_revoked AFTER UPDATE OF active ON oauth_tokens
    FOR EACH ROW WHEN (OLD.kind = 'access' AND OLD.active AND NOT NEW.active AND OLD.expires_at > now())
    EXECUTE FUNCTION poppy_access_token_revoked();
CREATE TRIGGER oauth_access_token_deleted AFTER DELETE ON oauth_tokens
    FOR EACH ROW WHEN (OLD.kind = 'access' AND OLD.active AND OLD.expires_at > now())
    EXECUTE FUNCTION poppy_access_token_revoked();

-- +goose Down
DROP TRIGGER oauth_access_token_deleted ON oauth_tokens;
DROP TRIGGER oauth_access_token_revoked ON oauth_tokens;
DROP FUNCTION poppy_access_token_revoked();
