package tenant

import (
	"fmt"
	"net/netip"
	"regexp"
	"strings"
)

var (
	slugRe  = regexp.MustCompile(`^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$`)
	labelRe = regexp.MustCompile(`^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$`)
)

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
