package pages_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/net/html"
	"golang.org/x/net/html/atom"

	"github.com/poppyhost/poppyhost/internal/issuer/pages"
)

var brand = pages.Brand{CompanyName: "Stormline", Domain: "stormline.example", LogoURI: "https://stormline.example/logo.png"}

func ptr[T any](v T) *T { return &v }

// rendered is one rendered page: the recorder and the parsed document.
type rendered struct {
	rec  *httptest.ResponseRecorder
	body string
	doc  *html.Node
}

// render renders p and checks what every page must be: the status and
// headers, and a document that passes checkDocument.
func render(t *testing.T, status int, p pages.Page) *rendered {
	t.Helper()
	rec := httptest.NewRecorder()
	pages.Render(rec, status, p)
	require.Equal(t, status, rec.Code, rec.Body.String())
	requireHeaders(t, rec.Header(), "text/html; charset=utf-8")
	body := rec.Body.String()
	doc, err := html.Parse(strings.NewReader(body))
	require.NoError(t, err)
	checkDocument(t, doc)
	return &rendered{rec: rec, body: body, doc: doc}
}

func requireHeaders(t *testing.T, h http.Header, contentType string) {
	t.Helper()
	want := map[string]string{
		"Content-Type":               contentType,
		"Cache-Control":              "no-store",
		"Pragma":                     "no-cache",
		"Content-Security-Policy":    "default-src 'none'; style-src 'unsafe-inline'; img-src https:; frame-ancestors 'none'; base-uri 'none'",
		"X-Frame-Options":            "DENY",
		"Referrer-Policy":            "no-referrer",
		"X-Content-Type-Options":     "nosniff",
		"Cross-Origin-Opener-Policy": "same-origin",
	}
	for k, v := range want {
		require.Equal(t, v, h.Get(k), k)
	}
}

// checkDocument checks what every page's HTML must be: lang="en", one h1, no
// script of any kind, https images only, a label for every input a User
// fills in, aria-describedby that points at something, and post forms that
// carry csrf.
func checkDocument(t *testing.T, doc *html.Node) {
	t.Helper()
	htmlEl := find(doc, atom.Html)
	require.Len(t, htmlEl, 1)
	require.Equal(t, "en", attr(htmlEl[0], "lang"))
	require.Len(t, find(doc, atom.H1), 1, "one h1")
	require.Len(t, find(doc, atom.Title), 1)
	require.Len(t, find(doc, atom.Style), 1)
	require.Empty(t, find(doc, atom.Script), "no script element")

	ids := map[string]bool{}
	forLabel := map[string]bool{}
	walk(doc, func(n *html.Node) {
		for _, a := range n.Attr {
			require.False(t, strings.HasPrefix(strings.ToLower(a.Key), "on"), "event handler attribute %q", a.Key)
			require.NotEqual(t, "style", a.Key, "style attribute")
			require.NotContains(t, strings.ToLower(a.Val), "javascript:", "%s=%q", a.Key, a.Val)
		}
		if id := attr(n, "id"); id != "" {
			require.False(t, ids[id], "duplicate id %q", id)
			ids[id] = true
		}
		if n.DataAtom == atom.Label && attr(n, "for") != "" {
			forLabel[attr(n, "for")] = true
		}
	})
	for _, img := range find(doc, atom.Img) {
		require.True(t, strings.HasPrefix(attr(img, "src"), "https://"), "img src %q", attr(img, "src"))
		_, hasAlt := attrOK(img, "alt")
		require.True(t, hasAlt, "img without alt")
	}
	walk(doc, func(n *html.Node) {
		if v := attr(n, "aria-describedby"); v != "" {
			for id := range strings.FieldsSeq(v) {
				require.True(t, ids[id], "aria-describedby %q points nowhere", id)
			}
		}
		switch n.DataAtom {
		case atom.Input, atom.Select, atom.Textarea:
			typ := attr(n, "type")
			if typ == "hidden" || typ == "submit" {
				return
			}
			id := attr(n, "id")
			labelled := (id != "" && forLabel[id]) || ancestor(n, atom.Label) != nil
			require.True(t, labelled, "input %q has no label", attr(n, "name"))
		}
	})
	for _, f := range find(doc, atom.Form) {
		require.Equal(t, "post", attr(f, "method"))
		require.NotEmpty(t, attr(f, "action"))
		csrf := inputsNamed(f, "csrf")
		require.Len(t, csrf, 1)
		require.Equal(t, "hidden", attr(csrf[0], "type"))
		for _, b := range find(f, atom.Button) {
			require.Equal(t, "submit", attr(b, "type"))
			require.Equal(t, "action", attr(b, "name"))
		}
	}
}

