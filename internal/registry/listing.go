package registry

import (
	"context"

	"github.com/poppyhost/poppyhost/internal/tenant"
)

// Listings puts the registry in poppy.json (discovery.APIs): each
// registered API as an openapi entry whose url is its description as the
// gateway serves it, and the hosted MCP server once a tool is registered.
type Listings struct {
	Store *Store
	URLs  tenant.URLs
}

// Listed returns the Company's registered APIs and MCP server.
func (l Listings) Listed(ctx context.Context, c *tenant.Company) ([]tenant.API, error) {
	apis, err := l.Store.ListAPINames(ctx, c.ID)
	if err != nil {
		return nil, err
	}
	var out []tenant.API
	for _, a := range apis {
		out = append(out, tenant.API{Type: "openapi", URL: DescriptionURL(l.URLs, c, a.Name), Description: a.Description})
	}
	tools, err := l.Store.HasTools(ctx, c.ID)
	if err != nil {
		return nil, err
	}
	if tools {
		out = append(out, tenant.API{Type: "mcp", URL: l.URLs.MCPResource(c), Description: c.Settings.MCP.Description})
	}
	return out, nil
}

// URL is an API's URL at the API proxy, the servers entry of its
// description.
func URL(urls tenant.URLs, c *tenant.Company, name string) string {
	return urls.Base(c) + "/api/" + name
}

// DescriptionURL is where the API proxy serves an API's description, its
// url in poppy.json.
func DescriptionURL(urls tenant.URLs, c *tenant.Company, name string) string {
	return urls.Base(c) + "/openapi/" + name + ".json"
}
