package origin

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/poppyhost/poppyhost/internal/operations"
	"github.com/poppyhost/poppyhost/internal/registry"
	"github.com/poppyhost/poppyhost/internal/tenant"
	"github.com/poppyhost/poppyhost/internal/verified"
)

// Limits of a call to a Company's website origin.
const (
	// WebsiteTimeout bounds each wait for the website's origin: for its
	// response headers, then between reads of its body.
	WebsiteTimeout = 60 * time.Second
	// websiteMaxStoredBytes bounds the website's answer to an approved
	// request, which is kept for every retry.
	websiteMaxStoredBytes = 10 << 20
)

// Router is the operations engine's operations.Router: where an approved
// operation's request is performed, an API's origin, a tool's URL or the
// website's origin.
type Router struct {
	Registry *registry.Store
	// Check is the API proxy's rule for a conversation's request
	// (gateway.Gateway.CheckRequest).
	Check func(ctx context.Context, co *tenant.Company, req *operations.Request, facts *verified.Facts) error
}

// Route tells the operations engine where the request of an operation
// proposed at iface for target is performed.
func (rt Router) Route(ctx context.Context, co *tenant.Company, iface, target string,
	req *operations.Request) (*operations.Route, error) {
	switch iface {
	case operations.InterfaceAPI, operations.InterfaceConversation:
		name := target
		if iface == operations.InterfaceConversation {
			name = req.API
		}
		api, err := rt.Registry.GetAPI(ctx, co.ID, name)
		if errors.Is(err, registry.ErrNotFound) {
			return nil, operations.ErrGone
		}
		if err != nil {
			return nil, err
		}
		origin, err := url.Parse(api.Origin)
		if err != nil {
			return nil, err
		}
		return APIRoute(api, Target(origin, req.Path, req.Query)), nil
	case operations.InterfaceMCP:
		t, err := rt.Registry.GetTool(ctx, co.ID, target)
		if errors.Is(err, registry.ErrNotFound) {
			return nil, operations.ErrGone
		}
		if err != nil {
			return nil, err
		}
		u, err := url.Parse(t.URL)
		if err != nil {
			return nil, err
		}
		// As an unapproved call states it in Poppy-Verified (toolPath).
		if u.Path == "" {
			u.Path = "/"
		}
		return &operations.Route{Audience: t.URL, URL: u, Tool: t.Name, Timeout: ToolTimeout(t),
			MaxResponse: MaxToolResponseBytes}, nil
	case operations.InterfaceWeb:
		web := co.Settings.Web
		origin, err := url.Parse(web.Origin)
		if web.Origin == "" || err != nil {
			return nil, operations.ErrGone
		}
		return &operations.Route{Audience: web.Origin, URL: Target(origin, req.Path, req.Query),
			Timeout: WebsiteTimeout, MaxResponse: websiteMaxStoredBytes}, nil
	}
	return nil, fmt.Errorf("origin: operations at %q are not performed here", iface)
}

// APIRoute is where a request of api for target (Target) is performed.
func APIRoute(api *registry.API, target *url.URL) *operations.Route {
	return &operations.Route{Audience: api.Origin, URL: target, API: api.Name,
		Timeout: time.Duration(api.TimeoutSeconds) * time.Second, MaxResponse: api.MaxResponseBytes}
}

// Allowed reports whether req, a conversation's request, is one the API
// proxy would forward for facts (Check).
func (rt Router) Allowed(ctx context.Context, co *tenant.Company, req *operations.Request, facts *verified.Facts) error {
	return rt.Check(ctx, co, req, facts)
}

// Target is the URL a request for escapedPath (with rawQuery) goes to at
// origin: the origin's path followed by the request's, as escaped.
func Target(origin *url.URL, escapedPath, rawQuery string) *url.URL {
	target := *origin
	target.RawPath = strings.TrimSuffix(origin.EscapedPath(), "/") + escapedPath
	target.Path, _ = url.PathUnescape(target.RawPath)
	target.RawQuery = rawQuery
	return &target
}
