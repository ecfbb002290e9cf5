package loadgen

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"strings"

	"golang.org/x/net/html"
)

var errNoToken = errors.New("loadgen: the token endpoint answered without an access token")

// grant is a signed-in User's tokens.
type grant struct {
	AccessToken  string `json:"access_token"`
	RefreshToken string `json:"refresh_token"`
}

// signIn creates an account and signs it in with Direct Sign-In (spec
// 4.2) as a browser without JavaScript would: the authorization page, the
// login form, the consent form, and the code exchanged at the token
// endpoint with a client assertion.
// n numbers the User, whose browser comes from its own address: the
// issuer allows few sign-ins a minute from one.
func (e *env) signIn(ctx context.Context, n int) (*grant, error) {
	username := fmt.Sprintf("user%d", n)
	password := "loadgen-" + randomID(12)
	if err := e.admin(ctx, http.MethodPost, "/admin/v1/companies/"+slug+"/accounts",
		map[string]string{"username": username, "password": password}, nil); err != nil {
		return nil, err
	}
	jar, err := cookiejar.New(nil)
	if err != nil {
		return nil, err
	}
	addr := fmt.Sprintf("10.%d.%d.%d", n>>16&255, n>>8&255, n&255)
	browser := &http.Client{Transport: forwarded{base: e.client.Transport, addr: addr}, Jar: jar, Timeout: e.client.Timeout,
		CheckRedirect: e.client.CheckRedirect}
	verifier := randomID(32)
	sum := sha256.Sum256([]byte(verifier))
	q := url.Values{"response_type": {"code"}, "client_id": {e.agent.clientID}, "redirect_uri": {e.agent.redirectURI},
		"scope": {scopeRead}, "state": {randomID(16)}, "code_challenge": {b64.EncodeToString(sum[:])},
		"code_challenge_method": {"S256"}}
	page, err := get(ctx, browser, issuer+"/oauth/authorize?"+q.Encode())
	if err != nil {
		return nil, err
	}
	if page, err = page.submit(ctx, browser, "login", url.Values{"username": {username}, "password": {password}}); err != nil {
		return nil, err
	}
	if page, err = page.submit(ctx, browser, "approve", url.Values{"scope": {scopeRead}}); err != nil {
		return nil, err
	}
	if page.status != http.StatusSeeOther {
		return nil, fmt.Errorf("loadgen: consent answered %d, not a redirect", page.status)
	}
	back, err := url.Parse(page.location)
	if err != nil {
		return nil, err
	}
	return e.token(ctx, url.Values{"grant_type": {"authorization_code"}, "code": {back.Query().Get("code")},
		"redirect_uri": {e.agent.redirectURI}, "code_verifier": {verifier}})
}

// forwarded sends requests as a proxy would for a client at addr.
type forwarded struct {
	base http.RoundTripper
	addr string
}

func (f forwarded) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("X-Forwarded-For", f.addr)
	return f.base.RoundTrip(r)
}

// tokenForm is a token request's form with the client's authentication.
func (e *env) tokenForm(form url.Values) (url.Values, error) {
	assertion, err := e.agent.clientAssertion(issuer)
	if err != nil {
		return nil, err
	}
	form.Set("client_id", e.agent.clientID)
	form.Set("client_assertion_type", "urn:ietf:params:oauth:client-assertion-type:jwt-bearer")
	form.Set("client_assertion", assertion)
	return form, nil
}

// token sends a token request and returns the tokens.
func (e *env) token(ctx context.Context, form url.Values) (*grant, error) {
	form, err := e.tokenForm(form)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, issuer+"/oauth/token", strings.NewReader(form.Encode()))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := e.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("loadgen: token endpoint: %d %s", resp.StatusCode, b)
	}
	var g grant
	if err := json.Unmarshal(b, &g); err != nil {
		return nil, err
	}
	if g.AccessToken == "" {
		return nil, errNoToken
	}
	return &g, nil
}

// page is a fetched HTML page.
type page struct {
	url      *url.URL
	status   int
	location string
	doc      *html.Node
}

func get(ctx context.Context, c *http.Client, u string) (*page, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	return fetch(c, req)
}

func fetch(c *http.Client, req *http.Request) (*page, error) {
	resp, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	doc, err := html.Parse(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return nil, err
	}
	return &page{url: resp.Request.URL, status: resp.StatusCode, location: resp.Header.Get("Location"), doc: doc}, nil
}

// submit posts the page's form with its hidden fields, set and
// action=action.
func (p *page) submit(ctx context.Context, c *http.Client, action string, set url.Values) (*page, error) {
	form := find(p.doc, func(n *html.Node) bool { return n.Data == "form" })
	if form == nil || p.status != http.StatusOK {
		return nil, fmt.Errorf("loadgen: no form to %s on a %d page", action, p.status)
	}
	values := url.Values{}
	find(form, func(n *html.Node) bool {
		if n.Data == "input" && attr(n, "type") == "hidden" {
			values.Add(attr(n, "name"), attr(n, "value"))
		}
		return false
	})
	for k, v := range set {
		values[k] = v
	}
	values.Set("action", action)
	target, err := p.url.Parse(attr(form, "action"))
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, target.String(), strings.NewReader(values.Encode()))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	return fetch(c, req)
}

// find returns the first element under n that match accepts, in document
// order.
func find(n *html.Node, match func(*html.Node) bool) *html.Node {
	if n.Type == html.ElementNode && match(n) {
		return n
	}
	for c := n.FirstChild; c != nil; c = c.NextSibling {
		if f := find(c, match); f != nil {
			return f
		}
	}
	return nil
}

func attr(n *html.Node, key string) string {
	for _, a := range n.Attr {
		if a.Key == key {
			return a.Val
		}
	}
	return ""
}
