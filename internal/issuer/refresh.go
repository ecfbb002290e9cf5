package issuer

import (
	"context"

	"github.com/ory/fosite"
	"github.com/ory/fosite/handler/oauth2"
)

// refreshGrant is fosite's refresh token grant, which reads the refresh
// token, detects its reuse and revokes the grant then, with its own last
// step: fosite's opens a transaction and sends the lock, the rotation and
// each new token's row one statement at a time, where this one writes them
// all in one round trip (Store.rotateRefresh, issue 19).
type refreshGrant struct {
	*oauth2.RefreshTokenGrantHandler
	store *Store
}

// PopulateTokenEndpointResponse implements fosite.TokenEndpointHandler:
// new access and refresh tokens, stored as the used refresh token is
// rotated. The token endpoint sets the response's final token type and
// expires_in.
func (g *refreshGrant) PopulateTokenEndpointResponse(ctx context.Context, req fosite.AccessRequester, resp fosite.AccessResponder) error {
	if !g.CanHandleTokenEndpointRequest(ctx, req) {
		return fosite.ErrUnknownRequest
	}
	access, accessSig, err := g.AccessTokenStrategy.GenerateAccessToken(ctx, req)
	if err != nil {
		return fosite.ErrServerError.WithWrap(err).WithDebug(err.Error())
	}
	refresh, refreshSig, err := g.RefreshTokenStrategy.GenerateRefreshToken(ctx, req)
	if err != nil {
		return fosite.ErrServerError.WithWrap(err).WithDebug(err.Error())
	}
	used := g.RefreshTokenStrategy.RefreshTokenSignature(ctx, req.GetRequestForm().Get("refresh_token"))
	stored := req.Sanitize(nil)
	stored.SetID(req.GetID())
	if err := g.store.rotateRefresh(ctx, used, accessSig, refreshSig, stored); err != nil {
		// tokenError answers errRefreshUsed with invalid_grant.
		return fosite.ErrServerError.WithWrap(err).WithDebug(err.Error())
	}
	resp.SetAccessToken(access)
	resp.SetTokenType("bearer")
	resp.SetScopes(req.GetGrantedScopes())
	resp.SetExtra("refresh_token", refresh)
	return nil
}