func walk(n *html.Node, f func(*html.Node)) {
	f(n)
	for c := n.FirstChild; c != nil; c = c.NextSibling {
		walk(c, f)
	}
}

func find(root *html.Node, a atom.Atom) []*html.Node {
	var out []*html.Node
	walk(root, func(n *html.Node) {
		if n.Type == html.ElementNode && n.DataAtom == a {
			out = append(out, n)
		}
	})
	return out
}

func attrOK(n *html.Node, key string) (string, bool) {
	for _, a := range n.Attr {
		if a.Key == key {
			return a.Val, true
		}
	}
	return "", false
}

func attr(n *html.Node, key string) string {
	v, _ := attrOK(n, key)
	return v
}

func ancestor(n *html.Node, a atom.Atom) *html.Node {
	for p := n.Parent; p != nil; p = p.Parent {
		if p.DataAtom == a {
			return p
		}
	}
	return nil
}

func inputsNamed(root *html.Node, name string) []*html.Node {
	var out []*html.Node
	for _, in := range find(root, atom.Input) {
		if attr(in, "name") == name {
			out = append(out, in)
		}
	}
	return out
}

// text is the text content of n with runs of white space collapsed.
func text(n *html.Node) string {
	var b strings.Builder
	walk(n, func(n *html.Node) {
		if n.Type == html.TextNode && ancestor(n, atom.Style) == nil {
			b.WriteString(n.Data)
		}
	})
	return strings.Join(strings.Fields(b.String()), " ")
}

func bodyText(doc *html.Node) string { return text(find(doc, atom.Body)[0]) }

func button(t *testing.T, form *html.Node, value string) *html.Node {
	t.Helper()
	for _, b := range find(form, atom.Button) {
		if attr(b, "value") == value {
			return b
		}
	}
	require.Failf(t, "no button", "value %q", value)
	return nil
}

// hiddenFields maps a form's hidden inputs by name.
func hiddenFields(form *html.Node) map[string]string {
	m := map[string]string{}
	for _, in := range find(form, atom.Input) {
		if attr(in, "type") == "hidden" {
			m[attr(in, "name")] = attr(in, "value")
		}
	}
	return m
}

func consent() pages.Consent {
	return pages.Consent{
		Brand: brand,
		Agent: pages.Agent{Name: "Example Agent", LogoURI: "https://agent.example/logo.png", ClientID: "https://agent.example/agent.json"},
		Scopes: []pages.Scope{
			{Name: "orders:read", Description: "See your orders", Changes: "none", PersonalData: ptr(false), Checked: true},
			{Name: "addresses", Description: "Edit saved addresses", Changes: "reversible", PersonalData: ptr(true), Checked: true},
			{Name: "orders:cancel", Description: "Cancel orders", Changes: "irreversible", PersonalData: ptr(false)},
			{Name: "future", Description: "Something new", Changes: "catastrophic"},
			{Name: "plain"},
		},
		Action:   "/oauth/authorize",
		Hidden:   []pages.Field{{Name: "request", Value: "req-123"}},
		CSRF:     "csrf-token",
		Username: "alice",
	}
}

func TestEveryPageRenders(t *testing.T) {
	t.Parallel()
	since := time.Date(2026, 3, 14, 15, 9, 26, 0, time.UTC)
	tests := map[string]struct {
		status int
		page   pages.Page
	}{
		"login":               {http.StatusOK, pages.Login{Brand: brand, Action: "/login", CSRF: "c"}},
		"login with error":    {http.StatusUnauthorized, &pages.Login{Brand: brand, Action: "/login", CSRF: "c", Username: "alice", Error: "Wrong username or password."}},
		"consent":             {http.StatusOK, consent()},
		"consent for device":  {http.StatusOK, func() pages.Page { c := consent(); c.UserCode = "WDJB-MJHT"; c.Error = "Try again."; return &c }()},
		"consent, no scopes":  {http.StatusOK, pages.Consent{Brand: brand, Action: "/a", CSRF: "c"}},
		"device entry":        {http.StatusOK, pages.DeviceEntry{Brand: brand, Action: "/device", CSRF: "c"}},
		"device entry, error": {http.StatusBadRequest, pages.DeviceEntry{Brand: brand, Action: "/device", CSRF: "c", UserCode: "WDJB", Error: "That code isn't right."}},
		"account":             {http.StatusOK, pages.Account{Brand: brand, Username: "alice", DisconnectAction: "/d", SignOutAction: "/s", CSRF: "c", Notice: "Done.", Agents: []pages.ConnectedAgent{{ClientID: "https://a.example/a.json", Name: "A", Scopes: []string{"x"}, Since: since}, {ClientID: "https://b.example/b.json"}}}},
		"account, no agents":  {http.StatusOK, pages.Account{Brand: brand, DisconnectAction: "/d", SignOutAction: "/s", CSRF: "c"}},
		"message":             {http.StatusOK, pages.Message{Brand: brand, Title: "You're connected", Body: "You can close this window."}},
		"error message":       {http.StatusBadRequest, &pages.Message{Brand: pages.Brand{}, Title: "Something went wrong"}},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			render(t, tt.status, tt.page)
		})
	}
}

