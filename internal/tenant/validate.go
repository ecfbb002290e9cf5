package tenant

import (
	"fmt"
	"net/netip"
	"net/url"
	"regexp"
	"slices"
	"sort"
	"strings"

	"golang.org/x/net/publicsuffix"

	"github.com/poppyhost/poppyhost/internal/httpx"
	"github.com/poppyhost/poppyhost/internal/safehttp"
)

// Names of extensions defined with the protocol that a Company may list
// itself. Plain names are reserved for these (spec 3.3); every other name
// starts with a domain the Company controls.
const ExtMediatedSignIn = "mediated-sign-in"

var (
	slugRe       = regexp.MustCompile(`^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$`)
	labelRe      = regexp.MustCompile(`^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$`)
	skillNameRe  = regexp.MustCompile(`^[a-z0-9]+(?:-[a-z0-9]+)*$`)
	digestRe     = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)
	versionRe    = regexp.MustCompile(`^[0-9]{1,9}$`)
	extPathRe    = regexp.MustCompile(`^[A-Za-z0-9._~-]+(?:/[A-Za-z0-9._~-]+)*$`)
	plainExtName = map[string]bool{ExtMediatedSignIn: true}
)

// reservedExtensions are served by the platform itself, so a Company
// cannot list them by hand.
var reservedExtensions = map[string]bool{"operations": true}

// Limits on free text, so documents we publish stay small.
const (
	maxName        = 200
	maxDescription = 1000
	maxText        = 4000
	maxScopeLen    = 128
	maxItems       = 200
)

// checker collects the field errors of a Company's settings.
type checker struct {
	httpx.Fields
	// allowPrivate is safehttp.Options.AllowPrivate of the platform's
	// outbound calls (POPPYHOST_ALLOW_PRIVATE_FETCH).
	allowPrivate bool
}

// ValidSlug reports whether s can name a Company in URLs.
func ValidSlug(s string) bool { return slugRe.MatchString(s) }

// ValidHostName reports whether s is a lowercase DNS host name of at least
// two labels, without port, path or trailing dot, and not an IP literal.
func ValidHostName(s string) bool {
	if len(s) == 0 || len(s) > 253 {
		return false
	}
	if _, err := netip.ParseAddr(s); err == nil {
		return false
	}
	labels := strings.Split(s, ".")
	if len(labels) < 2 || numericLabel(labels[len(labels)-1]) {
		return false
	}
	for _, l := range labels {
		if !labelRe.MatchString(l) {
			return false
		}
	}
	return true
}

// numericLabel reports whether a last label makes a host an IPv4 address
// to URL parsers (WHATWG "ends in a number"), as in 127.1 or 10.0x1: no
// top-level domain is numeric (RFC 3696 §2).
func numericLabel(l string) bool {
	if h, ok := strings.CutPrefix(l, "0x"); ok {
		return strings.Trim(h, "0123456789abcdef") == ""
	}
	return l != "" && strings.Trim(l, "0123456789") == ""
}

// hostMessage explains what is wrong with a host name.
func hostMessage(s string) string {
	switch {
	case s == "":
		return "is required"
	case strings.Contains(s, "://") || strings.Contains(s, "/"):
		return "must be a host name only, without scheme or path"
	case strings.Contains(s, ":"):
		return "must be a host name without a port"
	case s != strings.ToLower(s):
		return "must be lowercase"
	default:
		return "must be a DNS host name such as shop.example.com"
	}
}

// httpsURL returns "" when raw is an absolute https URL with a host and no
// user info or fragment, and otherwise says what is wrong.
func httpsURL(raw string) string {
	if raw == "" {
		return "is required"
	}
	u, err := url.Parse(raw)
	switch {
	case err != nil:
		return "is not a URL"
	case u.Scheme != "https":
		return "must be an https URL (spec 3)"
	case u.Hostname() == "":
		return "must name a host"
	case u.User != nil:
		return "must not carry user info"
	case u.Fragment != "" || strings.Contains(raw, "#"):
		return "must not have a fragment"
	}
	return ""
}

// ValidScope reports whether s is an OAuth scope-token (RFC 6749 §3.3).
func ValidScope(s string) bool {
	if s == "" || len(s) > maxScopeLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x21 || c == 0x22 || c == 0x5c || c > 0x7e {
			return false
		}
	}
	return true
}

