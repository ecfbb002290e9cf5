package pages

import (
	"bytes"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"net"
	"net/http"
	"net/url"
	"reflect"
	"strings"
	"time"

	"github.com/poppyhost/poppyhost/internal/httpx"
	"golang.org/x/net/idna"
)

// Brand is the Company whose issuer shows the page.
type Brand struct {
	// CompanyName is the organization name the User knows the Company by.
	CompanyName string
	// Domain is the Company's domain, shown next to its name.
	Domain string
	// LogoURI is the Company's logo; it is shown only when it is an https URL.
	LogoURI string
}

// Agent is the Personal Agent asking for access, from its client metadata
// (spec 4.1). The consent page shows its name (or "An unnamed agent"), its
// logo, and the host of its client_id, so a User can tell look-alike names
// apart.
type Agent struct {
	// Name is the client_name; it is the agent's claim, never proof.
	Name string
	// LogoURI is the logo_uri; it is shown only when it is an https URL.
	LogoURI string
	// ClientID is the agent's client_id URL; the page shows its host.
	ClientID string
	// MCPClient marks a client that is not a Personal Agent: an MCP client
	// signing in with MCP's own authorization for the MCP server only
	// (spec 7). The page says so.
	MCPClient bool
	// HomePage is an MCP client's client_uri, shown as a link when it is
	// an https URL.
	HomePage string
	// Registered marks an MCP client that registered itself (RFC 7591):
	// it has no client_id URL, and nothing it says about itself is
	// verified. The page says so instead of showing a host.
	Registered bool
}

// Scope is one requested scope on the consent page, with its hints (spec 4.7).
type Scope struct {
	// Name is the scope as requested, such as orders:read. It is the value of
	// the scope checkbox.
	Name string
	// Description says what the scope allows, in the Company's words.
	Description string
	// Changes is the changes hint: "" (no hint), none, reversible or
	// irreversible. Any other value is shown as irreversible (spec 4.7).
	Changes string
	// PersonalData is the personal_data hint; nil means no hint.
	PersonalData *bool
	// Checked ticks the checkbox.
	Checked bool
}

// Field is a hidden input that a form carries back to its handler.
type Field struct {
	Name, Value string
}

// Login is the sign-in page (spec 4.2, 4.3).
type Login struct {
	Brand Brand
	// Action is the URL the form posts to.
	Action string
	// Hidden are carried back with the form.
	Hidden []Field
	// CSRF is the value of the form's csrf field.
	CSRF string
	// Username prefills the username input, such as after a failed attempt.
	Username string
	// Error, when set, is shown as an alert tied to the inputs.
	Error string
	// Intro says why the User signs in, such as "Sign in to Stormline to
	// continue connecting Example Agent."
	Intro string
}

// Consent is the page where a signed-in User allows or denies the scopes a
// Personal Agent asked for (spec 4.2, 4.3, 4.7).
type Consent struct {
	Brand Brand
	Agent Agent
	// Scopes are the requested scopes, one checkbox each.
	Scopes []Scope
	// Action is the URL the form posts to.
	Action string
	// Hidden are carried back with the form.
	Hidden []Field
	// CSRF is the value of the form's csrf field.
	CSRF string
	// Username is the signed-in User, shown as "Signed in as".
	Username string
	// UserCode is set for Device Sign-In, so the User can check that it
	// matches the code their agent shows (RFC 10027).
	UserCode string
	// Error, when set, is shown as an alert tied to the scopes.
	Error string
}

// DeviceEntry is the page where a User enters the code their Personal Agent
// shows for Device Sign-In (spec 4.3).
type DeviceEntry struct {
	Brand Brand
	// Action is the URL the form posts to.
	Action string
	// CSRF is the value of the form's csrf field.
	CSRF string
	// UserCode prefills the code, such as from verification_uri_complete.
	// Opening the page never approves anything by itself (spec 4.3).
	UserCode string
	// Error, when set, is shown as an alert tied to the code input.
	Error string
}

// ConnectedAgent is a Personal Agent that holds access to the User's account.
type ConnectedAgent struct {
	// ClientID is posted back to disconnect the agent; the page shows its host.
	ClientID string
	// Name is the agent's client_name.
	Name string
	// MCPClient marks a client that is not a Personal Agent (Agent.MCPClient).
	MCPClient bool
	// HomePage is an MCP client's client_uri.
	HomePage string
	// Registered marks a self-registered MCP client (Agent.Registered).
	Registered bool
	// Scopes are the scopes it was granted.
	Scopes []string
	// Since is when it was first connected; the zero time is not shown.
	Since time.Time
}

// Account is the account page, where a User sees the connected Personal
// Agents, disconnects them (spec 5.5), and signs out.
type Account struct {
	Brand Brand
	// Username is the signed-in User.
	Username string
	// Agents are the connected Personal Agents.
	Agents []ConnectedAgent
	// DisconnectAction is the URL each disconnect form posts to.
	DisconnectAction string
	// SignOutAction is the URL the sign-out form posts to.
	SignOutAction string
	// CSRF is the value of every form's csrf field.
	CSRF string
	// Notice, when set, is shown as a status message, such as "Example Agent
	// was disconnected."
	Notice string
}

