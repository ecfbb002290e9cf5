package tenant

import (
	"net/url"
	"sort"
	"strings"

	"github.com/poppyhost/poppyhost/internal/httpx"
	"github.com/poppyhost/poppyhost/internal/safehttp"
)

// Limits on free text, so documents we publish stay small.
const (
	maxName        = 200
	maxDescription = 1000
	maxText        = 4000
	maxScopeLen    = 128
	maxItems       = 200
)

// checker collects the field errors of a Company's settings. Validate
// calls its checks of each feature, which live in validate_*.go by
// feature: organization and domains, auth (sign-in and scopes), agents,
// APIs and tasks, extensions and the skill index, web and operations,
// conversations.
type checker struct {
	httpx.Fields
	// allowPrivate is safehttp.Options.AllowPrivate of the platform's
	// outbound calls (POPPYHOST_ALLOW_PRIVATE_FETCH).
	allowPrivate bool
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

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