func TestRenderZeroStatusIsOK(t *testing.T) {
	t.Parallel()
	rec := httptest.NewRecorder()
	pages.Render(rec, 0, pages.Message{Brand: brand, Title: "Hi"})
	require.Equal(t, http.StatusOK, rec.Code)
}

func TestRenderNilPageIs500(t *testing.T) {
	t.Parallel()
	for _, p := range []pages.Page{nil, (*pages.Login)(nil), (*pages.Consent)(nil)} {
		rec := httptest.NewRecorder()
		pages.Render(rec, http.StatusOK, p)
		require.Equal(t, http.StatusInternalServerError, rec.Code)
		requireHeaders(t, rec.Header(), "text/plain; charset=utf-8")
		require.NotContains(t, rec.Body.String(), "<")
		require.NotContains(t, rec.Body.String(), "pages:")
	}
}

func TestLogin(t *testing.T) {
	t.Parallel()
	r := render(t, http.StatusOK, pages.Login{
		Brand:    brand,
		Action:   "/oauth/login",
		Hidden:   []pages.Field{{Name: "request", Value: "req-1"}, {Name: "next", Value: "/x"}},
		CSRF:     "csrf-token",
		Username: "alice",
		Intro:    "Sign in to Stormline to continue connecting Example Agent.",
	})
	forms := find(r.doc, atom.Form)
	require.Len(t, forms, 1)
	f := forms[0]
	require.Equal(t, "/oauth/login", attr(f, "action"))
	require.Equal(t, map[string]string{"csrf": "csrf-token", "request": "req-1", "next": "/x"}, hiddenFields(f))

	user := inputsNamed(f, "username")
	require.Len(t, user, 1)
	require.Equal(t, "alice", attr(user[0], "value"))
	require.Equal(t, "username", attr(user[0], "autocomplete"))
	pass := inputsNamed(f, "password")
	require.Len(t, pass, 1)
	require.Equal(t, "password", attr(pass[0], "type"))
	require.Equal(t, "current-password", attr(pass[0], "autocomplete"))
	_, hasValue := attrOK(pass[0], "value")
	require.False(t, hasValue, "a password is never echoed")
	button(t, f, "login")

	body := bodyText(r.doc)
	require.Contains(t, body, "Sign in to Stormline")
	require.Contains(t, body, "Sign in to Stormline to continue connecting Example Agent.")
	require.Contains(t, body, "stormline.example")
	require.NotContains(t, r.body, `role="alert"`)
	imgs := find(r.doc, atom.Img)
	require.Len(t, imgs, 1)
	require.Equal(t, brand.LogoURI, attr(imgs[0], "src"))
}

func TestLoginError(t *testing.T) {
	t.Parallel()
	r := render(t, http.StatusUnauthorized, pages.Login{Brand: brand, Action: "/l", CSRF: "c", Error: "Wrong username or password."})
	alert := alertOf(t, r.doc)
	require.Equal(t, "Wrong username or password.", text(alert))
	for _, name := range []string{"username", "password"} {
		in := inputsNamed(r.doc, name)[0]
		require.Equal(t, attr(alert, "id"), attr(in, "aria-describedby"), name)
		require.Equal(t, "true", attr(in, "aria-invalid"), name)
	}
}

// alertOf returns the page's one role="alert" element.
func alertOf(t *testing.T, doc *html.Node) *html.Node {
	t.Helper()
	var alerts []*html.Node
	walk(doc, func(n *html.Node) {
		if attr(n, "role") == "alert" {
			alerts = append(alerts, n)
		}
	})
	require.Len(t, alerts, 1)
	require.NotEmpty(t, attr(alerts[0], "id"))
	return alerts[0]
}