// Message is a page that only says something: done, declined, or an error.
type Message struct {
	Brand Brand
	// Title is the page's heading.
	Title string
	// Body is the text below it; line breaks are kept.
	Body string
}

// Page is one of Login, Consent, DeviceEntry, Account and Message, or a
// pointer to one.
type Page interface{ page() }

func (Login) page()       {}
func (Consent) page()     {}
func (DeviceEntry) page() {}
func (Account) page()     {}
func (Message) page()     {}

// The name method picks a page's template. It is separate from page so that
// Page stays a bare marker.
func (Login) name() string       { return "login" }
func (Consent) name() string     { return "consent" }
func (DeviceEntry) name() string { return "device" }
func (Account) name() string     { return "account" }
func (Message) name() string     { return "message" }

//go:embed templates/*.html
var files embed.FS

var funcs = template.FuncMap{
	"imageURL":     imageURL,
	"host":         clientHost,
	"agentName":    agentName,
	"changes":      changesHint,
	"irreversible": irreversible,
	"isTrue":       func(b *bool) bool { return b != nil && *b },
	"date":         func(t time.Time) string { return t.UTC().Format("2 January 2006") },
	"isoDate":      func(t time.Time) string { return t.UTC().Format("2006-01-02") },
}

// templates holds one template set per page: the layout plus the page's
// "title" and "main".
var templates = func() map[string]*template.Template {
	layout := template.Must(template.New("layout.html").Funcs(funcs).ParseFS(files, "templates/layout.html"))
	m := map[string]*template.Template{}
	for _, name := range []string{"login", "consent", "device", "account", "message"} {
		t := template.Must(layout.Clone())
		m[name] = template.Must(t.ParseFS(files, "templates/"+name+".html"))
	}
	return m
}()

// SetHeaders sets the headers every issuer page carries. It is exported so
// that error paths that do not render a page can use it.
func SetHeaders(h http.Header) {
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Pragma", "no-cache")
	// No script at all, inline CSS only, logos from https only, never framed
	// (clickjacking a consent page). There is deliberately no form-action:
	// Chromium applies it to the redirect that follows a form submission, and
	// the consent form's redirect goes to the Personal Agent's redirect_uri
	// on another origin, which form-action 'self' would block.
	httpx.PageHeaders(h, "default-src 'none'; style-src 'unsafe-inline'; img-src https:; frame-ancestors 'none'; base-uri 'none'")
}

// Render writes page p with status (0 means 200) and the headers of
// SetHeaders. It executes the template into a buffer first, so a template
// error can't leave a half-written page: it answers 500 with a plain message
// instead. A nil pointer page is such an error.
func Render(w http.ResponseWriter, status int, p Page) {
	if status == 0 {
		status = http.StatusOK
	}
	var buf bytes.Buffer
	if err := execute(&buf, p); err != nil {
		SetHeaders(w.Header())
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.WriteHeader(http.StatusInternalServerError)
		_, _ = w.Write([]byte("Something went wrong. Please try again later.\n"))
		return
	}
	SetHeaders(w.Header())
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

func execute(buf *bytes.Buffer, p Page) error {
	v := reflect.ValueOf(p)
	if !v.IsValid() || (v.Kind() == reflect.Pointer && v.IsNil()) {
		return errors.New("pages: nil page")
	}
	n, ok := p.(interface{ name() string })
	if !ok {
		return fmt.Errorf("pages: unknown page type %T", p)
	}
	return templates[n.name()].ExecuteTemplate(buf, "layout", p)
}

// imageURL returns s when it is an absolute https URL, and "" otherwise, so
// that javascript:, data: and http: images are left out, not just defused.
func imageURL(s string) string {
	u, err := url.Parse(s)
	if err != nil || u.Scheme != "https" || u.Host == "" || u.User != nil {
		return ""
	}
	return s
}

// clientHost returns the host of a client_id URL (with its port, if any), in
// ASCII, so that an internationalized look-alike shows as punycode. A
// client_id without a host is returned whole.
func clientHost(clientID string) string {
	u, err := url.Parse(clientID)
	if err != nil || u.Hostname() == "" {
		return clientID
	}
	h := strings.ToLower(u.Hostname())
	if a, err := idna.ToASCII(h); err == nil {
		h = a
	}
	if p := u.Port(); p != "" {
		return net.JoinHostPort(h, p)
	}
	if strings.Contains(h, ":") {
		return "[" + h + "]"
	}
	return h
}

func agentName(name string) string {
	if strings.TrimSpace(name) == "" {
		return "An unnamed agent"
	}
	return name
}

// changesHint puts a changes hint in words. A value it doesn't recognize is
// irreversible (spec 4.7).
func changesHint(changes string) string {
	switch changes {
	case "":
		return ""
	case "none":
		return "Makes no changes"
	case "reversible":
		return "Can make changes that can be undone"
	default:
		return "Can make changes that cannot be undone"
	}
}

// irreversible reports whether a changes hint is shown as irreversible.
func irreversible(changes string) bool {
	return changesHint(changes) == "Can make changes that cannot be undone"
}
