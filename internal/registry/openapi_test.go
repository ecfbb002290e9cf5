package registry

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/tenant"
)

const ordersYAML = `openapi: 3.0.3
info: {title: Orders, version: "1"}
servers: [{url: "https://origin.example/v1"}]
security: [{oauth: [orders:read]}]
components:
  securitySchemes:
    oauth:
      type: oauth2
      flows:
        clientCredentials: {tokenUrl: "https://elsewhere.example/token", scopes: {orders:read: Read, orders:write: Write}}
    key: {type: apiKey, in: header, name: X-Key}
paths:
  /orders:
    get: {responses: {"200": {description: ok}}}
  /orders/mine:
    get:
      security: [{}]
      responses: {"200": {description: ok}}
  /orders/{id}:
    servers: [{url: "https://other.example"}]
    parameters: [{name: id, in: path, required: true, schema: {type: string}}]
    get: {responses: {"200": {description: ok}}}
    post:
      security: [{oauth: [orders:write, orders:read]}, {key: []}]
      responses: {"200": {description: ok}}
  /products:
    get:
      security: []
      responses: {"200": {description: ok}}
  /files/{name}.json:
    parameters: [{name: name, in: path, required: true, schema: {type: string}}]
    get: {responses: {"200": {description: ok}}}
`

func TestCompileMatchesOperationsAndTheirAccess(t *testing.T) {
	s, err := Compile(context.Background(), []byte(ordersYAML))
	require.NoError(t, err)

	acc, allow := s.Match("GET", "/orders")
	require.Nil(t, allow)
	require.Equal(t, &Access{Alternatives: [][]string{{"orders:read"}}}, acc, "the document's security applies")

	acc, _ = s.Match("GET", "/orders/mine")
	require.True(t, acc.SignedOut, "a concrete path wins over /orders/{id}, and {} allows signed-out calls")

	acc, _ = s.Match("GET", "/products")
	require.True(t, acc.SignedOut, "security: [] turns the document's requirement off")

	acc, _ = s.Match("POST", "/orders/o%2D1")
	require.False(t, acc.SignedOut)
	require.Equal(t, [][]string{{"orders:read", "orders:write"}, nil}, acc.Alternatives,
		"oauth scopes sorted; an apiKey requirement needs a token with no particular scope")
	require.True(t, acc.Allows(true, nil), "the second alternative needs no scope")
	require.False(t, acc.Allows(false, nil))

	acc, _ = s.Match("GET", "/files/report.json")
	require.NotNil(t, acc)

	acc, allow = s.Match("DELETE", "/orders/o1")
	require.Nil(t, acc)
	require.Equal(t, []string{"GET", "POST"}, allow)

	for _, p := range []string{"/orders/", "/orders/a/b", "/nope", "/orders/mine/x", "/files/x.jsonx"} {
		acc, allow := s.Match("GET", p)
		require.Nil(t, acc, p)
		require.Nil(t, allow, p)
	}
}

func TestAccessAlternativesAndNeededScopes(t *testing.T) {
	acc := &Access{Alternatives: [][]string{{"a", "b"}, {"c"}}}
	require.True(t, acc.Allows(true, []string{"c"}))
	require.True(t, acc.Allows(true, []string{"a", "b"}))
	require.False(t, acc.Allows(true, []string{"a"}))
	require.Equal(t, []string{"a", "b"}, acc.Needed([]string{"a"}), "the closest alternative")
	require.Equal(t, []string{"c"}, acc.Needed(nil))
}

func TestCompileRefusesWhatItCannotServe(t *testing.T) {
	for name, doc := range map[string]string{
		"not a document": `{"hello": `,
		"swagger 2":      `{"swagger": "2.0", "info": {"title": "x", "version": "1"}, "paths": {}}`,
		"no paths":       `{"openapi": "3.0.3", "info": {"title": "x", "version": "1"}, "paths": {}}`,
		"unknown scheme": `{"openapi": "3.0.3", "info": {"title": "x", "version": "1"}, "paths": {"/a": {"get": {"security": [{"nope": []}], "responses": {"200": {"description": "ok"}}}}}}`,
		"invalid":        `{"openapi": "3.0.3", "info": {"title": "x", "version": "1"}, "paths": {"/a": {"get": {}}}}`,
		"external ref":   `{"openapi": "3.0.3", "info": {"title": "x", "version": "1"}, "paths": {"/a": {"$ref": "https://evil.example/p.json"}}}`,
	} {
		_, err := Compile(context.Background(), []byte(doc))
		require.True(t, errors.Is(err, ErrInvalidOpenAPI), "%s: %v", name, err)
	}
	big := make([]byte, MaxOpenAPIBytes+1)
	_, err := Compile(context.Background(), big)
	require.ErrorIs(t, err, ErrInvalidOpenAPI)
}

