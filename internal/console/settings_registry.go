package console

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"

	"github.com/go-chi/chi/v5"

	"github.com/poppyhost/poppyhost/internal/registry"
)

// The APIs and tools a Company registered (internal/registry), shown
// read-only: they are registered through the Company API, whose
// ingestion of an OpenAPI description a form would only repeat.

// Registrations reads a Company's registered APIs and tools
// (*registry.Store).
type Registrations interface {
	ListAPINames(ctx context.Context, companyID int64) ([]registry.Listing, error)
	GetAPI(ctx context.Context, companyID int64, name string) (*registry.API, error)
	ListTools(ctx context.Context, companyID int64) ([]*registry.Tool, error)
	GetTool(ctx context.Context, companyID int64, name string) (*registry.Tool, error)
}

type registrationsData struct {
	Nav   []navItem
	APIs  []registry.Listing
	Tools []*registry.Tool
}

func (c *Console) registrationsPage(w http.ResponseWriter, r *http.Request) {
	id := memberFrom(r.Context()).CompanyID
	apis, err := c.opts.Registrations.ListAPINames(r.Context(), id)
	if err != nil {
		c.fail(w, r, err)
		return
	}
	tools, err := c.opts.Registrations.ListTools(r.Context(), id)
	if err != nil {
		c.fail(w, r, err)
		return
	}
	c.render(w, r, http.StatusOK, "settings_apis", registrationsData{Nav: c.settingsNav(r, "apis"), APIs: apis, Tools: tools})
}

// apiOperationView is one operation of an API's description and what a call
// of it needs.
type apiOperationView struct {
	Method, Path, Access string
}

type apiData struct {
	Nav        []navItem
	API        *registry.API
	Operations []apiOperationView
	// Problem says why the operations cannot be listed.
	Problem string
}

func (c *Console) apiPage(w http.ResponseWriter, r *http.Request) {
	a, err := c.opts.Registrations.GetAPI(r.Context(), memberFrom(r.Context()).CompanyID, chi.URLParam(r, "name"))
	if errors.Is(err, registry.ErrNotFound) {
		c.renderError(w, r, http.StatusNotFound, "There is no such API.")
		return
	}
	if err != nil {
		c.fail(w, r, err)
		return
	}
	d := apiData{Nav: c.settingsNav(r, "apis"), API: a}
	spec, err := registry.Compile(r.Context(), a.OpenAPI)
	if err != nil {
		d.Problem = "The stored description cannot be read: register the API again."
	} else {
		spec.EachOperation(func(method, template string, acc *registry.Access) {
			d.Operations = append(d.Operations, apiOperationView{Method: method, Path: template, Access: accessText(acc)})
		})
	}
	c.render(w, r, http.StatusOK, "settings_api", d)
}

// accessText says what a call of an operation needs.
func accessText(acc *registry.Access) string {
	if acc.SignedOut {
		return "nothing: signed-out calls allowed"
	}
	alts := make([]string, 0, len(acc.Alternatives))
	for _, scopes := range acc.Alternatives {
		if len(scopes) == 0 {
			alts = append(alts, "signing in")
			continue
		}
		alts = append(alts, strings.Join(scopes, " and "))
	}
	return strings.Join(alts, ", or ")
}

type toolData struct {
	Nav  []navItem
	Tool *registry.Tool
	// The tool's JSON members, indented.
	InputSchema, OutputSchema, Annotations string
}

func (c *Console) toolPage(w http.ResponseWriter, r *http.Request) {
	t, err := c.opts.Registrations.GetTool(r.Context(), memberFrom(r.Context()).CompanyID, chi.URLParam(r, "name"))
	if errors.Is(err, registry.ErrNotFound) {
		c.renderError(w, r, http.StatusNotFound, "There is no such tool.")
		return
	}
	if err != nil {
		c.fail(w, r, err)
		return
	}
	c.render(w, r, http.StatusOK, "settings_tool", toolData{Nav: c.settingsNav(r, "apis"), Tool: t,
		InputSchema: indent(t.InputSchema), OutputSchema: indent(t.OutputSchema), Annotations: indent(t.Annotations)})
}

// indent returns raw JSON indented for reading, "" for none.
func indent(raw json.RawMessage) string {
	if len(raw) == 0 || string(raw) == "null" {
		return ""
	}
	var b bytes.Buffer
	if json.Indent(&b, raw, "", "  ") != nil {
		return string(raw)
	}
	return b.String()
}
