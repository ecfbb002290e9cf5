package clientauth_test

import (
	"context"
	"errors"
	"net/url"
	"strings"
	"testing"

	"github.com/poppyhost/poppyhost/internal/clientauth"
	"github.com/poppyhost/poppyhost/internal/testkit/peers"
)

// FuzzVerify feeds arbitrary form values to Verify: it must never panic,
// accept only the test agent, and refuse everything else with an
// invalid_client *Error that says why (the replay store here cannot fail).
// The seeds are valid assertions and broken variants;
// testdata/fuzz/FuzzVerify holds more.
func FuzzVerify(f *testing.F) {
	b := setup(f)
	valid := b.assertion(f, spec{})
	parts := strings.Split(valid, ".")
	for _, seed := range []struct{ typ, assertion, clientID string }{
		{clientauth.AssertionType, valid, ""},
		{clientauth.AssertionType, b.assertion(f, spec{alg: "PS384"}), b.agent.ClientID},
		{clientauth.AssertionType, valid, b.agent.ClientID + "x"},
		{clientauth.AssertionType, parts[0] + "." + parts[1] + ".", ""},
		{clientauth.AssertionType, parts[0] + ".." + parts[2], ""},
		{clientauth.AssertionType, b.assertion(f, spec{claims: func(c map[string]any) { c["aud"] = []any{testIssuer, nil} }}), ""},
		{clientauth.AssertionType, b.assertion(f, spec{header: func(h map[string]any) { h["kid"] = []any{} }}), ""},
		{clientauth.AssertionType, b.agent.SessionJWT(f, peers.SessionClaims{Aud: testIssuer, URL: testIssuer}, peers.SessionOptions{}), ""},
		{"", "", ""},
	} {
		f.Add(seed.typ, seed.assertion, seed.clientID)
	}
	ctx := context.Background()
	f.Fuzz(func(t *testing.T, typ, assertion, clientID string) {
		form := url.Values{"client_assertion_type": {typ}, "client_assertion": {assertion}}
		if clientID != "" {
			form.Set("client_id", clientID)
		}
		client, err := b.verifier.Verify(ctx, testIssuer, form)
		if err == nil {
			if client == nil || client.ClientID != b.agent.ClientID {
				t.Fatalf("accepted client %+v", client)
			}
			return
		}
		if client != nil {
			t.Fatalf("client %+v with error %v", client, err)
		}
		var e *clientauth.Error
		if !errors.As(err, &e) {
			t.Fatalf("error %T %v is not a *clientauth.Error", err, err)
		}
		if e.Code != clientauth.CodeInvalidClient || e.Status() != 401 || e.Description == "" {
			t.Fatalf("error %+v", e)
		}
	})
}

// BenchmarkVerify measures client assertion verification with the client
// metadata and key set cached, the issuer's steady state.
func BenchmarkVerify(b *testing.B) {
	for _, alg := range []string{"ES256", "PS384"} {
		b.Run(alg, func(bb *testing.B) {
			env := setup(bb)
			ctx := context.Background()
			tokens := make([]string, bb.N)
			for i := range tokens {
				tokens[i] = env.assertion(bb, spec{alg: alg})
			}
			// Warm the caches.
			if _, err := env.verifier.Verify(ctx, testIssuer, form(env.assertion(bb, spec{alg: alg}))); err != nil {
				bb.Fatal(err)
			}
			bb.ReportAllocs()
			bb.ResetTimer()
			for i := 0; i < bb.N; i++ {
				if _, err := env.verifier.Verify(ctx, testIssuer, form(tokens[i])); err != nil {
					bb.Fatal(err)
				}
			}
		})
	}
}
