package console

import (
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"github.com/poppyhost/poppyhost/internal/httpx"
	"github.com/poppyhost/poppyhost/internal/tenant"
)

// The Settings pages edit a Company's settings as forms. Each input is
// named by its setting's path in the settings' JSON (organization.name,
// auth.token_lifetimes.access_seconds), which is also the path the admin
// API's field errors name (tenant.FieldErrors), so an error is shown next
// to the input it is about. A form's values become a JSON merge patch of
// the settings that changed, applied by tenant.Admin.PatchSettings: the
// API's own code, validation and version check.

// fieldKind is how a setting is entered.
type fieldKind int

const (
	kindText     fieldKind = iota // one line of text
	kindTextArea                  // free text over lines
	kindNumber                    // a whole number
	kindCheckbox                  // a boolean
	kindSelect                    // one of options
	kindChoices                   // a list of some of options (checkboxes)
	kindLines                     // a list of strings, one a line
	kindScopes                    // a map of names to texts, one "name text" a line
	kindJSON                      // any JSON value, for the structured settings
)

// option is one value a select or a checkbox list offers.
type option struct{ Value, Label string }

// field is one setting of a form.
type field struct {
	// Path is the setting's dotted path in the settings' JSON.
	Path  string
	Label string
	Help  string
	Kind  fieldKind
	// Options are a select's or a checkbox list's values; a select's first
	// option also stands for the setting when it is empty.
	Options []option
	// DefaultOn is a checkbox's value when the setting is absent.
	DefaultOn bool
}

// section is one form of the Settings pages.
type section struct {
	ID, Title, Intro string
	Fields           []field
	// OwnerOnly keeps the section from admins: whether staff need a
	// second factor is for owners to decide (docs/console.md, "Roles").
	OwnerOnly bool
}

var grantOptions = []option{
	{tenant.GrantAuthorizationCode, "Direct Sign-In (authorization_code)"},
	{tenant.GrantDeviceCode, "Device Sign-In (device_code)"},
}

