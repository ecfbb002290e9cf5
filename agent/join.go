package agent

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/chromedp/chromedp"
)

// JoinBrowser joins the agent's browser to this Session (spec 6): the
// browser loads the browser-session page, the agent authorizes the code
// read from that page with the Session header (and token when signed
// in), and the browser submits the form to get the Session's cookie.
func (s *Session) JoinBrowser(ctx context.Context) (*Page, error) {
	endpoint := s.Company.BrowserSessionEndpoint()
	if endpoint == "" {
		return nil, errors.New("agent: the Company lists no web.browser_session_endpoint")
	}
	b, err := s.agent.Browser()
	if err != nil {
		return nil, err
	}
	sid := s.CurrentSID()
	s.agent.Recorder.Note("Join the browser to Session %s (spec 6)", sid)
	page, err := b.Load(ctx, chromedp.Navigate(endpoint))
	if err != nil {
		return nil, err
	}
	if page.Status != http.StatusOK {
		return nil, fmt.Errorf("agent: browser-session page answered %d", page.Status)
	}
	// Step 2: the code only from the page this browser loaded.
	code, err := Run(ctx, b, chromedp.Evaluate[string](`(() => { const i = document.querySelector('form input[name="code"]'); return i ? i.value : ""; })()`))
	if err != nil {
		return nil, err
	}
	if code == "" {
		return nil, errors.New("agent: the browser-session page has no code")
	}
	resp, err := s.Do(ctx, Request{Method: http.MethodPost, URL: strings.TrimSuffix(endpoint, "/") + "/authorize", JSON: map[string]string{"code": code}})
	if err != nil {
		return nil, err
	}
	if resp.Status != http.StatusNoContent {
		return nil, fmt.Errorf("agent: authorize answered %d %s", resp.Status, resp.Error())
	}
	// Step 3: the browser submits the form.
	page, err = b.Load(ctx, clickJS(`form input[name="code"]`))
	if err != nil {
		return nil, err
	}
	// Success redirects to a page of the website (whatever that page
	// answers); failure is an error page at the endpoint itself.
	if page.Status >= 400 && strings.TrimSuffix(page.URL, "/") == strings.TrimSuffix(endpoint, "/") {
		return page, fmt.Errorf("agent: the join's form answered %d", page.Status)
	}
	s.mu.Lock()
	if s.SID != sid {
		s.mu.Unlock()
		return page, errors.New("agent: the Session ended while the browser joined it")
	}
	b.sid = sid
	s.joined = true
	s.mu.Unlock()
	return page, nil
}

// Browse opens a page of the Company's website in the joined browser.
func (s *Session) Browse(ctx context.Context, pageURL string) (*Page, error) {
	return s.BrowserLoad(ctx, chromedp.Navigate(pageURL))
}

// BrowserLoad runs browser steps that load a document, such as a click
// on a form's button, in the browser joined to this Session.
func (s *Session) BrowserLoad(ctx context.Context, steps ...chromedp.Action[chromedp.Void]) (*Page, error) {
	b, err := s.agent.Browser()
	if err != nil {
		return nil, err
	}
	if joined, sid := s.joinedAs(); s.Company.BrowserSessionEndpoint() != "" && (!joined || b.sid != sid) {
		return nil, errors.New("agent: join the browser to this Session first (spec 6)")
	}
	return b.Load(ctx, steps...)
}
