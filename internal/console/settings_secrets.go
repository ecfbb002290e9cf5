package console

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/poppyhost/poppyhost/internal/httpx"
	"github.com/poppyhost/poppyhost/internal/tenant"
)

// The Company's secrets: the webhook secret that signs what the platform
// posts to the Company Agent, and the Company API keys. A new secret is
// shown once, on the answer to the form that made it (never stored in the
// clear, never in a URL), and that answer is not stored by the browser
// (Cache-Control: no-store, as every console page).

// WebhookSecrets rotates a Company's webhook secret
// (*conversations.Delivery).
type WebhookSecrets interface {
	RotateSecret(ctx context.Context, companyID int64) (string, time.Time, error)
}

type webhookData struct {
	Nav []navItem
	// Secret is the new secret, just made.
	Secret    string
	CreatedAt time.Time
}

func (c *Console) webhookPage(w http.ResponseWriter, r *http.Request) {
	c.render(w, r, http.StatusOK, "settings_webhook", webhookData{Nav: c.settingsNav(r, "webhook")})
}

// rotateWebhook makes a new webhook secret as POST
// /company/v1/conversations/webhook-secret does and shows it once; the one
// it replaces keeps signing next to it for a day.
func (c *Console) rotateWebhook(w http.ResponseWriter, r *http.Request) {
	secret, at, err := c.opts.Webhooks.RotateSecret(r.Context(), memberFrom(r.Context()).CompanyID)
	if err != nil {
		c.fail(w, r, err)
		return
	}
	c.render(w, r, http.StatusOK, "settings_webhook", webhookData{Nav: c.settingsNav(r, "webhook"), Secret: secret,
		CreatedAt: at.UTC()})
}

type apiKeysData struct {
	Nav  []navItem
	Keys []tenant.APIKey
	// Created is the key just made, with Secret shown this once.
	Created *tenant.APIKey
	Secret  string
	// Name is the name entered, NameError what is wrong with it.
	Name, NameError string
}

func (c *Console) apiKeysPage(w http.ResponseWriter, r *http.Request) {
	c.showAPIKeys(w, r, http.StatusOK, apiKeysData{})
}

func (c *Console) showAPIKeys(w http.ResponseWriter, r *http.Request, status int, d apiKeysData) {
	keys, err := c.opts.Tenants.ListAPIKeys(r.Context(), memberFrom(r.Context()).CompanyID)
	if err != nil {
		c.fail(w, r, err)
		return
	}
	d.Nav, d.Keys = c.settingsNav(r, "api-keys"), keys
	c.render(w, r, status, "settings_apikeys", d)
}

// createAPIKey makes a Company API key named as the form says, with the
// admin API's rule for names, and shows its secret once.
func (c *Console) createAPIKey(w http.ResponseWriter, r *http.Request) {
	name := r.PostForm.Get("name")
	if err := tenant.CheckKeyName(name); err != nil {
		c.showAPIKeys(w, r, http.StatusBadRequest, apiKeysData{Name: name, NameError: httpx.AsError(err).Fields[0].Message})
		return
	}
	k, secret, err := c.opts.Tenants.CreateAPIKey(r.Context(), memberFrom(r.Context()).CompanyID, name)
	if err != nil {
		c.fail(w, r, err)
		return
	}
	c.showAPIKeys(w, r, http.StatusOK, apiKeysData{Created: &k, Secret: secret})
}

// revokeAPIKey revokes one of the Company's keys; another Company's is
// not found.
func (c *Console) revokeAPIKey(w http.ResponseWriter, r *http.Request) {
	m := memberFrom(r.Context())
	id, err := strconv.ParseInt(chi.URLParam(r, "id"), 10, 64)
	if err == nil {
		err = c.opts.Tenants.RevokeAPIKey(r.Context(), m.CompanyID, id)
	}
	switch {
	case err == nil:
		http.Redirect(w, r, c.base(m.CompanySlug)+"/settings/api-keys", http.StatusSeeOther)
	case errors.Is(err, tenant.ErrNotFound) || errors.Is(err, strconv.ErrSyntax) || errors.Is(err, strconv.ErrRange):
		c.renderError(w, r, http.StatusNotFound, "There is no such key.")
	default:
		c.fail(w, r, err)
	}
}
