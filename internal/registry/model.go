package registry

import (
	"encoding/json"
	"time"
)

// Defaults and bounds of a registration.
const (
	DefaultTimeoutSeconds   = 30
	MaxTimeoutSeconds       = 120
	DefaultMaxRequestBytes  = 1 << 20
	MaxRequestBytesLimit    = 32 << 20
	DefaultMaxResponseBytes = 10 << 20
	MaxResponseBytesLimit   = 64 << 20
)

// API is an API a Company serves through the gateway at
// {issuer}/api/{Name}/, forwarding to Origin.
type API struct {
	Name string `json:"name"`
	// Origin is the base URL calls are forwarded to: a call to
	// {issuer}/api/{name}/orders/1 goes to {Origin}/orders/1. It is also
	// the aud of Poppy-Verified.
	Origin      string `json:"origin"`
	Description string `json:"description"`
	// OpenAPI is the API's OpenAPI 3 description as JSON. Its paths and
	// security requirements decide what the gateway forwards and which
	// scopes each operation needs.
	OpenAPI json.RawMessage `json:"openapi"`
	// OpenAPIURL is where the description was fetched from, when it was
	// not uploaded.
	OpenAPIURL       string    `json:"openapi_url,omitempty"`
	TimeoutSeconds   int       `json:"timeout_seconds"`
	MaxRequestBytes  int64     `json:"max_request_bytes"`
	MaxResponseBytes int64     `json:"max_response_bytes"`
	CreatedAt        time.Time `json:"created_at"`
	UpdatedAt        time.Time `json:"updated_at"`
}

// Tool is a tool of the Company's hosted MCP server, performed by a POST
// of its arguments to URL.
type Tool struct {
	Name        string          `json:"name"`
	Title       string          `json:"title,omitempty"`
	Description string          `json:"description"`
	InputSchema json.RawMessage `json:"input_schema"`
	// OutputSchema, when set, describes the structuredContent the origin
	// returns.
	OutputSchema json.RawMessage `json:"output_schema,omitempty"`
	// Annotations are MCP tool annotations (readOnlyHint and the like),
	// shown to clients as given.
	Annotations json.RawMessage `json:"annotations,omitempty"`
	// Scopes are the scopes a call needs; none means a signed-out call
	// with the Session header will do, where the Company allows them.
	Scopes         []string  `json:"scopes"`
	URL            string    `json:"url"`
	TimeoutSeconds int       `json:"timeout_seconds"`
	CreatedAt      time.Time `json:"created_at"`
	UpdatedAt      time.Time `json:"updated_at"`
}
