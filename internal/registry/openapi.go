package registry

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/poppyhost/poppyhost/internal/tenant"
)

// MaxOpenAPIBytes bounds an OpenAPI description.
const MaxOpenAPIBytes = 2 << 20

// Spec is a compiled OpenAPI description: the operations the gateway
// forwards and the access each needs. kin-openapi parses and validates
// the document; matching is ours, on the path after {issuer}/api/{name},
// because kin-openapi's routers match the servers' URLs, which the gateway
// rewrites.
type Spec struct {
	doc    *openapi3.T
	routes []route
	// json is the description as the gateway stores it.
	json []byte
}

type route struct {
	template string
	pattern  *regexp.Regexp
	params   int
	methods  map[string]*Access
}

// Access is what an operation needs. With SignedOut, a request without an
// access token is served; otherwise it needs a token carrying every scope
// of one of Alternatives (OpenAPI security requirements: any one
// requirement, all scopes within it).
type Access struct {
	SignedOut    bool
	Alternatives [][]string
}

// Allows reports whether a grant with scopes (nil signed out) may call the
// operation.
func (a *Access) Allows(signedIn bool, scopes []string) bool {
	if a.SignedOut {
		return true
	}
	if !signedIn {
		return false
	}
	for _, alt := range a.Alternatives {
		if containsAll(scopes, alt) {
			return true
		}
	}
	return false
}

// Needed is the scopes to ask for: those of the alternative the grant
// comes closest to.
func (a *Access) Needed(scopes []string) []string {
	var best []string
	bestMissing := -1
	for _, alt := range a.Alternatives {
		missing := 0
		for _, s := range alt {
			if !slices.Contains(scopes, s) {
				missing++
			}
		}
		if bestMissing < 0 || missing < bestMissing {
			best, bestMissing = alt, missing
		}
	}
	return best
}

func containsAll(have, want []string) bool {
	for _, s := range want {
		if !slices.Contains(have, s) {
			return false
		}
	}
	return true
}

// ErrInvalidOpenAPI: the document is not a valid OpenAPI 3 description the
// gateway can serve.
var ErrInvalidOpenAPI = errors.New("invalid OpenAPI description")

// Compile parses and validates an OpenAPI 3.0 or 3.1 description (JSON or
// YAML) without following external references. The document is read
// once, within MaxOpenAPIDepth and MaxOpenAPINodes, into plain values;
// kin-openapi reads their JSON.
func Compile(ctx context.Context, raw []byte) (*Spec, error) {
	if len(raw) > MaxOpenAPIBytes {
		return nil, fmt.Errorf("%w: larger than %d bytes", ErrInvalidOpenAPI, MaxOpenAPIBytes)
	}
	var tree docTree
	plain, err := tree.parse(raw)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidOpenAPI, err)
	}
	if _, ok := plain.(map[string]any); !ok {
		return nil, fmt.Errorf("%w: it is not an object", ErrInvalidOpenAPI)
	}
	stored, err := json.Marshal(plain)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidOpenAPI, err)
	}
	loader := openapi3.NewLoader()
	loader.Context = ctx
	doc, err := loader.LoadFromData(stored)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidOpenAPI, err)
	}
	if !strings.HasPrefix(doc.OpenAPI, "3.") {
		return nil, fmt.Errorf("%w: openapi must be 3.0 or 3.1, not %q", ErrInvalidOpenAPI, doc.OpenAPI)
	}
	if err := doc.Validate(ctx, openapi3.DisableExamplesValidation()); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidOpenAPI, err)
	}
	if doc.Paths == nil || doc.Paths.Len() == 0 {
		return nil, fmt.Errorf("%w: it declares no paths, so the gateway would forward nothing", ErrInvalidOpenAPI)
	}
	s := &Spec{doc: doc, json: stored}
	for template, item := range doc.Paths.Map() {
		pattern, params, err := compilePath(template)
		if err != nil {
			return nil, fmt.Errorf("%w: path %q: %v", ErrInvalidOpenAPI, template, err)
		}
		rt := route{template: template, pattern: pattern, params: params, methods: map[string]*Access{}}
		for method, op := range item.Operations() {
			acc, err := s.access(op)
			if err != nil {
				return nil, fmt.Errorf("%w: %s %s: %v", ErrInvalidOpenAPI, method, template, err)
			}
			rt.methods[method] = acc
		}
		s.routes = append(s.routes, rt)
	}
	// Concrete paths match before templated ones (OpenAPI 3 "Paths").
	sort.Slice(s.routes, func(i, j int) bool {
		if s.routes[i].params != s.routes[j].params {
			return s.routes[i].params < s.routes[j].params
		}
		return s.routes[i].template < s.routes[j].template
	})
	return s, nil
}

// compilePath turns a path template into a pattern over escaped paths:
// each {param} matches one non-empty segment.
func compilePath(template string) (*regexp.Regexp, int, error) {
	if !strings.HasPrefix(template, "/") {
		return nil, 0, errors.New("must start with /")
	}
	var b strings.Builder
	b.WriteString("^")
	params := 0
	rest := template
	for rest != "" {
		open := strings.IndexByte(rest, '{')
		if open < 0 {
			b.WriteString(regexp.QuoteMeta(rest))
			break
		}
		end := strings.IndexByte(rest[open:], '}')
		if end < 0 {
			return nil, 0, errors.New("has an unclosed {")
		}
		b.WriteString(regexp.QuoteMeta(rest[:open]))
		b.WriteString("[^/]+")
		params++
		rest = rest[open+end+1:]
	}
	b.WriteString("$")
	re, err := regexp.Compile(b.String())
	return re, params, err
}

