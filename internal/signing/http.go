package signing

import (
	"context"
	"encoding/json"
	"net/http"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/poppyhost/poppyhost/internal/httpx"
	"github.com/poppyhost/poppyhost/internal/tenant"
)

// Handler serves a Company's keys over HTTP: its public keys for
// verifiers, and the rotation of its keys and secret for the operator.
type Handler struct {
	keys        *Keys
	signedUntil SignedUntil
}

// SignedUntil returns until when what the Company's current secret has
// signed, and what it may sign next, can be valid: when the codes and
// tokens it is the HMAC key of expire (issuer.Server.SecretSignedUntil).
type SignedUntil func(ctx context.Context, c *tenant.Company) (time.Time, error)

// NewHandler returns a Handler on keys; signedUntil bounds how long a
// rotated secret verifies.
func NewHandler(keys *Keys, signedUntil SignedUntil) *Handler {
	return &Handler{keys: keys, signedUntil: signedUntil}
}

// Public mounts GET /oauth/jwks.json under {PUBLIC_URL}/t/{slug}
// (httpx.PublicRoutes): every Company has signing keys, which sign
// Poppy-Verified for its origin and agent webhook even without an issuer.
func (h *Handler) Public(r chi.Router) { r.Get("/oauth/jwks.json", h.ServeJWKS) }

// ServeJWKS answers GET {issuer}/oauth/jwks.json with the public keys of the
// Company in the request context (PublicSet, RFC 7517 §5). Verifiers may
// cache it for five minutes; a token whose kid they have not seen should
// make them fetch it again, as a new key signs as soon as it is made.
func (h *Handler) ServeJWKS(w http.ResponseWriter, r *http.Request) {
	c := tenant.FromContext(r.Context())
	if c == nil {
		httpx.NotFound(w, r)
		return
	}
	set, err := h.keys.PublicSet(r.Context(), c.ID)
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

// Admin mounts under /admin/v1/companies/{slug} (httpx.AdminRoutes)
// POST /keys/rotate, which rotates the Company's signing key and answers
// 204, and POST /secret/rotations, which rotates its secret and answers
// 201 with when the new secret was made and until when the old one
// verifies.
func (h *Handler) Admin(r chi.Router) {
	r.Post("/keys/rotate", h.serveRotate)
	r.Post("/secret/rotations", h.serveRotateSecret)
}

func (h *Handler) serveRotateSecret(w http.ResponseWriter, r *http.Request) {
	c := tenant.FromContext(r.Context())
	if c == nil {
		httpx.NotFound(w, r)
		return
	}
	until, err := h.signedUntil(r.Context(), c)
	if err != nil {
		httpx.WriteError(w, r, err)
		return
	}
	rot, err := h.keys.RotateSecret(r.Context(), c.ID, until)
	if err != nil {
		httpx.WriteError(w, r, err)
		return
	}
	httpx.WriteJSON(w, http.StatusCreated, map[string]any{
		"created_at": rot.CreatedAt.UTC(), "previous_verifies_until": rot.PreviousVerifiesUntil.UTC(),
	})
}

func (h *Handler) serveRotate(w http.ResponseWriter, r *http.Request) {
	c := tenant.FromContext(r.Context())
	if c == nil {
		httpx.NotFound(w, r)
		return
	}
	if err := h.keys.Rotate(r.Context(), c.ID); err != nil {
		httpx.WriteError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
