package tenant

// Web configures the Company's website.
type Web struct {
	// BrowserJoin publishes web.browser_session_endpoint (spec 6).
	BrowserJoin bool `json:"browser_join"`
	// Origin is where the website is served from: with it, the platform
	// proxies every path of the Company's domains that is not its own to
	// the origin (docs/website.md).
	Origin string `json:"origin,omitempty"`
	// CookieName names the Session's cookie [DefaultWebCookie]; it is the
	// Company's own (spec 6).
	CookieName string `json:"cookie_name,omitempty"`
	// CookieDomain, when set, is the Domain of the Session's cookie, a
	// domain of the Company or one of its parents, so the cookie covers its
	// hosts; without it the cookie is host-only.
	CookieDomain string `json:"cookie_domain,omitempty"`
	// LandingPath is where a joined browser is sent ["/"].
	LandingPath string `json:"landing_path,omitempty"`
	// ScopeRules say which scopes a proxied request needs, by path.
	ScopeRules []WebScopeRule `json:"scope_rules"`
}

// JoinCookie ties a browser join code to the browser that loaded the join
// page (browserjoin). __Host- keeps other hosts of the Company's domain
// from setting it (spec 6); a Company's Session cookie may not be named
// so.
const JoinCookie = "__Host-poppy_join"

// DefaultWebCookie is the Session cookie's name when the Company names
// none: host-only, secure, on every path. With a cookie domain, which
// __Host- cookies may not have, it is DefaultDomainWebCookie.
const (
	DefaultWebCookie       = "__Host-poppy_session"
	DefaultDomainWebCookie = "__Secure-poppy_session"
)

// WebScopeRule makes requests to the website whose path starts with Path
// (and whose method is one of Methods, or any without) need Scopes. The
// longest matching Path decides.
type WebScopeRule struct {
	Path    string   `json:"path"`
	Methods []string `json:"methods,omitempty"`
	Scopes  []string `json:"scopes"`
}

// Cookie is the Session cookie's name.
func (w *Web) Cookie() string {
	switch {
	case w.CookieName != "":
		return w.CookieName
	case w.CookieDomain != "":
		return DefaultDomainWebCookie
	default:
		return DefaultWebCookie
	}
}

// Landing is the path a joined browser is sent to.
func (w *Web) Landing() string {
	if w.LandingPath == "" {
		return "/"
	}
	return w.LandingPath
}
