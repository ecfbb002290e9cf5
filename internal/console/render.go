package console

import (
	"bytes"
	"embed"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"path"
	"strings"

	"github.com/go-chi/chi/v5"

	"github.com/poppyhost/poppyhost/internal/tenant"
)

//go:embed templates/*.html
var templateFiles embed.FS

//go:embed assets
var assetFiles embed.FS

// pages are the parsed templates: each page file with the layout.
type pages struct {
	byName map[string]*template.Template
}

// parsePages parses templates/layout.html, with the templates that pages
// share (templates/_*.html), with each other file of templates/, which
// defines "content" and "title" (the page's name in the title bar, before
// the Company's).
func parsePages() (*pages, error) {
	layout, err := template.New("layout.html").ParseFS(templateFiles, "templates/layout.html", "templates/_*.html")
	if err != nil {
		return nil, fmt.Errorf("console: %w", err)
	}
	names, err := fs.Glob(templateFiles, "templates/*.html")
	if err != nil {
		return nil, fmt.Errorf("console: %w", err)
	}
	p := &pages{byName: map[string]*template.Template{}}
	for _, n := range names {
		name := strings.TrimSuffix(path.Base(n), ".html")
		if name == "layout" || strings.HasPrefix(name, "_") {
			continue
		}
		t, err := template.Must(layout.Clone()).ParseFS(templateFiles, n)
		if err != nil {
			return nil, fmt.Errorf("console: %w", err)
		}
		p.byName[name] = t
	}
	return p, nil
}

// layoutData is what the layout sees; pages see it too, their own data
// as .Page.
type layoutData struct {
	// Member is the signed-in member (the zero Member when signed out).
	Member Member
	// Company is the URL's Company (nil on a 404 for an unknown slug).
	Company *tenant.Company
	// CSRF is the token every form posts as field "csrf"
	// ({{template "csrf" $}}).
	CSRF string
	// Nav is the navigation the member's role may see.
	Nav []navItem
	// Base is the console's path for the Company: /console/{slug}.
	Base string
	// Page is the page's own data.
	Page any
}

// render writes the template page inside the layout with status. data is
// the page's (.Page). A template that fails writes a 500 page instead,
// since nothing is sent before the whole page is rendered.
func (c *Console) render(w http.ResponseWriter, r *http.Request, status int, page string, data any) {
	t, ok := c.pages.byName[page]
	if !ok {
		c.fail(w, r, fmt.Errorf("console: no template %q", page))
		return
	}
	m := memberFrom(r.Context())
	d := layoutData{Member: m, Company: tenant.FromContext(r.Context()), CSRF: csrfFrom(r.Context()), Page: data}
	if d.Company != nil {
		d.Base = c.base(d.Company.Slug)
	}
	if m.ID != 0 && !isPending(r.Context()) {
		d.Nav = navFor(m, currentPage(r))
	}
	var buf bytes.Buffer
	if err := t.ExecuteTemplate(&buf, "layout", d); err != nil {
		c.fail(w, r, err)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = buf.WriteTo(w)
}

// currentPage is the first path segment after /console/{slug}/.
func currentPage(r *http.Request) string {
	rest := strings.TrimPrefix(r.URL.Path, "/console/"+chi.URLParam(r, "slug")+"/")
	page, _, _ := strings.Cut(rest, "/")
	return page
}

// errorPage is the data of the error page.
type errorPage struct {
	Status  int
	Message string
}

// renderError writes the error page with status and a message for people.
func (c *Console) renderError(w http.ResponseWriter, r *http.Request, status int, message string) {
	c.render(w, r, status, "error", errorPage{Status: status, Message: message})
}

// fail logs err and answers 500 with a plain page that needs no template.
func (c *Console) fail(w http.ResponseWriter, r *http.Request, err error) {
	c.log.ErrorContext(r.Context(), "console", "path", r.URL.Path, "error", err)
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(http.StatusInternalServerError)
	_, _ = fmt.Fprint(w, "<!doctype html><title>Error</title><p>Something went wrong. Please try again.</p>")
}

// asset serves an embedded file of assets/.
func (c *Console) asset(w http.ResponseWriter, r *http.Request) {
	name := chi.URLParam(r, "name")
	body, err := assetFiles.ReadFile("assets/" + name)
	if err != nil || strings.Contains(name, "/") {
		c.renderError(w, r, http.StatusNotFound, "There is no such file.")
		return
	}
	switch path.Ext(name) {
	case ".css":
		w.Header().Set("Content-Type", "text/css; charset=utf-8")
	case ".js":
		w.Header().Set("Content-Type", "text/javascript; charset=utf-8")
	}
	// Assets hold no customer data.
	w.Header().Set("Cache-Control", "public, max-age=3600")
	_, _ = w.Write(body)
}