// sections are the Settings pages, in the order the navigation lists
// them. Every member of tenant.Settings is on one of them
// (TestSectionsCoverSettings).
var sections = []section{
	{ID: "organization", Title: "Organization", Intro: "Who the Company is (spec 3.1) and the domains it answers on.",
		Fields: []field{
			{Path: "organization.name", Label: "Name", Kind: kindText},
			{Path: "organization.domain", Label: "Domain", Kind: kindText, Help: "Its main domain, such as shop.example."},
			{Path: "organization.logo_uri", Label: "Logo URL", Kind: kindText, Help: "An https URL, or empty."},
			{Path: "domains", Label: "Other domains", Kind: kindLines, Help: "One a line; they need an issuer (spec 3.2)."},
		}},
	{ID: "sign-in", Title: "Sign-in", Intro: "The Company's issuer, the sign-in it offers Personal Agents and its scopes (spec 3.2, 4).",
		Fields: []field{
			{Path: "auth.issuer", Label: "Issuer: Personal Agents can sign in to accounts here", Kind: kindCheckbox},
			{Path: "auth.disabled", Label: "Sign-in turned off (the issuer stays)", Kind: kindCheckbox},
			{Path: "auth.grant_types", Label: "Sign-in types offered", Kind: kindChoices, Options: grantOptions,
				Help: "None checked offers both."},
			{Path: "auth.scopes", Label: "Scopes", Kind: kindScopes,
				Help: "One a line: the scope's name, a space, then what it lets a Personal Agent do."},
			{Path: "auth.scope_hints", Label: "Scope hints (JSON)", Kind: kindJSON,
				Help: `By scope: {"changes": "none|reversible|irreversible", "personal_data": true|false} (spec 4.7).`},
			{Path: "auth.dpop", Label: "DPoP-bound tokens", Kind: kindSelect, Options: []option{
				{tenant.DPoPOff, "off"}, {tenant.DPoPAllowed, "allowed"}, {tenant.DPoPRequired, "required"}}},
			{Path: "auth.dpop_nonce", Label: "DPoP proofs need a server nonce", Kind: kindCheckbox},
			{Path: "auth.token_lifetimes.access_seconds", Label: "Access token lifetime (seconds)", Kind: kindNumber,
				Help: "0 for the default, 15 minutes."},
			{Path: "auth.token_lifetimes.refresh_seconds", Label: "Refresh token lifetime (seconds)", Kind: kindNumber,
				Help: "0 for the default, 30 days."},
			{Path: "auth.other_authorization_servers", Label: "Other authorization servers", Kind: kindLines,
				Help: "https URLs, one a line."},
			{Path: "sessions.idle_timeout_seconds", Label: "Session idle timeout (seconds)", Kind: kindNumber},
		}},
	{ID: "conversations", Title: "Conversations", Intro: "The conversation endpoint, the Company Agent's webhook and handoffs (spec 8).",
		Fields: []field{
			{Path: "conversations.enabled", Label: "Conversations on", Kind: kindCheckbox},
			{Path: "conversations.access", Label: "Who may converse", Kind: kindSelect, Options: []option{
				{"session", "any Session"}, {"signed_in", "signed-in Sessions only"}}},
			{Path: "conversations.agent_webhook", Label: "Company Agent webhook", Kind: kindText,
				Help: "An https URL new messages are posted to, or empty."},
			{Path: "conversations.handoff_timeout_seconds", Label: "Handoff timeout (seconds)", Kind: kindNumber,
				Help: "0 for the default, 300."},
			{Path: "conversations.handoff_unavailable_message", Label: "Message when nobody takes a handoff", Kind: kindTextArea},
			{Path: "conversations.idle_close_seconds", Label: "Close idle conversations after (seconds)", Kind: kindNumber,
				Help: "0 for the default, 7 days."},
			{Path: "conversations.retention_days", Label: "Keep events (days)", Kind: kindNumber, Help: "0 for the default, 90."},
		}},
	{ID: "feedback", Title: "Feedback", Intro: "Reports from Personal Agents and the tasks the Company does not offer (spec 9).",
		Fields: []field{
			{Path: "feedback.enabled", Label: "Feedback endpoint on", Kind: kindCheckbox},
			{Path: "feedback.alternatives", Label: "Alternatives answered to reports (JSON)", Kind: kindJSON,
				Help: `A list of {"task": "...", "alternative": {"instructions": "...", "references": [...]}}.`},
			{Path: "excluded_tasks", Label: "Tasks not offered (JSON)", Kind: kindJSON,
				Help: `A list of {"task": "...", "alternative": {...}} (spec 9.1).`},
		}},
	{ID: "operations", Title: "Operations and MCP", Intro: "The Operations extension and the hosted MCP server (spec 7).",
		Fields: []field{
			{Path: "operations.enabled", Label: "Operations extension on", Kind: kindCheckbox},
			{Path: "operations.web", Label: "Operations on the website", Kind: kindCheckbox},
			{Path: "operations.approval_hook", Label: "Approval hook", Kind: kindText, Help: "An https URL, or empty."},
			{Path: "mcp.description", Label: "MCP server description", Kind: kindTextArea},
			{Path: "mcp.signed_out", Label: "Signed-out calls with a Session", Kind: kindCheckbox},
			{Path: "mcp.bearer_tokens", Label: "MCP server takes Bearer tokens only (no DPoP)", Kind: kindCheckbox},
			{Path: "mcp.other_clients", Label: "Other MCP clients may sign in", Kind: kindCheckbox, DefaultOn: true},
			{Path: "mcp.signed_out_clients", Label: "Clients without a Session may call tools that need no scope", Kind: kindCheckbox},
			{Path: "mcp.dynamic_registration", Label: "Dynamic client registration", Kind: kindCheckbox},
		}},
	{ID: "web", Title: "Website", Intro: "The website the platform serves on the Company's domains (spec 6).",
		Fields: []field{
			{Path: "web.browser_join", Label: "Browsers may join a Session", Kind: kindCheckbox},
			{Path: "web.origin", Label: "Origin", Kind: kindText, Help: "The https URL the website is served from, or empty."},
			{Path: "web.cookie_name", Label: "Session cookie name", Kind: kindText, Help: "Empty for the default."},
			{Path: "web.cookie_domain", Label: "Session cookie domain", Kind: kindText, Help: "Empty for a host-only cookie."},
			{Path: "web.landing_path", Label: "Landing path", Kind: kindText, Help: "Empty for /."},
			{Path: "web.scope_rules", Label: "Scope rules (JSON)", Kind: kindJSON,
				Help: `A list of {"path": "/orders", "methods": ["POST"], "scopes": ["orders"]}.`},
		}},
	{ID: "agents", Title: "Agents policy", Intro: "Which Personal Agents the Company accepts, and their budgets (spec 4.1, 5.6).",
		Fields: []field{
			{Path: "agents.accept", Label: "Accept", Kind: kindSelect, Options: []option{
				{tenant.AcceptAll, "every Personal Agent"}, {tenant.AcceptListed, "only those listed"},
				{tenant.AcceptUnlisted, "all but those listed"}}},
			{Path: "agents.client_ids", Label: "Listed client_ids", Kind: kindLines, Help: "https URLs, one a line."},
			{Path: "agents.require_signature", Label: "Require a Web Bot Auth signature", Kind: kindCheckbox},
			{Path: "agents.sign_in_refused", Label: "Sign-in refused (JSON)", Kind: kindJSON,
				Help: `By client_id: the sign-in types refused, [] for all.`},
			{Path: "rate_limits.per_agent", Label: "Requests a minute per Personal Agent", Kind: kindNumber},
			{Path: "rate_limits.per_session", Label: "Requests a minute per Session", Kind: kindNumber},
			{Path: "rate_limits.per_address", Label: "Requests a minute per address", Kind: kindNumber},
		}},
	{ID: "console", Title: "Console", Intro: "How the Company's staff sign in to this console.", OwnerOnly: true,
		Fields: []field{
			{Path: "console.require_second_factor", Label: "Staff who sign in with a password must also use a passkey or a TOTP code",
				Kind: kindCheckbox},
		}},
	{ID: "discovery", Title: "Discovery", Intro: "What poppy.json lists besides the above (spec 3.3, 7, 9.4).",
		Fields: []field{
			{Path: "apis", Label: "APIs listed (JSON)", Kind: kindJSON,
				Help: `A list of {"type": "...", "url": "https://...", "description": "..."}.`},
			{Path: "extensions", Label: "Extensions (JSON)", Kind: kindJSON, Help: `By name: {"version": "1", ...}.`},
			{Path: "skill_index", Label: "Skill index (JSON)", Kind: kindJSON, Help: "Empty for none."},
		}},
}