func (c *checker) url(field, raw string) {
	if msg := httpsURL(raw); msg != "" {
		c.Add(field, "%s", msg)
	}
}

// outboundURL checks a URL the platform calls (a webhook, a hook, the
// website's origin): an https URL, as url checks, whose host is not one
// the platform would refuse to connect to (safehttp.CheckHost), so the
// Company hears so now, not at each call. A name that needs DNS is
// checked only when called.
func (c *checker) outboundURL(field, raw string) {
	if msg := outboundURL(raw, c.allowPrivate); msg != "" {
		c.Add(field, "%s", msg)
	}
}

// outboundURL returns what is wrong with raw as a URL the platform calls,
// or "".
func outboundURL(raw string, allowPrivate bool) string {
	if msg := httpsURL(raw); msg != "" {
		return msg
	}
	u, _ := url.Parse(raw)
	if safehttp.CheckHost(u.Hostname(), allowPrivate) != nil {
		return "must not name " + safehttp.HostRule + ": the platform would refuse to connect to it"
	}
	return ""
}

// Validate checks a Company before it is stored. publicHost is the
// platform's own host, which no Company may claim. allowPrivate is the
// platform's safehttp.Options.AllowPrivate: without it, URLs the platform
// calls may not name hosts it would refuse to connect to.
func Validate(slug string, s *Settings, publicHost string, allowPrivate bool) error {
	c := checker{allowPrivate: allowPrivate}
	if !ValidSlug(slug) {
		c.Add("slug", "must be 1 to 63 lowercase letters, digits or hyphens, not starting or ending with a hyphen")
	}
	c.organization(&s.Organization, publicHost)
	c.domains(s, publicHost)
	c.auth(&s.Auth)
	c.conversations(s)
	apis := c.apis(s.APIs)
	c.Text("mcp.description", s.MCP.Description, false, maxDescription, true)
	c.excludedTasks(s.ExcludedTasks, apis)
	c.web(s)
	c.operations(s)

	c.extensions(s)
	if s.SkillIndex != nil {
		c.skillIndex(s.SkillIndex)
	}
	c.feedbackAlternatives(s.Feedback.Alternatives, apis)
	c.agents(&s.Agents)
	if n := s.Sessions.IdleTimeoutSeconds; n < 60 || n > 366*24*3600 {
		c.Add("sessions.idle_timeout_seconds", "must be from 60 seconds to a year")
	}
	for _, l := range []struct {
		field string
		n     int
	}{{"rate_limits.per_agent", s.RateLimits.PerAgent}, {"rate_limits.per_session", s.RateLimits.PerSession},
		{"rate_limits.per_address", s.RateLimits.PerAddress}} {
		if l.n < 1 || l.n > 1_000_000 {
			c.Add(l.field, "must be from 1 to 1000000 requests a minute")
		}
	}
	return c.Err()
}

func (c *checker) organization(o *Organization, publicHost string) {
	c.Text("organization.name", o.Name, true, maxName, true)
	if !ValidHostName(o.Domain) {
		c.Add("organization.domain", "%s", hostMessage(o.Domain))
	} else if o.Domain == publicHost {
		c.Add("organization.domain", "is the platform's own host")
	}
	if o.LogoURI != "" {
		c.url("organization.logo_uri", o.LogoURI)
	}
}

func (c *checker) domains(s *Settings, publicHost string) {
	if len(s.Domains) > 0 && !s.Auth.Issuer {
		c.Add("domains", "extra domains need an issuer: without one each domain is a separate Company (spec 3.2)")
	}
	if len(s.Domains) > maxItems {
		c.Add("domains", "must list at most %d domains", maxItems)
		return
	}
	seen := map[string]bool{s.Organization.Domain: true}
	for i, d := range s.Domains {
		f := fmt.Sprintf("domains[%d]", i)
		switch {
		case !ValidHostName(d):
			c.Add(f, "%s", hostMessage(d))
		case d == publicHost:
			c.Add(f, "is the platform's own host")
		case seen[d]:
			c.Add(f, "is listed twice (organization.domain counts)")
		}
		seen[d] = true
	}
}

