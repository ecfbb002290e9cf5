package console

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"

	"github.com/go-chi/chi/v5"

	"github.com/poppyhost/poppyhost/internal/httpx"
	"github.com/poppyhost/poppyhost/internal/tenant"
)

// The Settings pages: the Company's settings as forms (settings_form.go),
// its registered APIs and tools (settings_registry.go), its webhook secret
// and API keys (settings_secrets.go). Owners and admins change settings;
// only owners see and change API keys (docs/console.md, "Roles").

// SettingsEditor changes a Company's settings as the admin API does
// (*tenant.Admin).
type SettingsEditor interface {
	Version(c *tenant.Company) (string, error)
	PatchSettings(ctx context.Context, companyID int64, cond httpx.Precondition, patch []byte) (*tenant.Company, error)
}

// CompanyStore reads a Company as stored and keeps its API keys
// (*tenant.Store).
type CompanyStore interface {
	GetByID(ctx context.Context, id int64) (*tenant.Company, error)
	CreateAPIKey(ctx context.Context, companyID int64, name string) (tenant.APIKey, string, error)
	ListAPIKeys(ctx context.Context, companyID int64) ([]tenant.APIKey, error)
	RevokeAPIKey(ctx context.Context, companyID, keyID int64) error
}

// settingsRoutes are the Settings pages and the audit log. A page whose
// service is nil in Options is not served. Every change is audited in the
// signed-in member's name (Mount, authenticate): the stores record it in
// the change's transaction, audit.Middleware after a change that
// answered 2xx and did not.
func (c *Console) settingsRoutes(r chi.Router) {
	r.Group(func(r chi.Router) {
		r.Use(c.allow(RoleAdmin))
		if c.opts.Settings != nil && c.opts.Tenants != nil {
			r.Get("/settings", c.settingsIndex)
			r.Get("/settings/{section}", c.settingsPage)
			r.Post("/settings/{section}", c.saveSettings)
		}
		if c.opts.Registrations != nil {
			r.Get("/settings/apis", c.registrationsPage)
			r.Get("/settings/apis/{name}", c.apiPage)
			r.Get("/settings/tools/{name}", c.toolPage)
		}
		if c.opts.Webhooks != nil {
			r.Get("/settings/webhook", c.webhookPage)
			r.Post("/settings/webhook", c.rotateWebhook)
		}
	})
	if c.opts.Tenants != nil {
		r.Group(func(r chi.Router) {
			// Owners only.
			r.Use(c.allow())
			r.Get("/settings/api-keys", c.apiKeysPage)
			r.Post("/settings/api-keys", c.createAPIKey)
			r.Post("/settings/api-keys/{id}/revoke", c.revokeAPIKey)
		})
	}
	r.With(c.allow(RoleAdmin, RoleAuditor)).Get("/audit", c.auditPage)
}

// settingsNav is the Settings pages' own navigation, with current marked.
func (c *Console) settingsNav(r *http.Request, current string) []navItem {
	m := memberFrom(r.Context())
	base := c.base(m.CompanySlug) + "/settings/"
	var out []navItem
	for _, s := range sections {
		if s.OwnerOnly && m.Role != RoleOwner {
			continue
		}
		out = append(out, navItem{Label: s.Title, URL: base + s.ID, Current: s.ID == current})
	}
	out = append(out, navItem{Label: "APIs and tools", URL: base + "apis", Current: current == "apis"},
		navItem{Label: "Webhook secret", URL: base + "webhook", Current: current == "webhook"})
	if m.Role == RoleOwner {
		out = append(out, navItem{Label: "API keys", URL: base + "api-keys", Current: current == "api-keys"})
	}
	return out
}

// fieldView is one input of a settings form as the template shows it.
type fieldView struct {
	ID, Name, Label, Help string
	// Kind is text, textarea, number, checkbox, select or choices.
	Kind    string
	Value   string
	Checked bool
	Options []optionView
	Error   string
	Rows    int
}

type optionView struct {
	ID, Value, Label string
	Selected         bool
}

// errorView is a field error in the form's summary; Anchor is the id of
// its input, "" when no input of this form holds the setting.
type errorView struct {
	Field, Message, Anchor string
}

// settingsData is the data of the settings page.
type settingsData struct {
	Nav     []navItem
	Section *section
	Fields  []fieldView
	// Version is the Company's version the form was filled from
	// (tenant.Admin.Version): a save is applied only while it is current.
	Version string
	Saved   bool
	Stale   bool
	Errors  []errorView
}

// inputID is the HTML id of the input of the setting at path.
func inputID(path string) string {
	return "f-" + strings.NewReplacer(".", "-", "_", "-").Replace(path)
}