// access is an operation's security requirements: its own, or else the
// document's. An empty requirement ({}) or none at all lets signed-out
// requests through. Scopes count for oauth2 and openIdConnect schemes; a
// requirement of another scheme needs an access token with no particular
// scope, since Personal Agents authenticate with the Company's tokens.
func (s *Spec) access(op *openapi3.Operation) (*Access, error) {
	reqs := s.doc.Security
	if op.Security != nil {
		reqs = *op.Security
	}
	acc := &Access{SignedOut: len(reqs) == 0}
	for _, req := range reqs {
		if len(req) == 0 {
			acc.SignedOut = true
			continue
		}
		var scopes []string
		for name, sc := range req {
			if s.doc.Components == nil || s.doc.Components.SecuritySchemes[name] == nil {
				return nil, fmt.Errorf("security requirement names the unknown scheme %q", name)
			}
			scheme := s.doc.Components.SecuritySchemes[name].Value
			if scheme != nil && (scheme.Type == "oauth2" || scheme.Type == "openIdConnect") {
				scopes = append(scopes, sc...)
			}
		}
		slices.Sort(scopes)
		acc.Alternatives = append(acc.Alternatives, slices.Compact(scopes))
	}
	return acc, nil
}

// Match finds the operation for method and an escaped path relative to the
// API's root. It returns the access it needs, or nil and the methods the
// path declares (none when the path is not declared).
func (s *Spec) Match(method, escapedPath string) (*Access, []string) {
	for _, rt := range s.routes {
		if !rt.pattern.MatchString(escapedPath) {
			continue
		}
		if acc, ok := rt.methods[method]; ok {
			return acc, nil
		}
		var allow []string
		for m := range rt.methods {
			allow = append(allow, m)
		}
		sort.Strings(allow)
		return nil, allow
	}
	return nil, nil
}

// Published returns the description as Personal Agents get it: servers
// name the gateway, no path or operation names the origin, and OAuth
// flows name the Company's issuer (spec 4.7: scopes are described in the
// API's OAuth 2.0 security scheme), one flow for each sign-in type in
// grants (tenant.Auth.OfferedGrantTypes), so no endpoint that is off is
// named. raw is a stored description (JSON); it is rewritten as plain
// values, in time linear in its size.
func Published(raw []byte, gatewayURL, issuer string, grants []string) ([]byte, error) {
	var tree docTree
	plain, err := tree.parse(raw)
	if err != nil {
		return nil, err
	}
	doc, ok := plain.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("gateway: a stored description is not an object")
	}
	doc["servers"] = []any{map[string]any{"url": gatewayURL}}
	dropServers := func(items any) {
		m, _ := items.(map[string]any)
		for _, item := range m {
			item, _ := item.(map[string]any)
			if item == nil {
				continue
			}
			delete(item, "servers")
			for _, method := range operationKeys {
				if op, ok := item[method].(map[string]any); ok {
					delete(op, "servers")
				}
			}
		}
	}
	dropServers(doc["paths"])
	components, _ := doc["components"].(map[string]any)
	dropServers(components["pathItems"])
	schemes, _ := components["securitySchemes"].(map[string]any)
	for _, v := range schemes {
		scheme, _ := v.(map[string]any)
		if scheme == nil || scheme["type"] != "oauth2" || issuer == "" {
			continue
		}
		scopes := map[string]any{}
		flows, _ := scheme["flows"].(map[string]any)
		for _, name := range []string{"implicit", "password", "clientCredentials", "authorizationCode"} {
			flow, _ := flows[name].(map[string]any)
			fs, _ := flow["scopes"].(map[string]any)
			for k, v := range fs {
				scopes[k] = v
			}
		}
		scheme["flows"] = issuerFlows(issuer, grants, scopes)
	}
	return json.Marshal(doc)
}

// issuerFlows are the OAuth flows of the issuer for the sign-in types in
// grants. Direct Sign-In is the authorizationCode flow. OpenAPI 3.0 and
// 3.1 have no device flow: it is described under x-deviceAuthorization,
// in the shape OpenAPI 3.2 gives deviceAuthorization, so its scopes stay
// described. With no sign-in offered, no flow is named (the Flows Object's
// members are all optional).
func issuerFlows(issuer string, grants []string, scopes map[string]any) map[string]any {
	flows := map[string]any{}
	for _, g := range grants {
		switch g {
		case tenant.GrantAuthorizationCode:
			flows["authorizationCode"] = map[string]any{
				"authorizationUrl": issuer + "/oauth/authorize", "tokenUrl": issuer + "/oauth/token",
				"refreshUrl": issuer + "/oauth/token", "scopes": scopes,
			}
		case tenant.GrantDeviceCode:
			flows["x-deviceAuthorization"] = map[string]any{
				"deviceAuthorizationUrl": issuer + "/oauth/device_authorization", "tokenUrl": issuer + "/oauth/token",
				"refreshUrl": issuer + "/oauth/token", "scopes": scopes,
			}
		}
	}
	return flows
}

// operationKeys are a path item's members that hold operations.
var operationKeys = []string{"get", "put", "post", "delete", "options", "head", "patch", "trace"}

// DocumentJSON returns a description as JSON, as the gateway stores it.
func (s *Spec) DocumentJSON() ([]byte, error) { return s.json, nil }

// EachOperation calls fn with each operation's method, path template and
// the access it needs, by path in the order Match tries them, then by
// method.
func (s *Spec) EachOperation(fn func(method, template string, acc *Access)) {
	for _, rt := range s.routes {
		methods := make([]string, 0, len(rt.methods))
		for m := range rt.methods {
			methods = append(methods, m)
		}
		sort.Strings(methods)
		for _, m := range methods {
			fn(m, rt.template, rt.methods[m])
		}
	}
}