func TestConsent(t *testing.T) {
	t.Parallel()
	r := render(t, http.StatusOK, consent())
	forms := find(r.doc, atom.Form)
	require.Len(t, forms, 1)
	f := forms[0]
	require.Equal(t, "/oauth/authorize", attr(f, "action"))
	require.Equal(t, map[string]string{"csrf": "csrf-token", "request": "req-123"}, hiddenFields(f))
	require.Equal(t, "Allow", text(button(t, f, "approve")))
	require.Equal(t, "Deny", text(button(t, f, "deny")))

	fieldsets := find(f, atom.Fieldset)
	require.Len(t, fieldsets, 1)
	require.Len(t, find(fieldsets[0], atom.Legend), 1)

	boxes := inputsNamed(f, "scope")
	require.Len(t, boxes, 5)
	labels := map[string]string{}
	for _, l := range find(f, atom.Label) {
		labels[attr(l, "for")] = text(l)
	}
	want := []struct {
		value   string
		checked bool
		label   []string
		notIn   []string
	}{
		{"orders:read", true, []string{"orders:read", "See your orders", "Makes no changes"}, []string{"personal data", "undone"}},
		{"addresses", true, []string{"addresses", "Edit saved addresses", "Can make changes that can be undone", "Shows or changes your personal data"}, []string{"cannot"}},
		{"orders:cancel", false, []string{"Cancel orders", "Can make changes that cannot be undone"}, []string{"personal data"}},
		{"future", false, []string{"Something new", "Can make changes that cannot be undone"}, []string{"catastrophic"}},
		{"plain", false, []string{"plain"}, []string{"changes", "personal data"}},
	}
	for i, w := range want {
		b := boxes[i]
		require.Equal(t, "checkbox", attr(b, "type"))
		require.Equal(t, w.value, attr(b, "value"))
		_, checked := attrOK(b, "checked")
		require.Equal(t, w.checked, checked, w.value)
		label := labels[attr(b, "id")]
		for _, s := range w.label {
			require.Contains(t, label, s, w.value)
		}
		for _, s := range w.notIn {
			require.NotContains(t, label, s, w.value)
		}
	}

	body := bodyText(r.doc)
	require.Contains(t, body, "Example Agent wants to access your Stormline account (stormline.example)")
	require.Equal(t, "Example Agent wants to access your Stormline account (stormline.example)", text(find(r.doc, atom.H1)[0]))
	require.Contains(t, body, "from agent.example")
	require.Contains(t, body, "Signed in as alice")
	require.Contains(t, body, "If you untick everything and press Allow, you decline.")
	require.NotContains(t, body, "matches the one shown")
	srcs := []string{}
	for _, img := range find(r.doc, atom.Img) {
		srcs = append(srcs, attr(img, "src"))
	}
	require.Equal(t, []string{brand.LogoURI, "https://agent.example/logo.png"}, srcs)
}

func TestConsentDevice(t *testing.T) {
	t.Parallel()
	c := consent()
	c.UserCode = "WDJB-MJHT"
	c.Error = "Choose again."
	r := render(t, http.StatusOK, c)
	require.Contains(t, bodyText(r.doc), "Check that this code matches the one shown by your agent: WDJB-MJHT")
	alert := alertOf(t, r.doc)
	require.Equal(t, attr(alert, "id"), attr(find(r.doc, atom.Fieldset)[0], "aria-describedby"))
}

func TestConsentAgentHost(t *testing.T) {
	t.Parallel()
	tests := map[string]struct{ name, clientID, want string }{
		"unnamed":      {"", "https://agent.example/agent.json", "An unnamed agent wants to access"},
		"blank name":   {"  ", "https://agent.example/agent.json", "An unnamed agent wants to access"},
		"look-alike":   {"Example Agent", "https://agent-example.evil.example/agent.json", "from agent-example.evil.example"},
		"port":         {"A", "https://agent.example:8443/agent.json", "from agent.example:8443"},
		"upper case":   {"A", "https://AGENT.Example/agent.json", "from agent.example"},
		"homograph":    {"A", "https://\u0430gent.example/agent.json", "from xn--gent-43d.example"},
		"ipv6":         {"A", "https://[::1]/agent.json", "from [::1]"},
		"not a url":    {"A", "agent", "from agent"},
		"userinfo":     {"A", "https://agent.example@evil.example/agent.json", "from evil.example"},
		"path spoofed": {"A", "https://evil.example/agent.example/agent.json", "from evil.example"},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			c := consent()
			c.Agent = pages.Agent{Name: tt.name, ClientID: tt.clientID}
			r := render(t, http.StatusOK, c)
			require.Contains(t, bodyText(r.doc), tt.want)
			require.Len(t, find(r.doc, atom.Img), 1, "only the Company's logo")
		})
	}
}

