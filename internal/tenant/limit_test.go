package tenant_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/botauth"
	"github.com/poppyhost/poppyhost/internal/httpx"
	"github.com/poppyhost/poppyhost/internal/tenant"
)

// TestLimitByOperator: a request whose Web Bot Auth signature recognised
// an operator counts against the operator, not its client address.
func TestLimitByOperator(t *testing.T) {
	c := &tenant.Company{ID: 7}
	c.Settings.RateLimits.PerAddress = 1
	h := tenant.LimitByAddress(httpx.NewLimiter())(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	send := func(addr, operator string) int {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = addr + ":1234"
		ctx := tenant.WithCompany(r.Context(), c)
		if operator != "" {
			ctx = botauth.WithOperator(ctx, &botauth.Operator{Host: operator})
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r.WithContext(ctx))
		return w.Code
	}
	// Two operators behind one proxy address each have their budget.
	require.Equal(t, 200, send("192.0.2.1", "a.example"))
	require.Equal(t, 200, send("192.0.2.1", "b.example"))
	// The address's own budget is untouched by them.
	require.Equal(t, 200, send("192.0.2.1", ""))
	require.Equal(t, 429, send("192.0.2.1", ""))
	// One operator from another address shares its budget.
	require.Equal(t, 429, send("192.0.2.9", "a.example"))
}
