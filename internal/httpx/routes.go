package httpx

import "github.com/go-chi/chi/v5"

// The platform mounts every handler's routes in one of four places, and a
// handler has one method for each place it serves, named after the place.
// Middleware a handler's routes need (a Session check, a feature switch)
// is given to its constructor or added by the platform around the call,
// never passed to these methods.

// PublicRoutes serves under /t/{slug} on the platform host: what a
// Company's Personal Agents call (issuer, APIs, MCP, conversations). The
// Company is in the request context.
type PublicRoutes interface{ Public(r chi.Router) }

// CompanyAPIRoutes serves under /company/v1, behind a Company API key; the
// Company is in the request context.
type CompanyAPIRoutes interface{ CompanyAPI(r chi.Router) }

// AdminRoutes serves under /admin/v1/companies/{slug}, behind an operator
// token; the Company is in the request context.
type AdminRoutes interface{ Admin(r chi.Router) }

// DomainRoutes serves on a Company's own domain (the paths DESIGN.md says
// it points at the platform); the Company is in the request context.
type DomainRoutes interface{ Domain(r chi.Router) }
