package discovery

import (
	"context"
	"net"
	"net/http"
	"net/url"
	"slices"

	"github.com/go-chi/chi/v5"

	"github.com/poppyhost/poppyhost/internal/httpx"
	"github.com/poppyhost/poppyhost/internal/tenant"
)

// Handler serves the discovery documents of the Company in the request
// context.
type Handler struct {
	urls tenant.URLs
	apis APIs
}

// APIs lists the APIs a Company serves through the platform (the
// gateway's registered APIs and hosted MCP server), after those its
// settings list.
type APIs interface {
	Listed(ctx context.Context, c *tenant.Company) ([]tenant.API, error)
}

// NewHandler returns a Handler deriving URLs from urls; apis may be nil.
func NewHandler(urls tenant.URLs, apis APIs) *Handler { return &Handler{urls: urls, apis: apis} }

// Domain mounts the documents served on each Company domain
// (httpx.DomainRoutes).
func (h *Handler) Domain(r chi.Router) {
	r.Get("/.well-known/poppy.json", h.poppyJSON)
	r.Get("/.well-known/oauth-protected-resource", h.protectedResource)
}

// Public mounts the documents under {PUBLIC_URL}/t/{slug}
// (httpx.PublicRoutes).
func (h *Handler) Public(r chi.Router) {
	r.Get("/poppy/excluded-tasks.json", h.excludedTasks)
}

// ServeASMetadata serves {PUBLIC_URL}/.well-known/oauth-authorization-server/t/{slug}.
// MCP clients that are not Personal Agents are offered where the Company
// accepts them and its hosted MCP server exists (OffersMCPClients).
func (h *Handler) ServeASMetadata(w http.ResponseWriter, r *http.Request) {
	c := tenant.FromContext(r.Context())
	m, ok := BuildASMetadata(c, h.urls)
	if !ok {
		httpx.NotFound(w, r)
		return
	}
	if h.apis != nil && OffersMCPClients(c, true) {
		listed, err := h.apis.Listed(r.Context(), c)
		if err != nil {
			httpx.WriteError(w, r, err)
			return
		}
		mcp := h.urls.MCPResource(c)
		if OffersMCPClients(c, slices.ContainsFunc(listed, func(a tenant.API) bool { return a.Type == "mcp" && a.URL == mcp })) {
			m.AddMCPClients(c)
		}
	}
	writeDoc(w, m)
}

func writeDoc(w http.ResponseWriter, v any) {
	w.Header().Set("Cache-Control", httpx.DiscoveryCacheControl)
	httpx.WriteJSON(w, http.StatusOK, v)
}

func (h *Handler) poppyJSON(w http.ResponseWriter, r *http.Request) {
	c := tenant.FromContext(r.Context())
	doc := BuildPoppyJSON(c, httpx.HostOnly(r.Host), h.urls)
	if doc.Web != nil {
		doc.Web.BrowserSessionEndpoint = onPortOf(doc.Web.BrowserSessionEndpoint, r.Host)
	}
	if h.apis != nil {
		listed, err := h.apis.Listed(r.Context(), c)
		if err != nil {
			httpx.WriteError(w, r, err)
			return
		}
		doc.APIs = append(doc.APIs[:len(doc.APIs):len(doc.APIs)], listed...)
	}
	writeDoc(w, doc)
}

func (h *Handler) protectedResource(w http.ResponseWriter, r *http.Request) {
	m, ok := BuildProtectedResource(tenant.FromContext(r.Context()), httpx.HostOnly(r.Host), h.urls)
	if !ok {
		// No issuer: 404 tells Personal Agents so (spec 3.2).
		httpx.NotFound(w, r)
		return
	}
	writeDoc(w, m)
}

func (h *Handler) excludedTasks(w http.ResponseWriter, r *http.Request) {
	c := tenant.FromContext(r.Context())
	if len(c.Settings.ExcludedTasks) == 0 {
		httpx.NotFound(w, r)
		return
	}
	writeDoc(w, ExcludedTasksDoc{Tasks: c.Settings.ExcludedTasks})
}

// onPortOf puts raw, a URL on the Company's domain, on the port of host,
// the Host poppy.json was fetched at, when that is not 443: off 443 (dev
// mode's :8443) the Company's domain is served where the document was, so
// the browser joins there too. organization.domain stays the bare host.
func onPortOf(raw, host string) string {
	_, port, err := net.SplitHostPort(host)
	if err != nil || port == "" || port == "443" {
		return raw
	}
	u, err := url.Parse(raw)
	if err != nil {
		return raw
	}
	u.Host = net.JoinHostPort(u.Hostname(), port)
	return u.String()
}