func TestPublishedNamesTheGatewayAndTheIssuer(t *testing.T) {
	s, err := Compile(context.Background(), []byte(ordersYAML))
	require.NoError(t, err)
	stored, err := s.DocumentJSON()
	require.NoError(t, err)
	raw, err := Published(stored, "https://p.example/t/shop/api/orders", "https://p.example/t/shop",
		[]string{tenant.GrantAuthorizationCode})
	require.NoError(t, err)
	var doc struct {
		Servers    []map[string]string                   `json:"servers"`
		Paths      map[string]map[string]json.RawMessage `json:"paths"`
		Components struct {
			SecuritySchemes map[string]struct {
				Type  string `json:"type"`
				Flows map[string]struct {
					AuthorizationURL string            `json:"authorizationUrl"`
					TokenURL         string            `json:"tokenUrl"`
					Scopes           map[string]string `json:"scopes"`
				} `json:"flows"`
			} `json:"securitySchemes"`
		} `json:"components"`
	}
	require.NoError(t, json.Unmarshal(raw, &doc))
	require.Equal(t, []map[string]string{{"url": "https://p.example/t/shop/api/orders"}}, doc.Servers)
	require.NotContains(t, doc.Paths["/orders/{id}"], "servers", "no path may name the origin")
	flows := doc.Components.SecuritySchemes["oauth"].Flows
	require.Len(t, flows, 1)
	code := flows["authorizationCode"]
	require.Equal(t, "https://p.example/t/shop/oauth/authorize", code.AuthorizationURL)
	require.Equal(t, "https://p.example/t/shop/oauth/token", code.TokenURL)
	require.Equal(t, map[string]string{"orders:read": "Read", "orders:write": "Write"}, code.Scopes)
}

// TestPublishedFlowsAreTheOfferedOnes: a published description names only
// the sign-in the Company offers. Spec 4.7: "scopes are described in the
// API's OAuth 2.0 security scheme"; RFC 8414 §2 leaves authorization_endpoint
// out when "no grant types are supported that use the authorization
// endpoint", so the description must not name {issuer}/oauth/authorize
// then either. The device flow, which OpenAPI 3.0 and 3.1 cannot name, is
// x-deviceAuthorization in OpenAPI 3.2's deviceAuthorization shape.
func TestPublishedFlowsAreTheOfferedOnes(t *testing.T) {
	s, err := Compile(context.Background(), []byte(ordersYAML))
	require.NoError(t, err)
	stored, err := s.DocumentJSON()
	require.NoError(t, err)
	const iss = "https://p.example/t/shop"
	scopes := map[string]any{"orders:read": "Read", "orders:write": "Write"}
	code := map[string]any{"authorizationUrl": iss + "/oauth/authorize", "tokenUrl": iss + "/oauth/token",
		"refreshUrl": iss + "/oauth/token", "scopes": scopes}
	device := map[string]any{"deviceAuthorizationUrl": iss + "/oauth/device_authorization", "tokenUrl": iss + "/oauth/token",
		"refreshUrl": iss + "/oauth/token", "scopes": scopes}
	for name, tc := range map[string]struct {
		grants []string
		want   map[string]any
	}{
		"both":        {[]string{tenant.GrantAuthorizationCode, tenant.GrantDeviceCode}, map[string]any{"authorizationCode": code, "x-deviceAuthorization": device}},
		"direct only": {[]string{tenant.GrantAuthorizationCode}, map[string]any{"authorizationCode": code}},
		"device only": {[]string{tenant.GrantDeviceCode}, map[string]any{"x-deviceAuthorization": device}},
		"sign-in off": {nil, map[string]any{}},
	} {
		t.Run(name, func(t *testing.T) {
			raw, err := Published(stored, iss+"/api/orders", iss, tc.grants)
			require.NoError(t, err)
			var doc struct {
				Components struct {
					SecuritySchemes map[string]map[string]any `json:"securitySchemes"`
				} `json:"components"`
			}
			require.NoError(t, json.Unmarshal(raw, &doc))
			require.Equal(t, tc.want, doc.Components.SecuritySchemes["oauth"]["flows"])
			if !slices.Contains(tc.grants, tenant.GrantAuthorizationCode) {
				require.NotContains(t, string(raw), "/oauth/authorize")
			}
		})
	}
}
