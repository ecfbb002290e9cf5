package peers

import (
	"bytes"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/net/html"
)

// Browser is a cookie-keeping client that fills in and submits the
// issuer's HTML forms without following redirects.
type Browser struct {
	Client *http.Client
	t      testing.TB
}

// NewBrowser returns a new Browser sending its requests through tr.
func NewBrowser(t testing.TB, tr http.RoundTripper) *Browser {
	jar, err := cookiejar.New(nil)
	require.NoError(t, err)
	return &Browser{t: t, Client: &http.Client{Transport: tr, Jar: jar,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

// Page is a fetched page.
type Page struct {
	URL    *url.URL
	Status int
	Header http.Header
	Body   string
	doc    *html.Node
}

// Get fetches rawURL.
func (b *Browser) Get(rawURL string) *Page {
	b.t.Helper()
	resp, err := b.Client.Get(rawURL)
	require.NoError(b.t, err)
	return b.page(resp)
}

func (b *Browser) page(resp *http.Response) *Page {
	b.t.Helper()
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(b.t, err)
	doc, err := html.Parse(bytes.NewReader(raw))
	require.NoError(b.t, err)
	return &Page{URL: resp.Request.URL, Status: resp.StatusCode, Header: resp.Header, Body: string(raw), doc: doc}
}

// Submit submits the page's form that has a button name="action" with
// value action: its hidden fields and checked boxes, with set replacing
// fields (a nil value removes a field). It returns the response page.
func (b *Browser) Submit(p *Page, action string, set map[string][]string) *Page {
	b.t.Helper()
	form := findForm(p.doc, action)
	require.NotNil(b.t, form, "no form with action %q in page:\n%s", action, p.Body)
	values := url.Values{}
	var walk func(n *html.Node)
	walk = func(n *html.Node) {
		if n.Type == html.ElementNode && n.Data == "input" {
			name, typ := attr(n, "name"), attr(n, "type")
			_, checked := attrOK(n, "checked")
			switch {
			case name == "":
			case typ == "hidden", typ == "text", typ == "":
				values.Add(name, attr(n, "value"))
			case typ == "checkbox" && checked:
				values.Add(name, attr(n, "value"))
			}
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c)
		}
	}
	walk(form)
	values.Set("action", action)
	for k, v := range set {
		if v == nil {
			values.Del(k)
		} else {
			values[k] = v
		}
	}
	target, err := p.URL.Parse(attr(form, "action"))
	require.NoError(b.t, err)
	resp, err := b.Client.PostForm(target.String(), values)
	require.NoError(b.t, err)
	return b.page(resp)
}

// Location is the page's redirect target.
func (p *Page) Location() string { return p.Header.Get("Location") }

// Field returns the value of the first input named name, or "".
func (p *Page) Field(name string) string {
	var found string
	var walk func(n *html.Node) bool
	walk = func(n *html.Node) bool {
		if n.Type == html.ElementNode && n.Data == "input" && attr(n, "name") == name {
			found = attr(n, "value")
			return true
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			if walk(c) {
				return true
			}
		}
		return false
	}
	walk(p.doc)
	return found
}

func findForm(n *html.Node, action string) *html.Node {
	if n.Type == html.ElementNode && n.Data == "form" && hasButton(n, action) {
		return n
	}
	for c := n.FirstChild; c != nil; c = c.NextSibling {
		if f := findForm(c, action); f != nil {
			return f
		}
	}
	return nil
}

func hasButton(n *html.Node, action string) bool {
	if n.Type == html.ElementNode && (n.Data == "button" || n.Data == "input") &&
		attr(n, "name") == "action" && attr(n, "value") == action {
		return true
	}
	for c := n.FirstChild; c != nil; c = c.NextSibling {
		if hasButton(c, action) {
			return true
		}
	}
	return false
}

func attr(n *html.Node, key string) string {
	v, _ := attrOK(n, key)
	return v
}

func attrOK(n *html.Node, key string) (string, bool) {
	for _, a := range n.Attr {
		if a.Key == key {
			return a.Val, true
		}
	}
	return "", false
}
