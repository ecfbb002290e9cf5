package coverage_test

import (
	"bytes"
	"io"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/testkit"
)

func TestFeedbackSmoke(t *testing.T) {
	t.Parallel()
	env := testkit.Setup(t)
	env.CreateCompany(t, map[string]any{"slug": "shop", "organization": map[string]any{"name": "Shop", "domain": "shop.example"}})
	agent := env.StartAgent(t, "")
	u := env.PublicURL("/t/shop/poppy/feedback")
	req, err := http.NewRequest(http.MethodPost, u, bytes.NewReader([]byte(`{"task":"Pay with a gift card","description":"No field for it."}`)))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	agent.Sign(t, req, testkit.SessionClaims{Aud: env.PublicURL("/t/shop")[:len(env.PublicURL("/t/shop"))]}, testkit.SessionOptions{})
	resp, err := env.Client.Do(req)
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusAccepted, resp.StatusCode, "%s", body)
}
