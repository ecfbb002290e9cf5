package demoshop

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/lestrrat-go/jwx/v2/jwk"
	"github.com/lestrrat-go/jwx/v2/jws"

	"github.com/poppyhost/poppyhost/internal/verified"
)

// errMissing: the request carries no Poppy-Verified.
var errMissing = errors.New("demoshop: no Poppy-Verified")

// refreshBackoff is how long after fetching the key set a KeySet waits
// before fetching it again for a key it does not have.
const refreshBackoff = 10 * time.Second

// keyPendingError: the JWT names a key the set lacks, and the set was
// fetched too recently to fetch it again. The key may be genuinely new, so
// the JWT is refused for now (503), not for good (401).
type keyPendingError struct {
	// retryAfter is how long until the set may be fetched again.
	retryAfter time.Duration
}

func (e *keyPendingError) Error() string {
	return fmt.Sprintf("demoshop: unknown signing key, key set fetched moments ago; retry in %v", e.retryAfter)
}

// KeySet verifies Poppy-Verified with the Company's key set at
// {issuer}/oauth/jwks.json, cached as its Cache-Control says, and fetched
// again when a JWT names a key it does not have (the Company rotated its
// key), at most every refreshBackoff, so made-up kids cannot make it fetch
// on every request (docs/gateway.md section 7). The demo shop and the demo
// Company Agent both use it.
type KeySet struct {
	cache *jwk.Cache
	url   string
	now   func() time.Time

	mu      sync.Mutex
	fetched time.Time
}

// NewKeySet returns the key set at jwksURL, fetched through client; it
// refreshes in the background until ctx is done. now is the clock.
func NewKeySet(ctx context.Context, jwksURL string, client *http.Client, now func() time.Time) (*KeySet, error) {
	cache := jwk.NewCache(ctx)
	if err := cache.Register(jwksURL, jwk.WithHTTPClient(client), jwk.WithMinRefreshInterval(time.Minute)); err != nil {
		return nil, err
	}
	return &KeySet{cache: cache, url: jwksURL, now: now}, nil
}

// Verify checks token, a Poppy-Verified JWT, for issuer and audience and
// returns its claims. The error wraps verified.ErrInvalid when the token
// is not valid (refuse it for good); any other error means it could not be
// checked yet (its key may be new, or the key set cannot be fetched).
func (k *KeySet) Verify(ctx context.Context, token, issuer, audience string) (*verified.Claims, error) {
	msg, err := jws.Parse([]byte(token))
	if err != nil || len(msg.Signatures()) != 1 {
		return nil, verified.ErrInvalid
	}
	set, err := k.forKID(ctx, msg.Signatures()[0].ProtectedHeaders().KeyID())
	if err != nil {
		return nil, err
	}
	return verified.Verify(token, set, issuer, audience, k.now())
}

// forKID returns the key set, fetched again first if it lacks kid. Within
// refreshBackoff of the last such fetch it returns a *keyPendingError
// instead.
func (k *KeySet) forKID(ctx context.Context, kid string) (jwk.Set, error) {
	set, err := k.cache.Get(ctx, k.url)
	if err != nil {
		return nil, err
	}
	if _, ok := set.LookupKeyID(kid); ok {
		return set, nil
	}
	k.mu.Lock()
	now := k.now()
	wait := k.fetched.Add(refreshBackoff).Sub(now)
	if wait <= 0 {
		k.fetched = now
	}
	k.mu.Unlock()
	if wait > 0 {
		return nil, &keyPendingError{retryAfter: wait}
	}
	return k.cache.Refresh(ctx, k.url)
}

// verify checks the request's Poppy-Verified for aud, the URL of the part
// of the shop the request is for, and returns its claims.
func (s *Shop) verify(r *http.Request, aud string) (*verified.Claims, error) {
	values := r.Header.Values(verified.Header)
	if len(values) == 0 {
		return nil, errMissing
	}
	if len(values) != 1 {
		return nil, verified.ErrInvalid
	}
	return s.keys.Verify(r.Context(), values[0], s.o.Issuer, aud)
}
