package agent

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/chromedp/chromedp"
	"github.com/dunglas/httpsfv"
)

// OperationRef reads the Poppy-Operation header of a page the agent's own
// browser received (extension 4): the ref, only when sid names the
// Session this browser is joined to; "" otherwise.
func (s *Session) OperationRef(p *Page) string {
	h, ok := p.Headers["poppy-operation"]
	joined, sid := s.joinedAs()
	if !ok || !joined {
		return ""
	}
	d, err := httpsfv.UnmarshalDictionary([]string{h})
	if err != nil {
		return ""
	}
	str := func(name string) string {
		m, ok := d.Get(name)
		if !ok {
			return ""
		}
		it, ok := m.(httpsfv.Item)
		if !ok {
			return ""
		}
		v, _ := it.Value.(string)
		return v
	}
	if str("sid") != sid {
		return ""
	}
	ref := str("ref")
	if !inAlphabet(ref, 2048, ".") {
		return ""
	}
	return ref
}

// ApproveWebsite gets the operation of a website's ref at the Company's
// operations endpoint, has approver decide, and sends the approval there
// (extension 4, 6). The approval is then recorded; the browser must make
// its request again.
func (s *Session) ApproveWebsite(ctx context.Context, ref string, expected map[string]any, approver Approver) (*OperationResult, error) {
	ok, endpoint := s.Company.Operations()
	if !ok || endpoint == "" {
		return nil, errors.New("agent: the Company lists no operations endpoint")
	}
	var last *Response
	res, err := s.approveLoop(ctx, "web", expected, approver, func(ctx context.Context, ap *Approval) (answer, error) {
		r := Request{Method: http.MethodPost, URL: endpoint, JSON: map[string]string{"ref": ref}}
		if ap != nil {
			h, err := ap.Header()
			if err != nil {
				return answer{}, err
			}
			r.Header = http.Header{"Poppy-Approval": {h}}
		}
		resp, err := s.Do(ctx, r)
		if err != nil {
			return failedAttempt(ap, err)
		}
		last = resp
		if resp.Status == http.StatusBadRequest {
			return answer{}, fmt.Errorf("agent: the operations endpoint refused the ref: %s", resp.Error())
		}
		return classifyHTTP(resp)
	})
	if res != nil {
		res.Response = last
	}
	return res, err
}

// OperationStatus looks up an approved website operation by its ref
// (extension 6): "approved", "performing" or "performed".
func (s *Session) OperationStatus(ctx context.Context, ref string) (string, error) {
	_, endpoint := s.Company.Operations()
	if endpoint == "" {
		return "", errors.New("agent: the Company lists no operations endpoint")
	}
	resp, err := s.Do(ctx, Request{Method: http.MethodPost, URL: endpoint, JSON: map[string]string{"ref": ref}})
	if err != nil {
		return "", err
	}
	var st struct {
		Status string `json:"status"`
	}
	if resp.Status != http.StatusOK || resp.Decode(&st) != nil {
		return "", fmt.Errorf("agent: no status for the ref: %d %s", resp.Status, resp.Error())
	}
	return st.Status, nil
}

// WebAction runs a browser action on the website (a form submission).
// When the website answers with an operation for this Session, the agent
// approves it at the endpoint and has the browser repeat the request with
// again (nil presses the waiting page's Continue button).
func (s *Session) WebAction(ctx context.Context, action, again chromedp.Action[chromedp.Void], expected map[string]any, approver Approver) (*Page, *OperationResult, error) {
	page, err := s.BrowserLoad(ctx, action)
	if err != nil {
		return nil, nil, err
	}
	ref := s.OperationRef(page)
	if ref == "" {
		return page, nil, nil
	}
	s.agent.Recorder.Note("The website asks for approval: ref from Poppy-Operation")
	res, err := s.ApproveWebsite(ctx, ref, expected, approver)
	if err != nil {
		return page, res, err
	}
	if again == nil {
		again = clickJS(`button, input[type=submit]`)
	}
	page, err = s.BrowserLoad(ctx, again)
	return page, res, err
}