func (c *checker) auth(a *Auth) {
	if !a.Issuer {
		if a.Disabled {
			c.Add("auth.disabled", "needs an issuer: a Company without one already offers no sign-in")
		}
		if len(a.GrantTypes) > 0 {
			c.Add("auth.grant_types", "need an issuer")
		}
		if len(a.Scopes) > 0 {
			c.Add("auth.scopes", "need an issuer: scopes describe sign-in")
		}
		if len(a.ScopeHints) > 0 {
			c.Add("auth.scope_hints", "need an issuer: hints describe scopes of sign-in")
		}
		if len(a.OtherAuthorizationServers) > 0 {
			c.Add("auth.other_authorization_servers", "need an issuer")
		}
		if a.TokenLifetimes != (TokenLifetimes{}) {
			c.Add("auth.token_lifetimes", "need an issuer")
		}
	}
	if t := a.TokenLifetimes.AccessSeconds; t != 0 && (t < 60 || t > 86400) {
		c.Add("auth.token_lifetimes.access_seconds", "must be 0 (the default) or from 60 to 86400")
	}
	if t := a.TokenLifetimes.RefreshSeconds; t != 0 && (t < 3600 || t > 365*86400) {
		c.Add("auth.token_lifetimes.refresh_seconds", "must be 0 (the default) or from 3600 to 31536000")
	}
	seen := map[string]bool{}
	for i, g := range a.GrantTypes {
		f := fmt.Sprintf("auth.grant_types[%d]", i)
		switch {
		case g != GrantAuthorizationCode && g != GrantDeviceCode:
			c.Add(f, "must be %s or %s", GrantAuthorizationCode, GrantDeviceCode)
		case seen[g]:
			c.Add(f, "is listed twice")
		}
		seen[g] = true
	}
	if len(a.Scopes) > maxItems {
		c.Add("auth.scopes", "must list at most %d scopes", maxItems)
	}
	for _, name := range sortedKeys(a.Scopes) {
		f := "auth.scopes." + name
		if !ValidScope(name) {
			c.Add(f, "is not an OAuth scope name (RFC 6749 §3.3: printable ASCII without space, quote or backslash, at most %d characters)", maxScopeLen)
			continue
		}
		c.Text(f, a.Scopes[name], true, maxDescription, true)
	}
	if len(a.ScopeHints) > maxItems {
		c.Add("auth.scope_hints", "must list at most %d scopes", maxItems)
	}
	for _, name := range sortedKeys(a.ScopeHints) {
		f := "auth.scope_hints." + name
		h := a.ScopeHints[name]
		if !ValidScope(name) {
			c.Add(f, "is not an OAuth scope name")
			continue
		}
		switch h.Changes {
		case "none", "reversible", "irreversible":
		case "":
			c.Add(f+".changes", "is required (spec 4.7)")
		default:
			c.Add(f+".changes", "must be none, reversible or irreversible")
		}
		if h.PersonalData == nil {
			c.Add(f+".personal_data", "is required (spec 4.7)")
		}
	}
	if len(a.OtherAuthorizationServers) > 10 {
		c.Add("auth.other_authorization_servers", "must list at most 10 servers")
	}
	others := map[string]bool{}
	for i, s := range a.OtherAuthorizationServers {
		f := fmt.Sprintf("auth.other_authorization_servers[%d]", i)
		if others[s] {
			c.Add(f, "is listed twice")
		}
		others[s] = true
		c.url(f, s)
	}
}

func (c *checker) conversations(s *Settings) {
	switch s.Conversations.Access {
	case "session":
	case "signed_in":
		if !s.Auth.Issuer || s.Auth.Disabled {
			c.Add("conversations.access", "signed_in needs an issuer with sign-in on (spec 3.2)")
		}
	default:
		c.Add("conversations.access", "must be session or signed_in")
	}
	cv := &s.Conversations
	if cv.AgentWebhook != "" {
		if len(cv.AgentWebhook) > maxWebhookURL {
			c.Add("conversations.agent_webhook", "must be at most %d characters", maxWebhookURL)
		} else {
			c.outboundURL("conversations.agent_webhook", cv.AgentWebhook)
		}
	}
	c.Text("conversations.handoff_unavailable_message", cv.HandoffUnavailableMessage, false, maxDescription, true)
	for _, l := range []struct {
		field     string
		n, lo, hi int
		unit      string
	}{
		{"conversations.handoff_timeout_seconds", cv.HandoffTimeoutSeconds, 10, 86400, "seconds"},
		{"conversations.idle_close_seconds", cv.IdleCloseSeconds, 60, 365 * 86400, "seconds"},
		{"conversations.retention_days", cv.RetentionDays, 1, 3650, "days"},
	} {
		if l.n != 0 && (l.n < l.lo || l.n > l.hi) {
			c.Add(l.field, "must be 0 (the default) or from %d to %d %s", l.lo, l.hi, l.unit)
		}
	}
}