// fieldViews are sec's inputs showing values, with errs beside their
// inputs; it returns the summary of errs too.
func fieldViews(sec *section, values formValues, errs []httpx.FieldError) ([]fieldView, []errorView) {
	byField := map[string][]string{}
	summary := make([]errorView, 0, len(errs))
	for _, e := range errs {
		f := fieldFor(sec, e.Field)
		ev := errorView{Field: e.Field, Message: e.Message}
		if f != "" {
			msg := e.Message
			if e.Field != f {
				msg = e.Field + ": " + msg
			}
			byField[f] = append(byField[f], msg)
			ev.Anchor = inputID(f)
		}
		summary = append(summary, ev)
	}
	out := make([]fieldView, 0, len(sec.Fields))
	for _, f := range sec.Fields {
		v := fieldView{ID: inputID(f.Path), Name: f.Path, Label: f.Label, Help: f.Help, Value: values.get(f.Path),
			Error: strings.Join(byField[f.Path], "; ")}
		switch f.Kind {
		case kindCheckbox:
			v.Kind, v.Checked = "checkbox", v.Value == "on"
		case kindSelect, kindChoices:
			v.Kind = "select"
			if f.Kind == kindChoices {
				v.Kind = "choices"
			}
			for i, o := range f.Options {
				selected := false
				for _, x := range values[f.Path] {
					selected = selected || x == o.Value
				}
				v.Options = append(v.Options, optionView{ID: v.ID + "-" + string(rune('a'+i)), Value: o.Value,
					Label: o.Label, Selected: selected})
			}
		case kindNumber:
			v.Kind = "number"
		case kindText:
			v.Kind = "text"
		default:
			v.Kind, v.Rows = "textarea", 4
			if f.Kind == kindJSON {
				v.Rows = 8
			}
		}
		out = append(out, v)
	}
	return out, summary
}

// settingsIndex shows the first section.
func (c *Console) settingsIndex(w http.ResponseWriter, r *http.Request) {
	c.showSettings(w, r, &sections[0])
}

func (c *Console) settingsPage(w http.ResponseWriter, r *http.Request) {
	if sec := c.section(w, r); sec != nil {
		c.showSettings(w, r, sec)
	}
}

// section returns the section the URL names, or answers 404 for none
// and 403 for an owners' section a member of another role asked for.
func (c *Console) section(w http.ResponseWriter, r *http.Request) *section {
	sec := sectionByID(chi.URLParam(r, "section"))
	switch {
	case sec == nil:
		c.renderError(w, r, http.StatusNotFound, "There is no such page.")
		return nil
	case sec.OwnerOnly && memberFrom(r.Context()).Role != RoleOwner:
		c.renderError(w, r, http.StatusForbidden, "Your role does not allow this.")
		return nil
	}
	return sec
}

// stored reads the member's Company as stored, not as the request's
// possibly cached copy, with its settings' JSON tree.
func (c *Console) stored(r *http.Request) (*tenant.Company, map[string]any, error) {
	co, err := c.opts.Tenants.GetByID(r.Context(), memberFrom(r.Context()).CompanyID)
	if err != nil {
		return nil, nil, err
	}
	tree, err := settingsTree(co.Settings)
	return co, tree, err
}

// showSettings renders sec's form with the Company's settings as stored.
func (c *Console) showSettings(w http.ResponseWriter, r *http.Request, sec *section) {
	co, tree, err := c.stored(r)
	if err != nil {
		c.fail(w, r, err)
		return
	}
	version, err := c.opts.Settings.Version(co)
	if err != nil {
		c.fail(w, r, err)
		return
	}
	fields, _ := fieldViews(sec, initialValues(sec, tree), nil)
	c.render(w, r, http.StatusOK, "settings", settingsData{Nav: c.settingsNav(r, sec.ID), Section: sec,
		Fields: fields, Version: version, Saved: r.URL.Query().Get("saved") == "1"})
}

// saveSettings applies sec's form through tenant.Admin.PatchSettings: the
// admin API's validation, and its version check against the version the
// form was filled from, so a form filled before someone else's change
// is refused, not applied over it. A refused form is shown again as
// entered, each error beside its input; nothing is changed.
func (c *Console) saveSettings(w http.ResponseWriter, r *http.Request) {
	sec := c.section(w, r)
	if sec == nil {
		return
	}
	m := memberFrom(r.Context())
	// The csrf middleware has read the form, within maxForm bytes.
	values := formValues(r.PostForm)
	version := values.get("version")
	again := func(status int, stale bool, errs []httpx.FieldError) {
		fields, summary := fieldViews(sec, values, errs)
		c.render(w, r, status, "settings", settingsData{Nav: c.settingsNav(r, sec.ID), Section: sec,
			Fields: fields, Version: version, Stale: stale, Errors: summary})
	}
	_, tree, err := c.stored(r)
	if err != nil {
		c.fail(w, r, err)
		return
	}
	patch, errs := buildPatch(sec, tree, values)
	if len(errs) > 0 {
		again(http.StatusBadRequest, false, errs)
		return
	}
	done := c.base(m.CompanySlug) + "/settings/" + sec.ID + "?saved=1"
	if len(patch) == 0 {
		http.Redirect(w, r, done, http.StatusSeeOther)
		return
	}
	raw, err := json.Marshal(patch)
	if err != nil {
		c.fail(w, r, err)
		return
	}
	_, err = c.opts.Settings.PatchSettings(r.Context(), m.CompanyID, httpx.MatchTag(version), raw)
	switch fields := tenant.FieldErrors(err); {
	case err == nil:
		http.Redirect(w, r, done, http.StatusSeeOther)
	case len(fields) > 0:
		again(http.StatusBadRequest, false, fields)
	case httpx.AsError(err).Code == httpx.CodePreconditionFailed:
		again(http.StatusConflict, true, nil)
	case errors.Is(err, tenant.ErrNotFound):
		c.renderError(w, r, http.StatusNotFound, "There is no such page.")
	default:
		c.fail(w, r, err)
	}
}
