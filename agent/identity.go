package agent

import (
	"encoding/json"
	"net/http"
)

// routes serves the client metadata document (spec 4.1), the key set, the
// Web Bot Auth key directory and the Direct Sign-In callback.
func (a *Agent) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /agent.json", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, a.Metadata())
	})
	mux.HandleFunc("GET /jwks.json", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, a.JWKS())
	})
	mux.HandleFunc("GET "+botDirectoryPath, func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, a.BotDirectory())
	})
	mux.HandleFunc("GET /oauth/callback", a.callback)
	return mux
}

// Metadata is the agent's client metadata document (spec 4.1): client_id
// is its own URL, keys and redirect URIs on the same host, and the
// extensions it supports.
func (a *Agent) Metadata() map[string]any {
	m := map[string]any{
		"client_id":                  a.ClientID(),
		"client_name":                a.opts.Name,
		"jwks_uri":                   a.JWKSURI(),
		"redirect_uris":              []string{a.RedirectURI()},
		"token_endpoint_auth_method": "private_key_jwt",
		"grant_types":                []string{"authorization_code", "refresh_token", "urn:ietf:params:oauth:grant-type:device_code"},
		"response_types":             []string{"code"},
	}
	if !a.opts.NoOperations {
		m["extensions"] = map[string]any{"operations": map[string]any{"version": "3"}}
	}
	return m
}

// JWKS is the agent's public key set: one ES256 key that signs client
// assertions and delegations.
func (a *Agent) JWKS() map[string]any {
	k := publicJWK(&a.key.PublicKey)
	k["kid"] = a.kid
	k["use"] = "sig"
	k["alg"] = "ES256"
	return map[string]any{"keys": []any{k}}
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_ = json.NewEncoder(w).Encode(v)
}