// maxWebhookURL bounds conversations.agent_webhook.
const maxWebhookURL = 2048

// apis validates the listed APIs and returns their URLs by type, for the
// references of alternatives.
func (c *checker) apis(apis []API) map[string]string {
	byURL := map[string]string{}
	if len(apis) > maxItems {
		c.Add("apis", "must list at most %d APIs", maxItems)
		return byURL
	}
	for i, a := range apis {
		f := fmt.Sprintf("apis[%d]", i)
		if a.Type != "openapi" && a.Type != "mcp" {
			c.Add(f+".type", "must be openapi or mcp")
		}
		c.url(f+".url", a.URL)
		c.Text(f+".description", a.Description, false, maxDescription, true)
		if _, dup := byURL[a.URL]; dup {
			c.Add(f+".url", "is listed twice")
		}
		byURL[a.URL] = a.Type
	}
	return byURL
}

func (c *checker) excludedTasks(tasks []ExcludedTask, apis map[string]string) {
	if len(tasks) > maxItems {
		c.Add("excluded_tasks", "must list at most %d tasks", maxItems)
		return
	}
	for i, t := range tasks {
		f := fmt.Sprintf("excluded_tasks[%d]", i)
		c.Text(f+".task", t.Task, true, maxName, true)
		if t.Alternative != nil {
			c.alternative(f+".alternative", t.Alternative, apis)
		}
	}
}

// alternative checks a 9.2 alternative: instructions or references, and
// openapi and mcp references that name a listed API.
func (c *checker) alternative(f string, a *Alternative, apis map[string]string) {
	if a.Instructions == "" && len(a.References) == 0 {
		c.Add(f, "must have instructions, references or both (spec 9.2)")
	}
	c.Text(f+".instructions", a.Instructions, false, maxText, true)
	if len(a.References) > 20 {
		c.Add(f+".references", "must list at most 20 references")
		return
	}
	for i, r := range a.References {
		rf := fmt.Sprintf("%s.references[%d]", f, i)
		switch r.Type {
		case "openapi", "mcp":
			if apis[r.URL] != r.Type {
				c.Add(rf+".url", "must be the url of a listed %s API (spec 9.2)", r.Type)
			}
		case "web":
			c.url(rf+".url", r.URL)
		default:
			c.Add(rf+".type", "must be openapi, mcp or web")
		}
		if r.OperationID != "" && r.Type != "openapi" {
			c.Add(rf+".operation_id", "is only for openapi references")
		}
		c.Text(rf+".operation_id", r.OperationID, false, maxName, true)
	}
}

func (c *checker) feedbackAlternatives(alts []TaskAlternative, apis map[string]string) {
	if len(alts) > maxItems {
		c.Add("feedback.alternatives", "must list at most %d tasks", maxItems)
		return
	}
	seen := map[string]bool{}
	for i, a := range alts {
		f := fmt.Sprintf("feedback.alternatives[%d]", i)
		c.Text(f+".task", a.Task, true, maxName, true)
		key := NormalTask(a.Task)
		if seen[key] {
			c.Add(f+".task", "is listed twice")
		}
		seen[key] = true
		c.alternative(f+".alternative", &a.Alternative, apis)
	}
}

// NormalTask is how feedback tasks are matched: without case or
// surrounding space.
func NormalTask(s string) string { return strings.ToLower(strings.TrimSpace(s)) }

// maxClientID bounds a client_id in an acceptance list.
const maxClientID = 2048

