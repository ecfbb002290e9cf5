package sessions_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/poppyhost/poppyhost/internal/httpx"
	"github.com/poppyhost/poppyhost/internal/sessions"
)

// FuzzVerify feeds arbitrary Poppy-Session headers and access tokens to
// Verify: it must never panic, and every failure must be an *httpx.Error
// with invalid_session (or invalid_request), the only answers spec 5.3
// allows. The seeds are a valid token from a fixed key and malformed
// variants; testdata/fuzz/FuzzVerify holds more.
func FuzzVerify(f *testing.F) {
	valid := unitToken(f, tokenSpec{})
	parts := strings.Split(valid, ".")
	for _, seed := range []struct{ token, accessToken string }{
		{valid, ""},
		{unitToken(f, tokenSpec{accessToken: "tok"}), "tok"},
		{valid, "tok"},
		{"", ""},
		{"a.b.c", ""},
		{"e30.e30.e30", ""},
		{parts[0] + "." + parts[1] + ".", ""},
		{parts[0] + ".." + parts[2], ""},
		{unitToken(f, tokenSpec{mutateHeader: func(h map[string]any) { h["alg"] = "none" }}), ""},
		{unitToken(f, tokenSpec{mutateHeader: func(h map[string]any) { delete(h, "pap_dlg") }}), ""},
		{unitToken(f, tokenSpec{mutateDlgClaims: func(c map[string]any) { c["cnf"] = map[string]any{"jwk": "x"} }}), ""},
		{unitToken(f, tokenSpec{mutateDlgClaims: func(c map[string]any) {
			c["cnf"] = map[string]any{"jwk": map[string]any{"kty": "EC", "crv": "P-256", "x": "AA", "y": "AA"}}
		}}), ""},
		{unitToken(f, tokenSpec{mutateClaims: func(c map[string]any) { c["aud"] = []any{unitAud, nil} }}), ""},
		// An x longer than P-256 allows, which jwx parses and then
		// panicked on when taking the thumbprint.
		{unitToken(f, tokenSpec{mutateDlgClaims: func(c map[string]any) {
			c["cnf"] = map[string]any{"jwk": map[string]any{"kty": "EC", "crv": "P-256",
				"x": "00000000000000000000000000000000000000000000", "y": "4Etl6SRW2YiLUrN5vfvVHuhp7x8PxltmWWlbbM4IFyM"}}
		}}), ""},
	} {
		f.Add(seed.token, seed.accessToken)
	}
	v, _, _ := newUnitVerifier(f)
	ctx := context.Background()
	f.Fuzz(func(t *testing.T, token, accessToken string) {
		req := unitRequest
		req.AccessToken = accessToken
		claims, err := v.Verify(ctx, token, req)
		if err == nil {
			if claims == nil || claims.ClientID != unitClientID || !sessions.ValidID(claims.SID) || claims.UserID == "" || claims.JTI == "" {
				t.Fatalf("accepted with claims %+v", claims)
			}
			return
		}
		if claims != nil {
			t.Fatalf("claims %+v with error %v", claims, err)
		}
		var he *httpx.Error
		if !errors.As(err, &he) {
			t.Fatalf("error %T %v is not an *httpx.Error", err, err)
		}
		if he.Code != httpx.CodeInvalidSession && he.Code != httpx.CodeInvalidRequest {
			t.Fatalf("error code %q: %v", he.Code, err)
		}
		if he.Description == "" {
			t.Fatalf("no error_description: %v", err)
		}
	})
}
