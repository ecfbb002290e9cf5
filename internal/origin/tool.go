package origin

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"

	"github.com/poppyhost/poppyhost/internal/operations"
	"github.com/poppyhost/poppyhost/internal/registry"
	"github.com/poppyhost/poppyhost/internal/tenant"
	"github.com/poppyhost/poppyhost/internal/verified"
)

// MaxToolResponseBytes bounds a tool origin's answer.
const MaxToolResponseBytes = 4 << 20

// Failure is a call the origin did not answer usably. Reason says why,
// for the caller to show; Err is logged, never shown.
type Failure struct {
	Reason string
	Err    error
}

func (f *Failure) Error() string { return f.Reason + ": " + f.Err.Error() }

func (f *Failure) Unwrap() error { return f.Err }

// CallTool POSTs a call's arguments to t.URL with Poppy-Verified stating
// facts, within the tool's timeout, and reads the answer. A call the
// origin did not answer usably is a *Failure; any other error is ours.
func (c *Caller) CallTool(ctx context.Context, co *tenant.Company, t *registry.Tool, facts *verified.Facts,
	args []byte) (*operations.Response, error) {
	ctx, cancel := context.WithTimeout(ctx, ToolTimeout(t))
	defer cancel()
	target, err := url.Parse(t.URL)
	if err != nil {
		return nil, &Failure{"the tool's URL is not valid", err}
	}
	jwt, err := c.Sign(ctx, co, verified.Claims{Audience: t.URL, Facts: *facts,
		Tool: t.Name, Method: http.MethodPost, Path: toolPath(target)})
	if err != nil {
		return nil, err
	}
	// A new request: nothing of the Personal Agent's (Authorization,
	// Poppy-Session, cookies) reaches the origin.
	out, err := http.NewRequestWithContext(ctx, http.MethodPost, t.URL, bytes.NewReader(args))
	if err != nil {
		return nil, &Failure{"the tool's URL is not valid", err}
	}
	out.Header.Set("Content-Type", "application/json")
	out.Header.Set("Accept", "application/json")
	out.Header.Set(verified.Header, jwt)
	resp, err := c.tools.Do(out)
	if err != nil {
		return nil, unanswered(ctx, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, MaxToolResponseBytes+1))
	if err != nil {
		return nil, unanswered(ctx, err)
	}
	if len(body) > MaxToolResponseBytes {
		return nil, &Failure{fmt.Sprintf("the Company's origin answered with more than %d bytes", MaxToolResponseBytes),
			errResponseTooLarge}
	}
	return &operations.Response{Status: resp.StatusCode, ContentType: resp.Header.Get("Content-Type"), Body: body}, nil
}

// unanswered is the failure of a call the origin did not answer.
func unanswered(ctx context.Context, err error) *Failure {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return &Failure{"the Company's origin did not answer in time", err}
	}
	return &Failure{"the Company's origin could not be reached", err}
}

// toolPath is the escaped path of a tool's URL, as Poppy-Verified states it.
func toolPath(u *url.URL) string {
	if p := u.EscapedPath(); p != "" {
		return p
	}
	return "/"
}

// ToolTimeout bounds a call of t.
func ToolTimeout(t *registry.Tool) time.Duration {
	timeout := time.Duration(t.TimeoutSeconds) * time.Second
	if timeout <= 0 {
		timeout = registry.DefaultTimeoutSeconds * time.Second
	}
	return min(timeout, registry.MaxTimeoutSeconds*time.Second)
}
