package gateway

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"time"

	"github.com/poppyhost/poppyhost/internal/operations"
	"github.com/poppyhost/poppyhost/internal/tenant"
	"github.com/poppyhost/poppyhost/internal/verified"
)

// Route tells the operations engine where the request of an operation
// proposed at iface for target is performed: an API's origin, a tool's
// URL or the website's origin (operations.Router).
func (g *Gateway) Route(ctx context.Context, co *tenant.Company, iface, target string,
	req *operations.Request) (*operations.Route, error) {
	switch iface {
	case operations.InterfaceAPI, operations.InterfaceConversation:
		name := target
		if iface == operations.InterfaceConversation {
			name = req.API
		}
		api, err := g.opts.Store.GetAPI(ctx, co.ID, name)
		if errors.Is(err, ErrNotFound) {
			return nil, operations.ErrGone
		}
		if err != nil {
			return nil, err
		}
		origin, err := url.Parse(api.Origin)
		if err != nil {
			return nil, err
		}
		return &operations.Route{Audience: api.Origin, URL: originTarget(origin, req.Path, req.Query), API: api.Name,
			Timeout: time.Duration(api.TimeoutSeconds) * time.Second, MaxResponse: api.MaxResponseBytes}, nil
	case operations.InterfaceMCP:
		t, err := g.opts.Store.GetTool(ctx, co.ID, target)
		if errors.Is(err, ErrNotFound) {
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
		return &operations.Route{Audience: t.URL, URL: u, Tool: t.Name, Timeout: toolTimeout(t),
			MaxResponse: MaxToolResponseBytes}, nil
	case operations.InterfaceWeb:
		web := co.Settings.Web
		origin, err := url.Parse(web.Origin)
		if web.Origin == "" || err != nil {
			return nil, operations.ErrGone
		}
		return &operations.Route{Audience: web.Origin, URL: originTarget(origin, req.Path, req.Query),
			Timeout: websiteTimeout, MaxResponse: websiteMaxStoredBytes}, nil
	}
	return nil, fmt.Errorf("gateway: operations at %q are not performed here", iface)
}

// websiteMaxStoredBytes bounds the website's answer to an approved
// request, which is kept for every retry.
const websiteMaxStoredBytes = 10 << 20

// Allowed reports whether req, a conversation's request, is one the
// gateway would forward for facts (CheckRequest).
func (g *Gateway) Allowed(ctx context.Context, co *tenant.Company, req *operations.Request, facts *verified.Facts) error {
	return g.CheckRequest(ctx, co, req, facts)
}
