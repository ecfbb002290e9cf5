package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"

	"github.com/chromedp/chromedp"

	"github.com/poppyhost/poppyhost/agent"
)

// jacket is the demo's exchange: the order, the item and the replacement.
type jacket struct{ order, item, sku string }

func (j jacket) terms() map[string]any {
	return map[string]any{"order_id": j.order, "item_id": j.item, "replacement_sku": j.sku}
}

// viaAPI makes the exchange through the Company's orders API (spec 7,
// extension 4 and 6 at APIs) and shows the order afterwards.
func viaAPI(ctx context.Context, s *agent.Session, j jacket, approver agent.Approver, out io.Writer) error {
	desc := s.Company.API("openapi")
	if desc == "" {
		return errors.New("the Company lists no OpenAPI description")
	}
	base, err := s.Company.OpenAPIBase(ctx, desc)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "\n   POST %s/orders/%s/exchanges\n", base, j.order)
	res, err := s.Call(ctx, agent.Request{
		Method: http.MethodPost, URL: base + "/orders/" + j.order + "/exchanges",
		JSON: map[string]string{"item_id": j.item, "replacement_sku": j.sku},
	}, j.terms(), approver)
	if err := reportOutcome(out, res, err); err != nil {
		return err
	}
	resp, err := s.Do(ctx, agent.Request{Method: http.MethodGet, URL: base + "/orders/" + j.order})
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "   the order now: %d %s\n", resp.Status, resp.Body)
	return nil
}

// freshOrder asks the demo shop's orders API for a new copy of the
// jacket's order for the signed-in account (POST /demo-orders,
// docs/demo.md), so that each run of the story has a jacket to exchange.
func freshOrder(ctx context.Context, s *agent.Session, out io.Writer) (string, error) {
	desc := s.Company.API("openapi")
	if desc == "" {
		return "", errors.New("the Company lists no OpenAPI description: give --order")
	}
	base, err := s.Company.OpenAPIBase(ctx, desc)
	if err != nil {
		return "", err
	}
	resp, err := s.Do(ctx, agent.Request{Method: http.MethodPost, URL: base + "/demo-orders", JSON: map[string]any{}})
	if err != nil {
		return "", err
	}
	var order struct {
		ID string `json:"id"`
	}
	if resp.Status != http.StatusCreated || resp.Decode(&order) != nil || order.ID == "" {
		return "", fmt.Errorf("POST %s/demo-orders answered %d %s: give --order", base, resp.Status, resp.Body)
	}
	fmt.Fprintf(out, "   the shop gave this run a fresh copy of the jacket's order: %s\n", order.ID)
	return order.ID, nil
}

// viaMCP makes the exchange with the Company's MCP tool.
func viaMCP(ctx context.Context, s *agent.Session, j jacket, approver agent.Approver, out io.Writer) error {
	server := s.Company.API("mcp")
	if server == "" {
		return errors.New("the Company lists no MCP server")
	}
	if err := s.MCPInitialize(ctx, server); err != nil {
		return err
	}
	fmt.Fprintf(out, "\n   tools/call exchange_item at %s\n", server)
	result, res, err := s.CallTool(ctx, server, "exchange_item", j.terms(), j.terms(), approver)
	if result != nil {
		fmt.Fprintf(out, "   tool result (isError %v): %s\n", result.IsError, result.Text())
	}
	return reportOutcome(out, res, err)
}

// viaWeb joins the browser and submits the website's exchange form; the
// operation comes back in Poppy-Operation and is approved at the
// Company's operations endpoint, then the browser continues.
func viaWeb(ctx context.Context, s *agent.Session, j jacket, approver agent.Approver, out io.Writer) error {
	if _, err := s.JoinBrowser(ctx); err != nil {
		return err
	}
	form := s.Company.Origin + "/orders/" + j.order + "/exchange?item=" + url.QueryEscape(j.item)
	page, err := s.Browse(ctx, form)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "\n   the browser opened %s: %d\n", form, page.Status)
	if page.Status != http.StatusOK {
		return fmt.Errorf("the exchange page answered %d", page.Status)
	}
	page, res, err := s.WebAction(ctx, submitForm(j.sku), nil, j.terms(), approver)
	if err := reportOutcome(out, res, err); err != nil {
		return err
	}
	fmt.Fprintf(out, "   the browser is at %s: %d\n", page.URL, page.Status)
	return nil
}

// submitForm picks the replacement and presses the form's submit button.
func submitForm(sku string) chromedp.Action[chromedp.Void] {
	return chromedp.Steps(
		chromedp.Click(fmt.Sprintf(`input[name="replacement_sku"][value=%q]`, sku)),
		chromedp.Click(`form button[type=submit], form button:not([type]), form input[type=submit]`),
	)
}

// reportOutcome prints how an action that may need approval ended.
func reportOutcome(out io.Writer, res *agent.OperationResult, err error) error {
	var declined *agent.Declined
	switch {
	case errors.As(err, &declined):
		fmt.Fprintf(out, "   declined by the Company: %s (not performed; not sent again)\n", declined.Reason)
		return nil
	case errors.Is(err, agent.ErrNotApproved):
		fmt.Fprintln(out, "   not approved: nothing performed")
		return nil
	case err != nil:
		return err
	}
	if res != nil && res.Approval != nil {
		fmt.Fprintf(out, "   approved by the %s after %d request(s)\n", res.Approval.Approver, res.Attempts)
	}
	if res != nil && res.Response != nil {
		fmt.Fprintf(out, "   answer: %d %s\n", res.Response.Status, res.Response.Body)
	}
	return nil
}
