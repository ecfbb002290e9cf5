package demoshop_test

import (
	"context"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/demoshop"
	"github.com/poppyhost/poppyhost/internal/verified"
)

// typedKey signs with the Company's key but states typ as its own.
type typedKey struct {
	companyKey
	typ string
}

func (k typedKey) Sign(ctx context.Context, companyID int64, _ string, payload []byte) (string, error) {
	return k.companyKey.Sign(ctx, companyID, k.typ, payload)
}

// signed signs c as iss for aud with k, now.
func (r *rig) signed(k verified.Signer, iss, aud string, c verified.Claims) string {
	c.Issuer, c.Audience = iss, aud
	tok, err := verified.Sign(context.Background(), k, 1, c, time.Now())
	require.NoError(r.t, err)
	return tok
}

// TestKeyRotation: a JWT signed with a key the shop has not fetched is
// refused for good (401) only after the shop fetched the key set again and
// the key is not in it; within the backoff after a fetch it is refused for
// now (503 with Retry-After), so the platform retries an approved request,
// and once the backoff passes on the shop's clock the new key is fetched.
func TestKeyRotation(t *testing.T) {
	t.Parallel()
	r := setup(t)
	api := r.shop.APIOrigin()
	resp := r.do(http.MethodGet, "/api/orders", nil, verified.Header, r.token(api, ada()))
	require.Equal(t, http.StatusOK, resp.Status)

	rotated := newKey(t)
	resp = r.do(http.MethodGet, "/api/orders", nil, verified.Header, r.tokenWith(rotated, api, ada(), time.Now()))
	require.Equal(t, http.StatusUnauthorized, resp.Status, "fetched again, and the key is not in the set")

	r.publish(rotated)
	approval := approved(ada(), "op_1", "rev_1", "user")
	resp = r.do(http.MethodPost, exchangePath, jacket, verified.Header, r.tokenWith(rotated, api, approval, time.Now()),
		"Idempotency-Key", "op_1.rev_1")
	require.Equal(t, http.StatusServiceUnavailable, resp.Status, "the set was fetched moments ago")
	require.Equal(t, "unavailable", resp.JSON(t)["error"])
	after, err := strconv.Atoi(resp.Header.Get("Retry-After"))
	require.NoError(t, err)
	require.True(t, after >= 1 && after <= 10, "Retry-After %d", after)
	require.Empty(t, r.shop.Orders("42")[0].Exchanges, "nothing was performed")

	r.skew.Store(int64(11 * time.Second))
	resp = r.do(http.MethodPost, exchangePath, jacket, verified.Header, r.tokenWith(rotated, api, approval, time.Now()),
		"Idempotency-Key", "op_1.rev_1")
	require.Equal(t, http.StatusCreated, resp.Status, "%s", resp.Body)
	require.Len(t, r.shop.Orders("42")[0].Exchanges, 1)
	resp = r.do(http.MethodGet, "/api/orders", nil, verified.Header, r.token(api, ada()))
	require.Equal(t, http.StatusOK, resp.Status, "the first key still works")
}

// TestIssuerURL: the orders API's description names the Company's issuer
// URL for OAuth, which defaults to its identifier and may differ from it.
func TestIssuerURL(t *testing.T) {
	t.Parallel()
	flows := func(s *demoshop.Shop) map[string]any {
		schemes := s.OpenAPI()["components"].(map[string]any)["securitySchemes"].(map[string]any)
		return schemes["stormline"].(map[string]any)["flows"].(map[string]any)["authorizationCode"].(map[string]any)
	}
	same, err := demoshop.New(demoshop.Options{BaseURL: "https://shop.test", Issuer: issuer})
	require.NoError(t, err)
	t.Cleanup(same.Close)
	require.Equal(t, issuer+"/oauth/authorize", flows(same)["authorizationUrl"])
	require.Equal(t, issuer+"/oauth/token", flows(same)["tokenUrl"])

	apart, err := demoshop.New(demoshop.Options{BaseURL: "https://shop.test", Issuer: "https://stormline.test",
		IssuerURL: "https://poppyhost.test/t/stormline/"})
	require.NoError(t, err)
	t.Cleanup(apart.Close)
	require.Equal(t, "https://poppyhost.test/t/stormline/oauth/authorize", flows(apart)["authorizationUrl"])
	require.Equal(t, "https://poppyhost.test/t/stormline/oauth/token", flows(apart)["tokenUrl"])
}
