package gateway

import (
	"context"
	"errors"
	"strings"

	"github.com/poppyhost/poppyhost/internal/httpx"
	"github.com/poppyhost/poppyhost/internal/operations"
	"github.com/poppyhost/poppyhost/internal/registry"
	"github.com/poppyhost/poppyhost/internal/safehttp"
	"github.com/poppyhost/poppyhost/internal/tenant"
	"github.com/poppyhost/poppyhost/internal/verified"
)

// ErrNotAllowed: a conversation's request is not one the gateway would
// forward: its API does not declare it, or the Personal Agent's access
// does not allow it.
var ErrNotAllowed = errors.New("gateway: the request is not allowed")

// CheckRequest reports whether req, the request a Company Agent's proposal
// names in a conversation (DESIGN.md, "Company Agent"), is one the gateway
// would forward: a registered API's (req.API), with a path and method its
// OpenAPI description declares, and, when facts are given, access those
// facts allow (sign-in and scopes). A proposal can then reach nothing on
// the origin that the Personal Agent could not reach through the API
// itself. The error is an *httpx.Error describing what is wrong, wrapping
// ErrNotAllowed.
func (g *Gateway) CheckRequest(ctx context.Context, co *tenant.Company, req *operations.Request, facts *verified.Facts) error {
	c, err := g.load(tenant.WithCompany(ctx, co), req.API)
	if errors.Is(err, registry.ErrNotFound) {
		return notAllowed("perform.api: the Company has no API named %q registered with the gateway", req.API)
	}
	if err != nil {
		return err
	}
	if !safehttp.ValidPath(req.Path) {
		return notAllowed("perform.path: the path must be %s", safehttp.PathRule)
	}
	access, allow := c.spec.Match(req.Method, req.Path)
	if access == nil {
		if len(allow) > 0 {
			return notAllowed("perform: the API %q declares %s for this path, not %s", req.API, strings.Join(allow, ", "), req.Method)
		}
		return notAllowed("perform.path: the API %q does not declare this path", req.API)
	}
	if facts != nil && !access.Allows(facts.Account != "", facts.Scopes) {
		return notAllowed("perform: the Personal Agent's access (sign-in and scopes) does not allow this request")
	}
	return nil
}

func notAllowed(format string, a ...any) error {
	e := httpx.Errorf(httpx.CodeInvalidRequest, format, a...)
	e.Cause = ErrNotAllowed
	return e
}
