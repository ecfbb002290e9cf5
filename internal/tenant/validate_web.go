package tenant

import (
	"fmt"
	"net/url"
	"slices"
	"strings"

	"golang.org/x/net/publicsuffix"

	"github.com/poppyhost/poppyhost/internal/safehttp"
)

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
		case strings.EqualFold(w.CookieName, JoinCookie):
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
