package feedback

import (
	"errors"
	"math"
	"net/http"
	"strconv"
	"unicode"
	"unicode/utf8"

	"github.com/go-chi/chi/v5"

	"github.com/poppyhost/poppyhost/internal/httpx"
	"github.com/poppyhost/poppyhost/internal/sessions"
	"github.com/poppyhost/poppyhost/internal/tenant"
)

// Report limits (spec 9.3: invalid_request for a report that is too long).
const (
	MaxTask        = 200
	MaxDescription = 4000
	maxReportBody  = 16 << 10
)

// Handler serves the feedback endpoint and the reading of reports.
type Handler struct {
	store *Store
}

// NewHandler returns a Handler.
func NewHandler(store *Store) *Handler { return &Handler{store: store} }

// ServeFeedback is POST {issuer}/poppy/feedback; it runs behind the
// Session middleware, which has verified the Session header (9.3), for
// Companies whose feedback is on.
func (h *Handler) ServeFeedback(w http.ResponseWriter, r *http.Request) {
	c := tenant.FromContext(r.Context())
	sess := sessions.FromContext(r.Context())
	// Unknown members are ignored (spec 3.3); the Session's identities are
	// not repeated in the body (9.3).
	var body struct {
		Task        *string `json:"task"`
		Description *string `json:"description"`
	}
	if err := httpx.DecodeJSON(w, r, &body, httpx.DecodeOptions{MaxBytes: maxReportBody}); err != nil {
		httpx.WriteError(w, r, asInvalid(err))
		return
	}
	if msg := checkText(body.Task, MaxTask); msg != "" {
		httpx.WriteError(w, r, httpx.Invalid(httpx.FieldError{Field: "task", Message: msg}))
		return
	}
	if msg := checkText(body.Description, MaxDescription); msg != "" {
		httpx.WriteError(w, r, httpx.Invalid(httpx.FieldError{Field: "description", Message: msg}))
		return
	}
	alt := alternativeFor(c, *body.Task)
	rep := &Report{ClientID: sess.ClientID, UserID: sess.UserID, AgentID: sess.AgentID, SID: sess.SID,
		Task: *body.Task, Description: *body.Description, Answered: alt != nil}
	if err := h.store.add(r.Context(), c.ID, rep); err != nil {
		httpx.WriteError(w, r, err)
		return
	}
	if alt != nil {
		httpx.WriteJSON(w, http.StatusOK, alt)
		return
	}
	w.WriteHeader(http.StatusAccepted)
}

// BufferReport reads a report's body whole, before the Session middleware
// records the Session's use: a report too slow to arrive (408) or too long
// (invalid_request, spec 9.3) is refused with no side effect.
func (h *Handler) BufferReport(next http.Handler) http.Handler {
	return httpx.BufferBody(maxReportBody, httpx.Errorf(httpx.CodeInvalidRequest,
		"the body is larger than %d bytes", maxReportBody))(next)
}

// asInvalid turns DecodeJSON's request_too_large (413) and
// unsupported_media_type (415) into invalid_request: spec 9.3 answers a
// report that is malformed or too long with invalid_request (400).
func asInvalid(err error) error {
	if e, ok := errors.AsType[*httpx.Error](err); ok && e.Code != httpx.CodeInvalidRequest {
		return &httpx.Error{Code: httpx.CodeInvalidRequest, Description: e.Description, Fields: e.Fields, Cause: e.Cause}
	}
	return err
}

func alternativeFor(c *tenant.Company, task string) *tenant.Alternative {
	key := tenant.NormalTask(task)
	for _, a := range c.Settings.Feedback.Alternatives {
		if tenant.NormalTask(a.Task) == key {
			return &a.Alternative
		}
	}
	return nil
}

// checkText says what is wrong with a required text field, or "".
func checkText(s *string, max int) string {
	switch {
	case s == nil || *s == "":
		return "is required"
	case !utf8.ValidString(*s):
		return "must be UTF-8 text"
	case utf8.RuneCountInString(*s) > max:
		return "must be at most " + strconv.Itoa(max) + " characters"
	}
	for _, r := range *s {
		if unicode.IsControl(r) && r != '\n' && r != '\t' && r != '\r' {
			return "must not contain control characters"
		}
	}
	return httpx.DisguiseProblem(*s)
}

// CompanyAPI mounts GET /feedback, the Company's reports, under
// /company/v1 (httpx.CompanyAPIRoutes).
func (h *Handler) CompanyAPI(r chi.Router) { r.Get("/feedback", h.listReports) }

// Admin mounts GET /feedback, the Company's reports, under
// /admin/v1/companies/{slug} (httpx.AdminRoutes).
func (h *Handler) Admin(r chi.Router) { r.Get("/feedback", h.listReports) }

func (h *Handler) listReports(w http.ResponseWriter, r *http.Request) {
	limit, err := httpx.QueryInt(r, "limit", 50, 1, 500)
	if err != nil {
		httpx.WriteError(w, r, err)
		return
	}
	before, err := httpx.QueryInt(r, "before", 0, 1, math.MaxInt64)
	if err != nil {
		httpx.WriteError(w, r, err)
		return
	}
	reports, err := h.store.List(r.Context(), tenant.FromContext(r.Context()).ID, before, int(limit))
	if err != nil {
		httpx.WriteError(w, r, err)
		return
	}
	out := struct {
		Feedback []Report `json:"feedback"`
		Next     string   `json:"next,omitempty"`
	}{Feedback: reports}
	if out.Feedback == nil {
		out.Feedback = []Report{}
	}
	if len(reports) == int(limit) {
		out.Next = strconv.FormatInt(reports[len(reports)-1].ID, 10)
	}
	httpx.WriteJSON(w, http.StatusOK, out)
}