func (c *checker) agents(p *AgentPolicy) {
	switch p.Accept {
	case AcceptAll, AcceptListed, AcceptUnlisted:
	default:
		c.Add("agents.accept", "must be all, listed or unlisted")
	}
	if len(p.ClientIDs) > 10_000 {
		c.Add("agents.client_ids", "must list at most 10000 client_ids")
		return
	}
	for i, id := range p.ClientIDs {
		f := fmt.Sprintf("agents.client_ids[%d]", i)
		if len(id) > maxClientID {
			c.Add(f, "must be at most %d characters", maxClientID)
			continue
		}
		c.url(f, id)
	}
	if len(p.SignInRefused) > 10_000 {
		c.Add("agents.sign_in_refused", "must list at most 10000 client_ids")
		return
	}
	for _, id := range sortedKeys(p.SignInRefused) {
		f := "agents.sign_in_refused." + id
		if len(id) > maxClientID {
			c.Add(f, "must be a client_id of at most %d characters", maxClientID)
			continue
		}
		c.url(f, id)
		seen := map[string]bool{}
		for i, g := range p.SignInRefused[id] {
			switch {
			case g != GrantAuthorizationCode && g != GrantDeviceCode:
				c.Add(fmt.Sprintf("%s[%d]", f, i), "must be %s or %s", GrantAuthorizationCode, GrantDeviceCode)
			case seen[g]:
				c.Add(fmt.Sprintf("%s[%d]", f, i), "is listed twice")
			}
			seen[g] = true
		}
	}
}

// ValidExtensionName reports whether name is a plain name we know or a
// domain-prefixed one (spec 3.3).
func ValidExtensionName(name string) bool {
	if plainExtName[name] {
		return true
	}
	host, path, ok := strings.Cut(name, "/")
	return ok && ValidHostName(host) && extPathRe.MatchString(path) && len(name) <= 200
}

func (c *checker) extensions(s *Settings) {
	if len(s.Extensions) > maxItems {
		c.Add("extensions", "must list at most %d extensions", maxItems)
		return
	}
	for _, name := range sortedKeys(s.Extensions) {
		f := "extensions." + name
		switch {
		case reservedExtensions[name]:
			c.Add(f, "is served by poppyhost itself and cannot be listed by hand")
			continue
		case !ValidExtensionName(name):
			c.Add(f, "must start with a domain the Company controls, such as example.com/gift-wrap; plain names are reserved for the protocol's own extensions (spec 3.3)")
			continue
		}
		if name == ExtMediatedSignIn && (!s.Auth.Issuer || s.Auth.Disabled) {
			c.Add(f, "Mediated Sign-In needs an issuer with sign-in on (spec 3.2)")
		}
		entry := s.Extensions[name]
		v, ok := entry["version"].(string)
		if !ok || !versionRe.MatchString(v) {
			c.Add(f+".version", "is required: the extension's major version as a string of digits, such as \"1\"")
		}
		for _, k := range sortedKeys(entry) {
			c.urlsIn(f+"."+k, entry[k], 0)
		}
	}
}

// urlsIn checks that every absolute URL in an extension's entry is https
// (spec 3: every URL in extensions).
func (c *checker) urlsIn(f string, v any, depth int) {
	if depth > 8 {
		c.Add(f, "is nested too deeply")
		return
	}
	switch x := v.(type) {
	case string:
		if strings.Contains(x, "://") {
			c.url(f, x)
		}
	case []any:
		for i, e := range x {
			c.urlsIn(fmt.Sprintf("%s[%d]", f, i), e, depth+1)
		}
	case map[string]any:
		for _, k := range sortedKeys(x) {
			c.urlsIn(f+"."+k, x[k], depth+1)
		}
	}
}

func (c *checker) skillIndex(si *SkillIndex) {
	if si.Schema != SkillIndexSchema {
		c.Add("skill_index.$schema", "must be %s (spec 9.4)", SkillIndexSchema)
	}
	if len(si.Skills) > maxItems {
		c.Add("skill_index.skills", "must list at most %d skills", maxItems)
		return
	}
	seen := map[string]bool{}
	for i, sk := range si.Skills {
		f := fmt.Sprintf("skill_index.skills[%d]", i)
		switch {
		case !skillNameRe.MatchString(sk.Name) || len(sk.Name) > 64:
			c.Add(f+".name", "must be 1 to 64 lowercase letters, digits and single hyphens")
		case seen[sk.Name]:
			c.Add(f+".name", "is listed twice")
		}
		seen[sk.Name] = true
		c.Text(f+".description", sk.Description, true, maxDescription, true)
		if sk.Type != "skill-md" && sk.Type != "archive" {
			c.Add(f+".type", "must be skill-md or archive")
		}
		c.skillURL(f+".url", sk.URL)
		if !digestRe.MatchString(sk.Digest) {
			c.Add(f+".digest", "must be sha256: followed by 64 lowercase hex digits (spec 9.4)")
		}
	}
}

