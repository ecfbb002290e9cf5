package signing_test

import (
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/lestrrat-go/jwx/v2/jwk"
	"github.com/lestrrat-go/jwx/v2/jws"
	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/jose"
	"github.com/poppyhost/poppyhost/internal/tenant"
)

func TestServeJWKS(t *testing.T) {
	t.Parallel()
	b := setup(t)
	alpha := b.company(t, "alpha")
	get := func(c *tenant.Company) *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodGet, "https://poppyhost.example/t/alpha/oauth/jwks.json", nil)
		if c != nil {
			req = req.WithContext(tenant.WithCompany(req.Context(), c))
		}
		rec := httptest.NewRecorder()
		b.handler().ServeJWKS(rec, req)
		return rec
	}

	rec := get(&tenant.Company{ID: alpha, Slug: "alpha"})
	require.Equal(t, http.StatusOK, rec.Code)
	require.Equal(t, "application/jwk-set+json", rec.Header().Get("Content-Type"))
	require.Equal(t, "public, max-age=300", rec.Header().Get("Cache-Control"))
	var body struct {
		Keys []map[string]json.RawMessage `json:"keys"`
	}
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &body))
	require.Len(t, body.Keys, 1, "the first request makes the key")
	member := func(k map[string]json.RawMessage, name string) string {
		var s string
		require.NoError(t, json.Unmarshal(k[name], &s), name)
		return s
	}
	k := body.Keys[0]
	require.False(t, jose.HasPrivateMembers(k), "%s", rec.Body)
	require.NotContains(t, k, "d")
	require.Equal(t, "EC", member(k, "kty"))
	require.Equal(t, "P-256", member(k, "crv"))
	require.Equal(t, "ES256", member(k, "alg"))
	require.Equal(t, "sig", member(k, "use"))
	require.Equal(t, b.kid(t, b.keys, alpha), member(k, "kid"))

	// After a rotation both keys are published, and the set verifies a
	// token as a resource server would.
	require.NoError(t, b.keys.Rotate(b.ctx, alpha))
	rec = get(&tenant.Company{ID: alpha, Slug: "alpha"})
	require.Equal(t, http.StatusOK, rec.Code)
	set, err := jwk.Parse(rec.Body.Bytes())
	require.NoError(t, err)
	require.Equal(t, 2, set.Len())
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &body))
	for _, k := range body.Keys {
		require.False(t, jose.HasPrivateMembers(k), "%s", rec.Body)
	}
	tok := b.sign(t, b.keys, alpha, typ, `{"sub":"alice"}`)
	_, err = jws.Verify([]byte(tok), jws.WithKeySet(set))
	require.NoError(t, err)

	require.Equal(t, http.StatusNotFound, get(nil).Code, "no Company")
}

func TestAdminRotates(t *testing.T) {
	t.Parallel()
	b := setup(t)
	alpha, beta := b.company(t, "alpha"), b.company(t, "beta")
	oldA, oldB := b.kid(t, b.keys, alpha), b.kid(t, b.keys, beta)

	r := chi.NewRouter()
	r.Route("/admin/v1/companies/{slug}", func(r chi.Router) {
		r.Use(tenant.BySlug(tenant.NewStore(b.pool)))
		b.handler().Admin(r)
	})
	post := func(path string) *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		r.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, path, nil))
		return rec
	}

	rec := post("/admin/v1/companies/alpha/keys/rotate")
	require.Equal(t, http.StatusNoContent, rec.Code, rec.Body.String())
	require.Empty(t, rec.Body.String())
	newA := b.kid(t, b.keys, alpha)
	require.NotEqual(t, oldA, newA)
	require.Equal(t, []string{newA, oldA}, b.kids(t, b.keys, alpha))
	require.Equal(t, oldB, b.kid(t, b.keys, beta), "only the Company named")

	require.Equal(t, http.StatusNotFound, post("/admin/v1/companies/gamma/keys/rotate").Code)

	// The secret: a new one signs, the old one verifies until what it
	// signed expires (b.handler: an hour), plus the cache's minute.
	secretA, err := b.keys.Secret(b.ctx, alpha)
	require.NoError(t, err)
	secretB, err := b.keys.Secret(b.ctx, beta)
	require.NoError(t, err)
	rec = post("/admin/v1/companies/alpha/secret/rotations")
	require.Equal(t, http.StatusCreated, rec.Code, rec.Body.String())
	var rot map[string]string
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &rot))
	require.Equal(t, map[string]string{
		"created_at":              b.clock.Now().Format(time.RFC3339),
		"previous_verifies_until": b.clock.Now().Add(time.Hour + time.Minute).Format(time.RFC3339),
	}, rot)
	require.NotContains(t, rec.Body.String(), base64.StdEncoding.EncodeToString(secretA))
	now, err := b.keys.Secret(b.ctx, alpha)
	require.NoError(t, err)
	require.NotEqual(t, secretA, now)
	rotated, err := b.keys.RotatedSecrets(b.ctx, alpha)
	require.NoError(t, err)
	require.Equal(t, [][]byte{secretA}, rotated)
	after, err := b.keys.Secret(b.ctx, beta)
	require.NoError(t, err)
	require.Equal(t, secretB, after, "only the Company named")
	require.Equal(t, http.StatusNotFound, post("/admin/v1/companies/gamma/secret/rotations").Code)
}
