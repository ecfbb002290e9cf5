package signing

import (
	"encoding/json"
	"net/http"

	"github.com/go-chi/chi/v5"

	"github.com/poppyhost/poppyhost/internal/httpx"
	"github.com/poppyhost/poppyhost/internal/tenant"
)

// ServeJWKS answers GET {issuer}/oauth/jwks.json with the public keys of the
// Company in the request context (PublicSet, RFC 7517 §5). Verifiers may
// cache it for five minutes; a token whose kid they have not seen should
// make them fetch it again, as a new key signs as soon as it is made.
func (k *Keys) ServeJWKS(w http.ResponseWriter, r *http.Request) {
	c := tenant.FromContext(r.Context())
	if c == nil {
		httpx.NotFound(w, r)
		return
	}
	set, err := k.PublicSet(r.Context(), c.ID)
	if err != nil {
		httpx.WriteError(w, r, err)
		return
	}
	b, err := json.Marshal(set)
	if err != nil {
		httpx.WriteError(w, r, err)
		return
	}
	w.Header().Set("Content-Type", "application/jwk-set+json")
	w.Header().Set("Cache-Control", "public, max-age=300")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(append(b, '\n'))
}

// MountAdmin mounts POST /keys/rotate on r, which is mounted under
// /admin/v1/companies/{slug} with the Company in the context. It rotates
// the Company's signing key and answers 204.
func (k *Keys) MountAdmin(r chi.Router) {
	r.Post("/keys/rotate", k.serveRotate)
}

func (k *Keys) serveRotate(w http.ResponseWriter, r *http.Request) {
	c := tenant.FromContext(r.Context())
	if c == nil {
		httpx.NotFound(w, r)
		return
	}
	if err := k.Rotate(r.Context(), c.ID); err != nil {
		httpx.WriteError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