// skillURL allows relative references, resolved against poppy.json's https
// URL (spec 9.4), and absolute https URLs.
func (c *checker) skillURL(f, raw string) {
	u, err := url.Parse(raw)
	switch {
	case raw == "":
		c.Add(f, "is required")
	case err != nil:
		c.Add(f, "is not a URL reference")
	case u.Scheme != "" || strings.HasPrefix(raw, "//"):
		c.url(f, raw)
	case u.Fragment != "":
		c.Add(f, "must not have a fragment")
	}
}

// operations checks the Operations extension's settings.
func (c *checker) operations(s *Settings) {
	o := &s.Operations
	if o.ApprovalHook != "" {
		c.Text("operations.approval_hook", o.ApprovalHook, false, maxWebPath, true)
		c.outboundURL("operations.approval_hook", o.ApprovalHook)
	}
	if (o.Web || o.ApprovalHook != "") && !o.Enabled {
		c.Add("operations", "web and approval_hook need enabled: the extension must be on")
	}
	if o.Web && (s.Web.Origin == "" || !s.Web.BrowserJoin) {
		c.Add("operations.web", "needs web.origin and web.browser_join: only a browser joined to a Session gets operations (extension 2)")
	}
}

// Limits of the website settings.
const (
	maxCookieName = 64
	maxWebPath    = 2048
	maxScopeRules = 100
	maxMethod     = 32
)

// joinCookie is browserjoin.JoinCookie, which the Session cookie must not
// be named (browserjoin imports this package).
const joinCookie = "__Host-poppy_join"

func (c *checker) web(s *Settings) {
	w := &s.Web
	if w.Origin != "" {
		if len(w.Origin) > maxWebPath {
			c.Add("web.origin", "must be at most %d characters", maxWebPath)
		} else if msg := outboundURL(w.Origin, c.allowPrivate); msg != "" {
			c.Add("web.origin", "%s", msg)
		} else if strings.Contains(w.Origin, "?") {
			c.Add("web.origin", "must not have a query: each request's own query is sent")
		} else if u, err := url.Parse(w.Origin); err == nil && s.HasDomain(strings.ToLower(u.Hostname())) {
			c.Add("web.origin", "must not be one of the Company's own domains, which the platform serves: requests would go round in a loop")
		}
	}
	if w.CookieName != "" {
		switch {
		case len(w.CookieName) > maxCookieName || !cookieToken(w.CookieName):
			c.Add("web.cookie_name", "must be 1 to %d cookie-name characters (RFC 6265: letters, digits and !#$%%&'*+-.^_`|~)", maxCookieName)
		case strings.EqualFold(w.CookieName, joinCookie):
			c.Add("web.cookie_name", "is the name of the browser-session page's own cookie")
		case w.CookieDomain != "" && hasPrefixFold(w.CookieName, "__Host-"):
			c.Add("web.cookie_name", "must not start with __Host- when web.cookie_domain is set: browsers refuse such a cookie with a Domain")
		}
	}
	if d := w.CookieDomain; d != "" {
		switch {
		case !ValidHostName(d):
			c.Add("web.cookie_domain", "%s", hostMessage(d))
		case isPublicSuffix(d):
			c.Add("web.cookie_domain", "is a public suffix, which browsers refuse as a cookie's Domain")
		case !coversDomain(s, d):
			c.Add("web.cookie_domain", "must be one of the Company's domains (organization.domain, domains) or a parent of one")
		}
	}
	if w.LandingPath != "" {
		c.webPath("web.landing_path", w.LandingPath)
		if strings.HasPrefix(w.LandingPath, "//") {
			c.Add("web.landing_path", "must not start with //, which browsers read as another host")
		}
	}
	if len(w.ScopeRules) > 0 && w.Origin == "" {
		c.Add("web.scope_rules", "need web.origin: they apply to the website the platform proxies")
	}
	if len(w.ScopeRules) > maxScopeRules {
		c.Add("web.scope_rules", "must list at most %d rules", maxScopeRules)
		return
	}
	for i, r := range w.ScopeRules {
		f := fmt.Sprintf("web.scope_rules[%d]", i)
		said := c.Len()
		c.webPath(f+".path", r.Path)
		switch {
		case c.Len() > said:
		case !safehttp.ValidPath(r.Path):
			c.Add(f+".path", "must be %s", safehttp.PathRule)
		case emptySegments(r.Path):
			c.Add(f+".path", "must have no empty segments: request paths are compared with repeated slashes merged")
		}
		for j, m := range r.Methods {
			mf := fmt.Sprintf("%s.methods[%d]", f, j)
			switch {
			case m == "" || len(m) > maxMethod || !cookieToken(m) || m != strings.ToUpper(m):
				c.Add(mf, "must be an upper-case HTTP method, such as GET or POST")
			case slices.Contains(r.Methods[:j], m):
				c.Add(mf, "is listed twice")
			}
		}
		if len(r.Scopes) == 0 {
			c.Add(f+".scopes", "must list at least one scope: the rule makes requests need them")
		}
		for j, sc := range r.Scopes {
			sf := fmt.Sprintf("%s.scopes[%d]", f, j)
			_, known := s.Auth.Scopes[sc]
			switch {
			case !s.Auth.Issuer || !known:
				c.Add(sf, "must be one of auth.scopes")
			case slices.Contains(r.Scopes[:j], sc):
				c.Add(sf, "is listed twice")
			}
		}
		for j, o := range w.ScopeRules[:i] {
			if samePath(o.Path, r.Path) && methodsOverlap(o.Methods, r.Methods) {
				c.Add(f, "repeats the path of web.scope_rules[%d] for the same methods: one rule must decide", j)
				break
			}
		}
	}
}

