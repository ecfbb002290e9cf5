package issuer

import (
	"context"
	"time"

	"github.com/ory/fosite"
	"github.com/ory/fosite/handler/oauth2"
	"github.com/ory/fosite/handler/pkce"
	"github.com/ory/fosite/token/hmac"

	"github.com/poppyhost/poppyhost/internal/tenant"
)

// Default lifetimes; a Company overrides them in auth.token_lifetimes.
const (
	DefaultAccessTokenLifetime  = 15 * time.Minute
	DefaultRefreshTokenLifetime = 30 * 24 * time.Hour
	codeLifetime                = 5 * time.Minute
)

// Keys are each Company's signing keys and secret (internal/signing).
type Keys interface {
	Sign(ctx context.Context, companyID int64, typ string, payload []byte) (string, error)
	Verify(ctx context.Context, companyID int64, typ, token string) ([]byte, error)
	Secret(ctx context.Context, companyID int64) ([]byte, error)
	RotatedSecrets(ctx context.Context, companyID int64) ([][]byte, error)
}

// config is fosite's configuration with the per-Company values taken from
// the Company in the context. Values that are the same for every Company
// stay in the embedded fosite.Config.
type config struct {
	*fosite.Config
	keys Keys
}

// GetGlobalSecret is the Company's secret: the HMAC key of its codes and
// refresh tokens, so a code from one Company fails at another even before
// the Company-scoped lookup.
func (c *config) GetGlobalSecret(ctx context.Context) ([]byte, error) {
	return c.keys.Secret(ctx, companyID(ctx))
}

// GetRotatedGlobalSecrets are the Company's retired secrets that still
// verify the codes and refresh tokens they signed (signing.Keys.RotateSecret).
func (c *config) GetRotatedGlobalSecrets(ctx context.Context) ([][]byte, error) {
	return c.keys.RotatedSecrets(ctx, companyID(ctx))
}

// GetAccessTokenLifespan is the Company's access token lifetime.
func (c *config) GetAccessTokenLifespan(ctx context.Context) time.Duration {
	return AccessTokenLifetime(tenant.FromContext(ctx))
}

// GetRefreshTokenLifespan is the Company's refresh token lifetime.
func (c *config) GetRefreshTokenLifespan(ctx context.Context) time.Duration {
	return RefreshTokenLifetime(tenant.FromContext(ctx))
}

// AccessTokenLifetime is how long c's access tokens last.
func AccessTokenLifetime(c *tenant.Company) time.Duration {
	if s := c.Settings.Auth.TokenLifetimes.AccessSeconds; s > 0 {
		return time.Duration(s) * time.Second
	}
	return DefaultAccessTokenLifetime
}

// RefreshTokenLifetime is how long c's refresh tokens last from sign-in.
func RefreshTokenLifetime(c *tenant.Company) time.Duration {
	if s := c.Settings.Auth.TokenLifetimes.RefreshSeconds; s > 0 {
		return time.Duration(s) * time.Second
	}
	return DefaultRefreshTokenLifetime
}

// newProvider composes fosite with the handlers Poppy uses: the
// authorization code grant with PKCE (S256 only), refresh with rotation,
// revocation, and our device grant.
func newProvider(store *Store, keys Keys, access *accessTokens, device *deviceGrant, auth fosite.ClientAuthenticationStrategy) (*fosite.Fosite, *oauth2.HMACSHAStrategyUnPrefixed) {
	base := &fosite.Config{
		AuthorizeCodeLifespan:          codeLifetime,
		ScopeStrategy:                  fosite.ExactScopeStrategy,
		AudienceMatchingStrategy:       fosite.DefaultAudienceMatchingStrategy,
		EnforcePKCE:                    true,
		EnablePKCEPlainChallengeMethod: false,
		// state is the client's business (PKCE protects the code); any
		// value is passed back, and none is needed (authorize).
		MinParameterEntropy:          1,
		ClientAuthenticationStrategy: auth,
		SendDebugMessagesToClients:   false,
		OmitRedirectScopeParam:       true,
		// Every sign-in returns a refresh token (spec 4.4), whatever
		// the scopes; fosite's default asks for offline_access.
		RefreshTokenScopes: []string{},
	}
	cfg := &config{Config: base, keys: keys}
	codes := oauth2.NewHMACSHAStrategyUnPrefixed(&hmac.HMACStrategy{Config: cfg}, cfg)
	explicit := &oauth2.AuthorizeExplicitGrantHandler{
		AccessTokenStrategy:    access,
		RefreshTokenStrategy:   codes,
		AuthorizeCodeStrategy:  codes,
		CoreStorage:            store,
		TokenRevocationStorage: store,
		Config:                 cfg,
	}
	refresh := &refreshGrant{store: store, RefreshTokenGrantHandler: &oauth2.RefreshTokenGrantHandler{
		AccessTokenStrategy:    access,
		RefreshTokenStrategy:   codes,
		TokenRevocationStorage: store,
		Config:                 cfg,
	}}
	pkceHandler := &pkce.Handler{AuthorizeCodeStrategy: codes, Storage: store, Config: cfg}
	revocation := &oauth2.TokenRevocationHandler{
		TokenRevocationStorage: store,
		RefreshTokenStrategy:   codes,
		AccessTokenStrategy:    access,
	}
	device.codes = codes
	device.access = access
	device.store = store
	base.AuthorizeEndpointHandlers = fosite.AuthorizeEndpointHandlers{explicit, pkceHandler}
	base.TokenEndpointHandlers = fosite.TokenEndpointHandlers{explicit, refresh, pkceHandler, device}
	base.RevocationHandlers = fosite.RevocationHandlers{revocation}
	return &fosite.Fosite{Store: store, Config: cfg}, codes
}