// sectionByID returns the section id, or nil.
func sectionByID(id string) *section {
	for i := range sections {
		if sections[i].ID == id {
			return &sections[i]
		}
	}
	return nil
}

// settingsTree is the Company's settings as their JSON, decoded.
func settingsTree(s tenant.Settings) (map[string]any, error) {
	raw, err := json.Marshal(s)
	if err != nil {
		return nil, err
	}
	var tree map[string]any
	return tree, json.Unmarshal(raw, &tree)
}

// lookup returns the value at the dotted path in tree, nil when absent.
func lookup(tree map[string]any, path string) any {
	var v any = tree
	for _, k := range strings.Split(path, ".") {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[k]
	}
	return v
}

// formValues are a form's inputs by name, as a browser posts them.
type formValues map[string][]string

func (v formValues) get(name string) string {
	if len(v[name]) == 0 {
		return ""
	}
	return v[name][0]
}

// initialValues are the inputs of sec's form showing tree's settings.
func initialValues(sec *section, tree map[string]any) formValues {
	out := formValues{}
	for _, f := range sec.Fields {
		v := lookup(tree, f.Path)
		switch f.Kind {
		case kindCheckbox:
			if b, ok := v.(bool); (ok && b) || (v == nil && f.DefaultOn) {
				out[f.Path] = []string{"on"}
			}
		case kindChoices:
			for _, x := range asList(v) {
				out[f.Path] = append(out[f.Path], fmt.Sprint(x))
			}
		case kindLines:
			var lines []string
			for _, x := range asList(v) {
				lines = append(lines, fmt.Sprint(x))
			}
			out[f.Path] = []string{strings.Join(lines, "\n")}
		case kindScopes:
			m, _ := v.(map[string]any)
			var lines []string
			for _, k := range slices.Sorted(maps.Keys(m)) {
				lines = append(lines, k+" "+fmt.Sprint(m[k]))
			}
			out[f.Path] = []string{strings.Join(lines, "\n")}
		case kindJSON:
			s := ""
			if v != nil {
				raw, _ := json.MarshalIndent(v, "", "  ")
				s = string(raw)
			}
			out[f.Path] = []string{s}
		case kindNumber:
			if n, ok := v.(float64); ok {
				out[f.Path] = []string{strconv.FormatFloat(n, 'f', -1, 64)}
			} else {
				out[f.Path] = []string{"0"}
			}
		case kindSelect:
			s, _ := v.(string)
			if s == "" && len(f.Options) > 0 {
				s = f.Options[0].Value
			}
			out[f.Path] = []string{s}
		default:
			s, _ := v.(string)
			out[f.Path] = []string{s}
		}
	}
	return out
}

func asList(v any) []any {
	l, _ := v.([]any)
	return l
}

// textLines splits a textarea's value into its lines: browsers send CRLF,
// which the settings' text rule would refuse as a control character.
func textLines(s string) string { return strings.ReplaceAll(s, "\r\n", "\n") }

