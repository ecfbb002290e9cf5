package doctor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strings"
	"time"

	"github.com/poppyhost/poppyhost/internal/safehttp"
)

// Status is a check's outcome.
type Status string

// The outcomes of a check.
const (
	Pass Status = "pass"
	Fail Status = "fail"
	// Skip says an earlier check failed to give this one its input.
	Skip Status = "skip"
)

// Result is one check's outcome, with the spec section it checks and, on
// failure, what is wrong and a hint at the fix.
type Result struct {
	Check   string `json:"check"`
	Section string `json:"section"`
	Status  Status `json:"status"`
	Detail  string `json:"detail,omitempty"`
	Hint    string `json:"hint,omitempty"`
}

// Report is every check's result for one domain.
type Report struct {
	Domain  string   `json:"domain"`
	OK      bool     `json:"ok"`
	Results []Result `json:"results"`
}

// Options configure Run.
type Options struct {
	// Client makes every request; its Options carry the trusted roots and
	// the address rules.
	Client *safehttp.Client
	// Timeout bounds each check; default 10s.
	Timeout time.Duration
}

// check is one named check of a run.
type check struct {
	name, section, hint string
	run                 func(ctx context.Context, s *state) (skip bool, err error)
}

// state carries what earlier checks found to later ones.
type state struct {
	client *safehttp.Client
	domain string // host[:port] as given
	origin string // https://domain
	// poppy and poppyErr are the answer to checkTLS's fetch of
	// poppy.json, which checkPoppyJSON reads.
	poppy    *safehttp.Response
	poppyErr error
	doc      *poppyJSON
	issuer   string
	// resourceChecked says the protected resource metadata was read, or
	// its absence seen.
	resourceChecked bool
	as              *asMetadata
}

// Run checks the Company at domain (a host, with a port if not 443).
func Run(ctx context.Context, domain string, o Options) *Report {
	timeout := o.Timeout
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	domain = strings.ToLower(strings.TrimSuffix(strings.TrimPrefix(domain, "https://"), "/"))
	s := &state{client: o.Client, domain: domain, origin: "https://" + domain}
	rep := &Report{Domain: domain, OK: true}
	for _, c := range checks {
		cctx, cancel := context.WithTimeout(ctx, timeout)
		skip, err := c.run(cctx, s)
		cancel()
		r := Result{Check: c.name, Section: c.section, Status: Pass}
		switch {
		case skip:
			r.Status = Skip
			if err != nil {
				r.Detail = err.Error()
			}
		case err != nil:
			r.Status, r.Detail, r.Hint = Fail, err.Error(), c.hint
			if h, ok := errors.AsType[*hinted](err); ok {
				r.Hint = h.hint
			}
			rep.OK = false
		}
		rep.Results = append(rep.Results, r)
	}
	return rep
}

// hinted is a check's error with a hint of its own, for a failure the
// check's usual hint does not fix.
type hinted struct {
	err  error
	hint string
}

func (h *hinted) Error() string { return h.err.Error() }

// Failed returns the names of the failed checks.
func (r *Report) Failed() []string {
	var names []string
	for _, res := range r.Results {
		if res.Status == Fail {
			names = append(names, res.Check)
		}
	}
	return names
}

// count is the number of checks with status st.
func (r *Report) count(st Status) int {
	n := 0
	for _, res := range r.Results {
		if res.Status == st {
			n++
		}
	}
	return n
}

// WriteText writes the report one check a line, with the detail and hint
// of each failure under it.
func (r *Report) WriteText(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "poppyhost doctor: %s\n", r.Domain)
	for _, res := range r.Results {
		fmt.Fprintf(&b, "%-4s  %-22s spec %s\n", strings.ToUpper(string(res.Status)), res.Check, res.Section)
		if res.Detail != "" {
			fmt.Fprintf(&b, "      %s\n", res.Detail)
		}
		if res.Hint != "" {
			fmt.Fprintf(&b, "      fix: %s\n", res.Hint)
		}
	}
	if r.OK {
		fmt.Fprintf(&b, "no check failed (%d skipped)\n", r.count(Skip))
	} else {
		fmt.Fprintf(&b, "failed: %s\n", strings.Join(r.Failed(), ", "))
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// WriteJSON writes the report as one JSON document.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// isHTTPS reports whether s is an absolute https URL with a host.
func isHTTPS(s string) bool {
	u, err := url.Parse(s)
	return err == nil && u.Scheme == "https" && u.Host != "" && u.User == nil
}
