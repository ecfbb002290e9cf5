package registry

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/poppyhost/poppyhost/internal/audit"
	"github.com/poppyhost/poppyhost/internal/httpx"
	"github.com/poppyhost/poppyhost/internal/safehttp"
	"github.com/poppyhost/poppyhost/internal/tenant"
)

// Limits of registrations.
const (
	// MaxAPIs and MaxTools bound what one Company registers. The check
	// counts before it inserts, so concurrent registrations can overshoot
	// by the few that race.
	MaxAPIs  = 50
	MaxTools = 200
	// MaxToolScopes bounds the scopes one tool needs.
	MaxToolScopes = 50

	maxRegName        = 64
	maxRegURL         = 2048
	maxRegDescription = 1000
	maxRegTitle       = 200
	// An API's body carries its description, perhaps as an escaped YAML
	// string, and a few small fields.
	maxAPIBody  = MaxOpenAPIBytes + 64<<10
	maxToolBody = 256 << 10
)

var (
	// An API's name is a path segment of {issuer}/api/{name}/ and of
	// {issuer}/openapi/{name}.json, so it has no dot.
	apiNameRe = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)
	// A tool's name follows MCP's tool-name rules, within our length.
	toolNameRe = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,64}$`)
)

// The members of registration bodies; any other is refused.
var (
	apiMembers = []string{"origin", "description", "openapi", "openapi_url", "timeout_seconds",
		"max_request_bytes", "max_response_bytes"}
	toolMembers = []string{"title", "description", "input_schema", "output_schema", "annotations", "scopes",
		"url", "timeout_seconds"}
)

// openAPITypes are the media types an openapi_url may answer with: JSON,
// YAML under its several names, OpenAPI's own types, and text/plain, which
// is how many hosts serve raw files.
var openAPITypes = []string{
	"application/json", "application/vnd.oai.openapi+json", "application/yaml", "application/x-yaml",
	"text/yaml", "application/vnd.oai.openapi", "text/plain",
}

// Options configure a Handler.
type Options struct {
	Store *Store
	// Fetch fetches descriptions registered by openapi_url.
	Fetch *safehttp.Client
	// AllowPrivate accepts origins on loopback and private addresses
	// (POPPYHOST_ALLOW_PRIVATE_FETCH).
	AllowPrivate bool
	// Now is the clock [time.Now].
	Now func() time.Time
}

// Handler is the Company API and admin API for registering APIs and tools.
type Handler struct {
	opts Options
}

// NewHandler returns a Handler.
func NewHandler(opts Options) *Handler {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &Handler{opts: opts}
}

// CompanyAPI serves /apis and /tools under /company/v1.
func (reg *Handler) CompanyAPI(r chi.Router) { reg.routes(r) }

// Admin serves /apis and /tools under /admin/v1/companies/{slug}.
func (reg *Handler) Admin(r chi.Router) { reg.routes(r) }

// routes are the same on both APIs; r has the Company in its context.
func (reg *Handler) routes(r chi.Router) {
	r.Get("/apis", reg.listAPIs)
	r.Get("/apis/{name}", reg.getAPI)
	r.Put("/apis/{name}", reg.putAPI)
	r.Delete("/apis/{name}", reg.deleteAPI)
	r.Get("/tools", reg.listTools)
	r.Get("/tools/{name}", reg.getTool)
	r.Put("/tools/{name}", reg.putTool)
	r.Delete("/tools/{name}", reg.deleteTool)
}

// apiListItem is an API in a list, without its description document,
// which can be megabytes: the outer OpenAPI field hides API.OpenAPI and
// stays empty.
type apiListItem struct {
	*API
	OpenAPI json.RawMessage `json:"openapi,omitempty"`
}

func (reg *Handler) listAPIs(w http.ResponseWriter, r *http.Request) {
	apis, err := reg.opts.Store.ListAPIs(r.Context(), tenant.FromContext(r.Context()).ID)
	if err != nil {
		httpx.WriteError(w, r, err)
		return
	}
	items := make([]apiListItem, 0, len(apis))
	for _, a := range apis {
		items = append(items, apiListItem{API: a})
	}
	httpx.WriteJSON(w, http.StatusOK, map[string]any{"apis": items})
}

func (reg *Handler) getAPI(w http.ResponseWriter, r *http.Request) {
	a, err := reg.opts.Store.GetAPI(r.Context(), tenant.FromContext(r.Context()).ID, chi.URLParam(r, "name"))
	if err != nil {
		writeRegError(w, r, err, "API")
		return
	}
	httpx.WriteJSONTagged(w, http.StatusOK, a)
}

func (reg *Handler) putAPI(w http.ResponseWriter, r *http.Request) {
	var body map[string]json.RawMessage
	if err := httpx.DecodeJSON(w, r, &body, httpx.DecodeOptions{MaxBytes: maxAPIBody}); err != nil {
		httpx.WriteError(w, r, err)
		return
	}
	noteMembers(r.Context(), body)
	a, created, err := reg.registerAPI(r.Context(), tenant.FromContext(r.Context()), chi.URLParam(r, "name"), body,
		httpx.IfMatch(r))
	if err != nil {
		httpx.WriteError(w, r, err)
		return
	}
	httpx.WriteJSONTagged(w, putStatus(created), a)
}

func (reg *Handler) deleteAPI(w http.ResponseWriter, r *http.Request) {
	err := reg.opts.Store.DeleteAPI(r.Context(), tenant.FromContext(r.Context()).ID, chi.URLParam(r, "name"))
	if err != nil {
		writeRegError(w, r, err, "API")
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (reg *Handler) listTools(w http.ResponseWriter, r *http.Request) {
	tools, err := reg.opts.Store.ListTools(r.Context(), tenant.FromContext(r.Context()).ID)
	if err != nil {
		httpx.WriteError(w, r, err)
		return
	}
	if tools == nil {
		tools = []*Tool{}
	}
	httpx.WriteJSON(w, http.StatusOK, map[string]any{"tools": tools})
}

func (reg *Handler) getTool(w http.ResponseWriter, r *http.Request) {
	t, err := reg.opts.Store.GetTool(r.Context(), tenant.FromContext(r.Context()).ID, chi.URLParam(r, "name"))
	if err != nil {
		writeRegError(w, r, err, "tool")
		return
	}
	httpx.WriteJSONTagged(w, http.StatusOK, t)
}

func (reg *Handler) putTool(w http.ResponseWriter, r *http.Request) {
	var body map[string]json.RawMessage
	if err := httpx.DecodeJSON(w, r, &body, httpx.DecodeOptions{MaxBytes: maxToolBody}); err != nil {
		httpx.WriteError(w, r, err)
		return
	}
	noteMembers(r.Context(), body)
	t, created, err := reg.registerTool(r.Context(), tenant.FromContext(r.Context()), chi.URLParam(r, "name"), body,
		httpx.IfMatch(r))
	if err != nil {
		httpx.WriteError(w, r, err)
		return
	}
	httpx.WriteJSONTagged(w, putStatus(created), t)
}

func (reg *Handler) deleteTool(w http.ResponseWriter, r *http.Request) {
	err := reg.opts.Store.DeleteTool(r.Context(), tenant.FromContext(r.Context()).ID, chi.URLParam(r, "name"))
	if err != nil {
		writeRegError(w, r, err, "tool")
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// noteMembers names a PUT body's members in the request's audit entry.
func noteMembers(ctx context.Context, body map[string]json.RawMessage) {
	names := make([]string, 0, len(body))
	for k := range body {
		names = append(names, k)
	}
	slices.Sort(names)
	audit.Note(ctx, names...)
}

// matches returns the check of cond against a registration as stored (nil
// when there is none), by the ETag GET answers it with.
func matches[T any](cond httpx.Precondition) func(cur *T) error {
	return func(cur *T) error {
		tag := ""
		if cur != nil {
			var err error
			if tag, err = httpx.ETag(cur); err != nil {
				return err
			}
		}
		return cond.Check(tag)
	}
}

func putStatus(created bool) int {
	if created {
		return http.StatusCreated
	}
	return http.StatusOK
}

// writeRegError answers ErrNotFound as not_found, naming what is missing.
func writeRegError(w http.ResponseWriter, r *http.Request, err error, what string) {
	if errors.Is(err, ErrNotFound) {
		err = httpx.Errorf(httpx.CodeNotFound, "this Company has no %s of that name", what)
	}
	httpx.WriteError(w, r, err)
}

// registerAPI validates a PUT /apis/{name} body, fetches the description
// when it is given by URL, and stores the API. Nothing is stored unless
// every field is valid, and cond, If-Match, is checked against the API as
// stored where it is written.
func (reg *Handler) registerAPI(ctx context.Context, co *tenant.Company, name string, body map[string]json.RawMessage,
	cond httpx.Precondition) (*API, bool, error) {
	f := regFields{body: body}
	if !apiNameRe.MatchString(name) {
		f.Add("name", "must be 1 to %d letters, digits, hyphens or underscores", maxRegName)
	}
	a := &API{Name: name}
	a.Origin = f.str("origin")
	f.httpsURL("origin", a.Origin, reg.opts.AllowPrivate, false)
	a.Description = f.str("description")
	f.Text("description", a.Description, false, maxRegDescription, true)
	doc, docGiven := f.openAPI("openapi")
	a.OpenAPIURL = f.str("openapi_url")
	switch {
	case docGiven && a.OpenAPIURL != "":
		f.Add("openapi", "give either openapi or openapi_url, not both")
	case docGiven:
	case a.OpenAPIURL != "":
		f.httpsURL("openapi_url", a.OpenAPIURL, reg.opts.AllowPrivate, true)
	case !f.Failed("openapi_url"):
		f.Add("openapi", "is required: the OpenAPI description as an object or a JSON or YAML string, or its URL in openapi_url")
	}
	a.TimeoutSeconds = int(f.integer("timeout_seconds", DefaultTimeoutSeconds, 1, MaxTimeoutSeconds))
	a.MaxRequestBytes = f.integer("max_request_bytes", DefaultMaxRequestBytes, 1, MaxRequestBytesLimit)
	a.MaxResponseBytes = f.integer("max_response_bytes", DefaultMaxResponseBytes, 1, MaxResponseBytesLimit)
	f.unknown(apiMembers)
	if err := f.Err(); err != nil {
		return nil, false, err
	}

	if err := reg.checkRoom(ctx, "gateway_apis", co.ID, name, MaxAPIs, "APIs"); err != nil {
		return nil, false, err
	}
	docField := "openapi"
	if a.OpenAPIURL != "" {
		docField = "openapi_url"
		resp, err := reg.opts.Fetch.Get(ctx, safehttp.Request{
			URL: a.OpenAPIURL, Accept: openAPITypes, MaxBytes: MaxOpenAPIBytes, FollowRedirects: true,
		})
		if err != nil {
			// The Company's own URL: what went wrong helps it, and safehttp
			// leaves out the query.
			return nil, false, invalidField(docField, "could not be fetched: "+strings.ReplaceAll(err.Error(), "safehttp: ", ""))
		}
		doc = resp.Body
	}
	spec, err := Compile(ctx, doc)
	if err != nil {
		return nil, false, invalidField(docField, "is not an OpenAPI description the gateway can serve: "+
			strings.TrimPrefix(err.Error(), ErrInvalidOpenAPI.Error()+": "))
	}
	if msg := accessProblem(spec, co); msg != "" {
		return nil, false, invalidField(docField, msg)
	}
	normalized, err := spec.DocumentJSON()
	if err != nil {
		return nil, false, fmt.Errorf("gateway: normalize description of %s: %w", name, err)
	}
	// normalized is the JSON Compile compiled, which the gateway compiles
	// again on every load.
	a.OpenAPI = normalized

	created, err := reg.opts.Store.PutAPIIf(ctx, co.ID, a, reg.opts.Now(), matches[API](cond))
	if err != nil {
		return nil, false, err
	}
	// Answer with the API as stored, as GET shows it (jsonb orders the
	// document's members its own way).
	if stored, err := reg.opts.Store.GetAPI(ctx, co.ID, name); err == nil {
		a = stored
	} else if !errors.Is(err, ErrNotFound) {
		return nil, false, err
	}
	return a, created, nil
}

// registerTool validates a PUT /tools/{name} body and stores the tool.
// Nothing is stored unless every field is valid, and cond as for
// registerAPI.
func (reg *Handler) registerTool(ctx context.Context, co *tenant.Company, name string, body map[string]json.RawMessage,
	cond httpx.Precondition) (*Tool, bool, error) {
	f := regFields{body: body}
	if !toolNameRe.MatchString(name) {
		f.Add("name", "must be 1 to %d letters, digits, hyphens, underscores or dots (MCP tool names)", maxRegName)
	}
	t := &Tool{Name: name}
	t.Title = f.str("title")
	f.Text("title", t.Title, false, maxRegTitle, false)
	t.Description = f.str("description")
	f.Text("description", t.Description, true, maxRegDescription, true)
	t.InputSchema = f.schema("input_schema", true)
	t.OutputSchema = f.schema("output_schema", false)
	t.Annotations = f.annotations("annotations")
	t.Scopes = f.scopes("scopes", co)
	t.URL = f.str("url")
	f.httpsURL("url", t.URL, reg.opts.AllowPrivate, true)
	t.TimeoutSeconds = int(f.integer("timeout_seconds", DefaultTimeoutSeconds, 1, MaxTimeoutSeconds))
	f.unknown(toolMembers)
	if f.Len() == 0 {
		// The hosted MCP server adds tools with the MCP SDK, which refuses
		// some schemas (x-mcp-header on a property that is not a string,
		// integer or boolean): refuse them here rather than at each call.
		if msg := sdkRefuses(t); msg != "" {
			f.Add("input_schema", "is refused by the MCP server: %s", strings.TrimPrefix(msg, fmt.Sprintf("AddTool %q: ", t.Name)))
		}
	}
	if err := f.Err(); err != nil {
		return nil, false, err
	}

	if err := reg.checkRoom(ctx, "gateway_tools", co.ID, name, MaxTools, "tools"); err != nil {
		return nil, false, err
	}
	created, err := reg.opts.Store.PutToolIf(ctx, co.ID, t, reg.opts.Now(), matches[Tool](cond))
	if err != nil {
		return nil, false, err
	}
	// Answer with the tool as stored, as GET shows it (jsonb orders the
	// schemas' members its own way).
	if stored, err := reg.opts.Store.GetTool(ctx, co.ID, name); err == nil {
		t = stored
	} else if !errors.Is(err, ErrNotFound) {
		return nil, false, err
	}
	return t, created, nil
}

// checkRoom refuses a new registration once the Company has max of them;
// replacing one is always allowed.
func (reg *Handler) checkRoom(ctx context.Context, table string, companyID int64, name string, max int, what string) error {
	n, exists, err := reg.opts.Store.registrations(ctx, table, companyID, name)
	if err != nil {
		return err
	}
	if !exists && n >= max {
		return httpx.Errorf(httpx.CodeInvalidRequest,
			"a Company can register at most %d %s; delete one before adding another", max, what)
	}
	return nil
}

// accessProblem says why the Company cannot serve spec's operations as
// described, or returns "". Without an issuer there is no sign-in, so
// every operation must allow signed-out calls; with one, every scope an
// operation names must be one of the Company's, as a tool's must, since
// the issuer grants no other.
func accessProblem(spec *Spec, co *tenant.Company) string {
	var signedIn, undefined []string
	spec.EachOperation(func(method, template string, acc *Access) {
		if !acc.SignedOut {
			signedIn = append(signedIn, method+" "+template)
		}
		for _, alt := range acc.Alternatives {
			for _, s := range alt {
				if _, ok := co.Settings.Auth.Scopes[s]; !ok && !slices.Contains(undefined, s) {
					undefined = append(undefined, s)
				}
			}
		}
	})
	switch {
	case !co.Settings.Auth.Issuer:
		if len(signedIn) == 0 {
			return ""
		}
		verb := "needs"
		if len(signedIn) > 1 {
			verb = "need"
		}
		return fmt.Sprintf("this Company has no issuer, so only operations that allow signed-out calls can be served, "+
			"and %s %s a sign-in (an operation allows signed-out calls when its security requirements are "+
			"absent or include the empty one, {})", listSome(signedIn, false), verb)
	case len(undefined) == 1:
		return fmt.Sprintf("needs the scope %q, which is not one of the Company's scopes: define it in auth.scopes first",
			undefined[0])
	case len(undefined) > 1:
		slices.Sort(undefined)
		return fmt.Sprintf("needs the scopes %s, which are not among the Company's scopes: define them in auth.scopes first",
			listSome(undefined, true))
	}
	return ""
}

// listSome lists the first few of items, quoted if quote, as "a, b and
// 3 more".
func listSome(items []string, quote bool) string {
	const most = 5
	shown := make([]string, 0, most)
	for _, it := range items[:min(len(items), most)] {
		if quote {
			it = strconv.Quote(it)
		}
		shown = append(shown, it)
	}
	if rest := len(items) - len(shown); rest > 0 {
		return strings.Join(shown, ", ") + fmt.Sprintf(" and %d more", rest)
	}
	if len(shown) == 1 {
		return shown[0]
	}
	return strings.Join(shown[:len(shown)-1], ", ") + " and " + shown[len(shown)-1]
}

// sdkRefuses adds t to a throwaway MCP server as the hosted server will
// and returns why the SDK refuses it, or "".
func sdkRefuses(t *Tool) (msg string) {
	server := mcp.NewServer(&mcp.Implementation{Name: "poppyhost-registration-check"}, nil)
	tool := &mcp.Tool{Name: t.Name, Title: t.Title, Description: t.Description, InputSchema: t.InputSchema}
	if len(t.OutputSchema) > 0 {
		tool.OutputSchema = t.OutputSchema
	}
	defer func() {
		if p := recover(); p != nil {
			msg = fmt.Sprint(p)
		}
	}()
	server.AddTool(tool, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return nil, errors.New("not callable")
	})
	return ""
}

func invalidField(field, msg string) error {
	return httpx.Invalid(httpx.FieldError{Field: field, Message: msg})
}

// regFields reads the members of a registration body, collecting a field
// error for each bad one. Absent members and null read as zero values;
// unknown refuses the members it is not told of.
type regFields struct {
	httpx.Fields
	body map[string]json.RawMessage
}

// unknown adds an error for each member of the body not in known, as the
// admin API refuses members it does not know, by name.
func (f *regFields) unknown(known []string) {
	var names []string
	for name := range f.body {
		if !slices.Contains(known, name) {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	for _, name := range names {
		f.Add(name, "is not a known member")
	}
}

// raw returns the member name, nil when absent or null.
func (f *regFields) raw(name string) json.RawMessage {
	v := bytes.TrimSpace(f.body[name])
	if len(v) == 0 || string(v) == "null" {
		return nil
	}
	return v
}

func (f *regFields) str(name string) string {
	v := f.raw(name)
	if v == nil {
		return ""
	}
	var s string
	if v[0] != '"' || httpx.Unmarshal(v, &s, httpx.DecodeOptions{}) != nil {
		f.Add(name, "must be a string")
	}
	return s
}

// integer reads a whole number from lo to hi, def when absent.
func (f *regFields) integer(name string, def, lo, hi int64) int64 {
	v := f.raw(name)
	if v == nil {
		return def
	}
	var n int64
	if err := httpx.Unmarshal(v, &n, httpx.DecodeOptions{}); err != nil || n < lo || n > hi {
		f.Add(name, "must be a whole number from %d to %d", lo, hi)
		return def
	}
	return n
}

// httpsURL checks that raw is an absolute https URL with a host, no user
// info and no fragment, and a query only when query is allowed. Unless
// private, the host may not be one the gateway would refuse to connect to
// (safehttp.CheckHost), so a Company hears so when it registers, not at
// each call. A name that needs DNS is checked only when called.
func (f *regFields) httpsURL(field, raw string, private, query bool) {
	if f.Failed(field) {
		return
	}
	if raw == "" {
		f.Add(field, "is required")
		return
	}
	if len(raw) > maxRegURL {
		f.Add(field, "must be at most %d characters", maxRegURL)
		return
	}
	u, err := url.Parse(raw)
	switch {
	case err != nil:
		f.Add(field, "is not a URL")
	case u.Scheme != "https":
		f.Add(field, "must be an https URL (spec 3)")
	case u.Opaque != "" || u.Host == "" || u.Hostname() == "":
		f.Add(field, "must be an absolute https URL with a host")
	case u.User != nil:
		f.Add(field, "must not carry user info")
	case u.Fragment != "" || strings.Contains(raw, "#"):
		f.Add(field, "must not have a fragment")
	case !query && (u.RawQuery != "" || u.ForceQuery):
		f.Add(field, "must not have a query: each call's own query is appended")
	case oddIPv4(u.Hostname()):
		f.Add(field, "must name a DNS host or an IP address in standard form")
	case safehttp.CheckHost(u.Hostname(), private) != nil:
		f.Add(field, "must not name %s: the platform would refuse to connect to it", safehttp.HostRule)
	}
}

// oddIPv4 reports whether host ends in a number without being a standard
// IP address, like 127.1 or 0x7f.1, which URL parsers and resolvers may
// read as an IPv4 address our checks would not recognize.
func oddIPv4(host string) bool {
	if _, err := netip.ParseAddr(host); err == nil {
		return false
	}
	labels := strings.Split(strings.TrimSuffix(host, "."), ".")
	last := strings.ToLower(labels[len(labels)-1])
	if h, ok := strings.CutPrefix(last, "0x"); ok {
		return strings.Trim(h, "0123456789abcdef") == ""
	}
	return last != "" && strings.Trim(last, "0123456789") == ""
}

// openAPI reads an uploaded description: an object, or a string holding
// JSON or YAML. given is false when the member is absent or null.
func (f *regFields) openAPI(name string) (doc []byte, given bool) {
	v := f.raw(name)
	if v == nil {
		return nil, false
	}
	switch v[0] {
	case '{':
		return v, true
	case '"':
		var s string
		if err := httpx.Unmarshal(v, &s, httpx.DecodeOptions{}); err == nil && strings.TrimSpace(s) != "" {
			return []byte(s), true
		}
	}
	f.Add(name, "must be an OpenAPI description: a JSON object, or a string holding JSON or YAML")
	return nil, true
}

// schema reads a tool's JSON Schema: an object with "type": "object" at
// the top (MCP requires it), valid against its draft's metaschema (2020-12
// unless $schema names another), with every $ref resolved inside it.
func (f *regFields) schema(name string, required bool) json.RawMessage {
	v := f.raw(name)
	if v == nil {
		if required {
			f.Add(name, "is required: a JSON Schema with \"type\": \"object\"")
		}
		return nil
	}
	var top map[string]json.RawMessage
	if v[0] != '{' || httpx.Unmarshal(v, &top, httpx.DecodeOptions{}) != nil {
		f.Add(name, "must be a JSON Schema object")
		return nil
	}
	if string(bytes.TrimSpace(top["type"])) != `"object"` {
		f.Add(name, `must have "type": "object" at the top (MCP requires it)`)
		return nil
	}
	if msg := schemaProblem(v); msg != "" {
		f.Add(name, "is not a valid JSON Schema: %s", msg)
		return nil
	}
	return v
}

// schemaProblem compiles a JSON Schema and says what is wrong with it, or
// returns "". Nothing is loaded from elsewhere: a $ref outside the schema,
// or a $schema other than a known draft, is an error.
func schemaProblem(raw []byte) string {
	_, err := CompileSchema(raw)
	var (
		sve *jsonschema.SchemaValidationError
		lue *jsonschema.LoadURLError
	)
	switch {
	case err == nil:
		return ""
	case errors.As(err, &sve):
		var ve *jsonschema.ValidationError
		if errors.As(sve.Err, &ve) {
			return firstLeaf(ve).Error()
		}
		return sve.Err.Error()
	case errors.As(err, &lue):
		return fmt.Sprintf("it needs %s, which the platform does not load: $ref must point inside the schema, "+
			"and $schema must name a JSON Schema draft", lue.URL)
	default:
		return strings.ReplaceAll(strings.ReplaceAll(err.Error(), schemaLoc+"#", "#"), schemaLoc, "the schema")
	}
}

// schemaLoc is where a compiled schema says it came from.
const schemaLoc = "urn:poppyhost:schema"

// CompileSchema compiles a JSON Schema as registration checks tools'
// schemas: draft 2020-12 unless $schema names another draft, nothing
// loaded from elsewhere.
func CompileSchema(raw []byte) (*jsonschema.Schema, error) {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return nil, err
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.UseLoader(jsonschema.SchemeURLLoader{})
	if err := c.AddResource(schemaLoc, doc); err != nil {
		return nil, err
	}
	return c.Compile(schemaLoc)
}

// firstLeaf is the first of the most specific causes of a metaschema
// failure, such as "at '/properties/a/type': value must be one of ...".
func firstLeaf(ve *jsonschema.ValidationError) *jsonschema.ValidationError {
	for len(ve.Causes) > 0 {
		ve = ve.Causes[0]
	}
	return ve
}

// annotations reads MCP tool annotations: an object whose known members
// have their MCP types. Unknown members are kept in storage but MCP
// clients see only the known ones.
func (f *regFields) annotations(name string) json.RawMessage {
	v := f.raw(name)
	if v == nil {
		return nil
	}
	var a mcp.ToolAnnotations
	if v[0] != '{' {
		f.Add(name, "must be a JSON object of MCP tool annotations")
		return nil
	}
	if err := httpx.Unmarshal(v, &a, httpx.DecodeOptions{}); err != nil {
		f.Add(name, "must be MCP tool annotations (readOnlyHint and the like, each of its MCP type)")
		return nil
	}
	return v
}

// scopes reads the scopes a tool needs: distinct OAuth scope tokens the
// Company defines in auth.scopes.
func (f *regFields) scopes(name string, co *tenant.Company) []string {
	v := f.raw(name)
	if v == nil {
		return []string{}
	}
	var scopes []string
	if v[0] != '[' || httpx.Unmarshal(v, &scopes, httpx.DecodeOptions{}) != nil {
		f.Add(name, "must be an array of strings")
		return nil
	}
	if len(scopes) > MaxToolScopes {
		f.Add(name, "must list at most %d scopes", MaxToolScopes)
		return nil
	}
	seen := map[string]bool{}
	for i, s := range scopes {
		field := fmt.Sprintf("%s[%d]", name, i)
		_, defined := co.Settings.Auth.Scopes[s]
		switch {
		case !tenant.ValidScope(s):
			f.Add(field, "is not an OAuth scope (RFC 6749 §3.3: printable ASCII without space, quote or backslash)")
		case seen[s]:
			f.Add(field, "%q is listed twice", s)
		case !co.Settings.Auth.Issuer:
			f.Add(field, "%q needs an issuer: a Company without one offers no sign-in, so a tool cannot need a scope", s)
		case !defined:
			f.Add(field, "%q is not one of the Company's scopes: define it in auth.scopes first", s)
		}
		seen[s] = true
	}
	return scopes
}