func TestDeviceEntry(t *testing.T) {
	t.Parallel()
	r := render(t, http.StatusOK, pages.DeviceEntry{Brand: brand, Action: "/oauth/device", CSRF: "csrf-token", UserCode: "WDJB-MJHT"})
	f := find(r.doc, atom.Form)
	require.Len(t, f, 1)
	require.Equal(t, "/oauth/device", attr(f[0], "action"))
	require.Equal(t, map[string]string{"csrf": "csrf-token"}, hiddenFields(f[0]))
	in := inputsNamed(f[0], "user_code")
	require.Len(t, in, 1)
	for k, v := range map[string]string{"value": "WDJB-MJHT", "autocomplete": "off", "autocapitalize": "characters", "spellcheck": "false", "inputmode": "text"} {
		require.Equal(t, v, attr(in[0], k), k)
	}
	require.Equal(t, "Continue", text(button(t, f[0], "continue")))
	require.Contains(t, bodyText(r.doc), "Never enter a code someone else sent you")
	require.NotContains(t, r.body, `role="alert"`)
}

func TestDeviceEntryError(t *testing.T) {
	t.Parallel()
	r := render(t, http.StatusBadRequest, pages.DeviceEntry{Brand: brand, Action: "/d", CSRF: "c", Error: "That code isn't right."})
	alert := alertOf(t, r.doc)
	in := inputsNamed(r.doc, "user_code")[0]
	require.Contains(t, strings.Fields(attr(in, "aria-describedby")), attr(alert, "id"))
	require.Equal(t, "true", attr(in, "aria-invalid"))
}

func TestAccount(t *testing.T) {
	t.Parallel()
	r := render(t, http.StatusOK, pages.Account{
		Brand:    brand,
		Username: "alice",
		Agents: []pages.ConnectedAgent{
			{ClientID: "https://agent.example/agent.json", Name: "Example Agent", Scopes: []string{"orders:read", "addresses"}, Since: time.Date(2026, 3, 14, 23, 30, 0, 0, time.UTC)},
			{ClientID: "https://other.example/a.json"},
		},
		DisconnectAction: "/account/disconnect",
		SignOutAction:    "/account/signout",
		CSRF:             "csrf-token",
		Notice:           "Old Agent was disconnected.",
	})
	forms := find(r.doc, atom.Form)
	require.Len(t, forms, 3)
	for i, clientID := range []string{"https://agent.example/agent.json", "https://other.example/a.json"} {
		f := forms[i]
		require.Equal(t, "/account/disconnect", attr(f, "action"))
		require.Equal(t, map[string]string{"csrf": "csrf-token", "client_id": clientID}, hiddenFields(f))
		require.Equal(t, "Disconnect", text(button(t, f, "disconnect")))
		require.Contains(t, text(f), "loses access to your Stormline account")
	}
	require.Equal(t, "/account/signout", attr(forms[2], "action"))
	require.Equal(t, map[string]string{"csrf": "csrf-token"}, hiddenFields(forms[2]))
	button(t, forms[2], "signout")

	items := find(r.doc, atom.Li)
	require.Len(t, items, 2)
	first := text(items[0])
	require.Contains(t, first, "Example Agent")
	require.Contains(t, first, "from agent.example")
	require.Contains(t, first, "orders:read, addresses")
	require.Contains(t, first, "Connected since 14 March 2026")
	require.Equal(t, "2026-03-14", attr(find(items[0], atom.Time)[0], "datetime"))
	second := text(items[1])
	require.Contains(t, second, "An unnamed agent")
	require.Contains(t, second, "from other.example")
	require.NotContains(t, second, "since")

	body := bodyText(r.doc)
	require.Contains(t, body, "Signed in as alice")
	require.Contains(t, body, "Old Agent was disconnected.")
	require.Contains(t, r.body, `role="status"`)
}