// webPath checks an absolute path on the Company's domains: it starts
// with /, and is printable ASCII without spaces or backslashes (anything
// else percent-encoded), at most maxWebPath long.
func (c *checker) webPath(f, p string) {
	switch {
	case p == "":
		c.Add(f, "is required")
	case !strings.HasPrefix(p, "/"):
		c.Add(f, "must be a path starting with /")
	case len(p) > maxWebPath:
		c.Add(f, "must be at most %d characters", maxWebPath)
	case strings.IndexFunc(p, func(r rune) bool { return r <= ' ' || r > '~' || r == '\\' }) >= 0:
		c.Add(f, "must be printable ASCII without spaces or backslashes: percent-encode other characters")
	}
}

// emptySegments reports whether p has an empty segment (//) other than
// a trailing one, which request paths lose when scope rules compare them.
// The one path rule (safehttp.ValidPath) allows them.
func emptySegments(p string) bool {
	segs := strings.Split(p, "/")[1:]
	for i, s := range segs {
		if s == "" && i < len(segs)-1 {
			return true
		}
	}
	return false
}

// samePath reports whether two rule paths are one once percent-decoded,
// as requests are compared with them.
func samePath(a, b string) bool {
	da, errA := url.PathUnescape(a)
	db, errB := url.PathUnescape(b)
	return errA == nil && errB == nil && da == db
}

// methodsOverlap reports whether two rules of one path would both decide
// a request: both list no methods, or both list one method. A rule that
// lists methods decides over one that lists none.
func methodsOverlap(a, b []string) bool {
	if len(a) == 0 || len(b) == 0 {
		return len(a) == len(b)
	}
	return slices.ContainsFunc(a, func(m string) bool { return slices.Contains(b, m) })
}

// cookieToken reports whether s is an RFC 6265 cookie-name (an RFC 2616
// token, which HTTP methods are too).
func cookieToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		ch := s[i]
		if ch <= ' ' || ch >= 0x7f || strings.IndexByte(`()<>@,;:\"/[]?={}`, ch) >= 0 {
			return false
		}
	}
	return true
}

func hasPrefixFold(s, prefix string) bool {
	return len(s) >= len(prefix) && strings.EqualFold(s[:len(prefix)], prefix)
}

// isPublicSuffix reports whether d is a public suffix (co.uk, github.io).
func isPublicSuffix(d string) bool {
	ps, _ := publicsuffix.PublicSuffix(d)
	return ps == d
}

// coversDomain reports whether d is one of the Company's domains or a
// parent of one.
func coversDomain(s *Settings, d string) bool {
	return slices.ContainsFunc(s.AllDomains(), func(x string) bool { return x == d || strings.HasSuffix(x, "."+d) })
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