// parseField reads f's input from values as the JSON value of its
// setting, or says what is wrong with it before the API sees it (a number
// that is not one, text that is not JSON).
func parseField(f field, values formValues) (any, string) {
	raw := values.get(f.Path)
	switch f.Kind {
	case kindCheckbox:
		return raw == "on", ""
	case kindChoices:
		out := []any{}
		for _, x := range values[f.Path] {
			out = append(out, x)
		}
		return out, ""
	case kindNumber:
		s := strings.TrimSpace(raw)
		if s == "" {
			return 0, ""
		}
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return nil, "must be a whole number"
		}
		return n, ""
	case kindLines:
		out := []any{}
		for _, l := range strings.Split(textLines(raw), "\n") {
			if l = strings.TrimSpace(l); l != "" {
				out = append(out, l)
			}
		}
		return out, ""
	case kindScopes:
		out := map[string]any{}
		for _, l := range strings.Split(textLines(raw), "\n") {
			if l = strings.TrimSpace(l); l == "" {
				continue
			}
			name, text, _ := strings.Cut(l, " ")
			if _, dup := out[name]; dup {
				return nil, fmt.Sprintf("lists %q twice", name)
			}
			out[name] = strings.TrimSpace(text)
		}
		return out, ""
	case kindJSON:
		s := strings.TrimSpace(textLines(raw))
		if s == "" {
			return nil, ""
		}
		var v any
		if err := json.Unmarshal([]byte(s), &v); err != nil {
			return nil, "must be JSON: " + err.Error()
		}
		return v, ""
	case kindTextArea:
		return textLines(raw), ""
	default:
		return strings.TrimSpace(raw), ""
	}
}

// buildPatch returns the JSON merge patch (RFC 7396) that makes the
// settings of tree what sec's form says, naming only the settings that
// change, with the field errors of inputs that cannot be read. A map
// setting is replaced, not merged: the names it no longer has are removed
// with null.
func buildPatch(sec *section, tree map[string]any, values formValues) (map[string]any, []httpx.FieldError) {
	patch := map[string]any{}
	var errs []httpx.FieldError
	for _, f := range sec.Fields {
		v, msg := parseField(f, values)
		if msg != "" {
			errs = append(errs, httpx.FieldError{Field: f.Path, Message: msg})
			continue
		}
		cur := lookup(tree, f.Path)
		if same(f, cur, v) {
			continue
		}
		set(patch, f.Path, replacing(cur, v))
	}
	return patch, errs
}

// same reports whether the form's value v of f is the setting's current
// value cur, compared as JSON.
func same(f field, cur, v any) bool {
	if f.Kind == kindSelect && (cur == nil || cur == "") {
		cur = f.Options[0].Value
	}
	if f.Kind == kindCheckbox && cur == nil {
		cur = f.DefaultOn
	}
	a, err1 := json.Marshal(cur)
	b, err2 := json.Marshal(v)
	if err1 != nil || err2 != nil {
		return false
	}
	var x, y any
	_ = json.Unmarshal(a, &x)
	_ = json.Unmarshal(b, &y)
	if x == nil && isEmpty(y) || y == nil && isEmpty(x) {
		return true
	}
	return reflect.DeepEqual(x, y)
}

// isEmpty reports whether v is an empty list, object or string, which a
// setting left out of the JSON (omitempty) also is.
func isEmpty(v any) bool {
	switch v := v.(type) {
	case []any:
		return len(v) == 0
	case map[string]any:
		return len(v) == 0
	case string:
		return v == ""
	}
	return false
}

// replacing is the merge patch value that turns cur into v: v itself,
// except that of two objects the members cur has and v lacks are removed
// with null, at every depth.
func replacing(cur, v any) any {
	co, ok1 := cur.(map[string]any)
	vo, ok2 := v.(map[string]any)
	if !ok1 || !ok2 {
		return v
	}
	out := make(map[string]any, len(vo)+len(co))
	for k, x := range vo {
		out[k] = replacing(co[k], x)
	}
	for k := range co {
		if _, ok := vo[k]; !ok {
			out[k] = nil
		}
	}
	return out
}

// set puts v at the dotted path in patch, making the objects on the way.
func set(patch map[string]any, path string, v any) {
	keys := strings.Split(path, ".")
	m := patch
	for _, k := range keys[:len(keys)-1] {
		next, ok := m[k].(map[string]any)
		if !ok {
			next = map[string]any{}
			m[k] = next
		}
		m = next
	}
	m[keys[len(keys)-1]] = v
}

// fieldFor returns the path of sec's field that the error at path is
// about: the field itself, the one whose value holds it
// (auth.scopes.read, domains[2], web.scope_rules[0].path), or for an
// error about a group of settings (auth.token_lifetimes) the first of
// the group's fields; "" when none of sec's fields is about it.
func fieldFor(sec *section, path string) string {
	best := ""
	for _, f := range sec.Fields {
		if (path == f.Path || strings.HasPrefix(path, f.Path+".") || strings.HasPrefix(path, f.Path+"[")) &&
			len(f.Path) > len(best) {
			best = f.Path
		}
	}
	if best != "" {
		return best
	}
	for _, f := range sec.Fields {
		if strings.HasPrefix(f.Path, path+".") {
			return f.Path
		}
	}
	return ""
}