func TestAccountWithoutAgents(t *testing.T) {
	t.Parallel()
	r := render(t, http.StatusOK, pages.Account{Brand: brand, SignOutAction: "/s", DisconnectAction: "/d", CSRF: "c"})
	require.Contains(t, bodyText(r.doc), "No agents are connected")
	require.Len(t, find(r.doc, atom.Form), 1)
}

func TestMessage(t *testing.T) {
	t.Parallel()
	r := render(t, http.StatusOK, pages.Message{Brand: brand, Title: "You declined", Body: "Example Agent won't get access.\nYou can close this window."})
	require.Equal(t, "You declined", text(find(r.doc, atom.H1)[0]))
	require.Contains(t, bodyText(r.doc), "You can close this window.")
	require.Contains(t, text(find(r.doc, atom.Title)[0]), "You declined")
	require.Empty(t, find(r.doc, atom.Form))
}

// hostile are strings that would break out of text, attributes or URLs if
// they were not escaped.
var hostile = []string{
	`<script>alert(1)</script>`,
	`"><script>alert(1)</script>`,
	`' onmouseover='alert(1)`,
	`</style><script>alert(1)</script>`,
	`{{.CSRF}}`,
}

// badImages are logo URLs that must be left out.
var badImages = []string{
	"javascript:alert(1)",
	"JavaScript:alert(1)",
	" javascript:alert(1)",
	"data:image/svg+xml,<svg onload=alert(1)>",
	"http://agent.example/logo.png",
	"//agent.example/logo.png",
	"/logo.png",
	"https://user:pass@agent.example/logo.png",
	`https:alert(1)`,
}

func TestHostileStrings(t *testing.T) {
	t.Parallel()
	for i, s := range hostile {
		logo := badImages[i%len(badImages)]
		b := pages.Brand{CompanyName: s, Domain: s, LogoURI: logo}
		hidden := []pages.Field{{Name: s, Value: s}}
		all := map[string]pages.Page{
			"login":   pages.Login{Brand: b, Action: s, Hidden: hidden, CSRF: s, Username: s, Error: s, Intro: s},
			"consent": pages.Consent{Brand: b, Agent: pages.Agent{Name: s, LogoURI: badImages[(i+1)%len(badImages)], ClientID: "https://agent.example/" + s}, Scopes: []pages.Scope{{Name: s, Description: s, Changes: s}}, Action: s, Hidden: hidden, CSRF: s, Username: s, UserCode: s, Error: s},
			"device":  pages.DeviceEntry{Brand: b, Action: s, CSRF: s, UserCode: s, Error: s},
			"account": pages.Account{Brand: b, Username: s, Agents: []pages.ConnectedAgent{{ClientID: s, Name: s, Scopes: []string{s}}}, DisconnectAction: s, SignOutAction: s, CSRF: s, Notice: s},
			"message": pages.Message{Brand: b, Title: s, Body: s},
		}
		for name, p := range all {
			r := render(t, http.StatusOK, p) // checkDocument: no script, no on*, no javascript:
			require.NotContains(t, strings.ToLower(r.body), "<script", "%s %q", name, s)
			require.NotContains(t, r.body, "<svg", "%s %q", name, s)
			require.Empty(t, find(r.doc, atom.Img), "%s: bad logos are left out", name)
			// Escaped, not mangled: the text and values read back as given.
			require.Contains(t, bodyText(r.doc), strings.Join(strings.Fields(s), " "), name)
			walk(r.doc, func(n *html.Node) {
				if n.DataAtom == atom.Input && attr(n, "name") == "csrf" {
					require.Equal(t, s, attr(n, "value"), name)
				}
			})
		}
	}
}

func TestHostileHiddenFieldsRoundTrip(t *testing.T) {
	t.Parallel()
	fields := []pages.Field{}
	for _, s := range hostile {
		fields = append(fields, pages.Field{Name: "n" + s, Value: s})
	}
	r := render(t, http.StatusOK, pages.Login{Brand: brand, Action: "/l", CSRF: "c", Hidden: fields})
	got := hiddenFields(find(r.doc, atom.Form)[0])
	for _, f := range fields {
		require.Equal(t, f.Value, got[f.Name])
	}
}

func TestFormActionIsNotJavaScript(t *testing.T) {
	t.Parallel()
	r := render(t, http.StatusOK, pages.Login{Brand: brand, Action: "javascript:alert(1)", CSRF: "c"})
	require.NotContains(t, attr(find(r.doc, atom.Form)[0], "action"), "javascript")
}
