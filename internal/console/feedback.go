package console

import (
	"math"
	"net/http"
	"strconv"

	"github.com/go-chi/chi/v5"

	"github.com/poppyhost/poppyhost/internal/feedback"
	"github.com/poppyhost/poppyhost/internal/tenant"
)

// The Feedback page (docs/console.md, "Feedback"): the reports Personal
// Agents sent about tasks they could not do (spec 9.3), newest first, as
// the Company API's GET /feedback lists them (feedback.Store.List), with
// the alternatives the Company configured (spec 9.2). A report is what a
// Personal Agent said: the page shows it as text, never as something to
// do (html/template escaping only).

// feedbackPageSize is how many reports a page shows.
const feedbackPageSize = 50

// feedbackRoutes are the Feedback page's: every role reads it.
func (c *Console) feedbackRoutes(r chi.Router) {
	r.Use(c.allow(RoleAdmin, RoleAgent, RoleAuditor))
	r.Get("/feedback", c.feedbackPage)
}

// feedbackView is the data of the page.
type feedbackView struct {
	Reports []feedback.Report
	// Enabled: the Company takes reports.
	Enabled bool
	// Alternatives answer reports of their tasks; Excluded are the tasks
	// the Company does not offer, with theirs (spec 9.1).
	Alternatives []tenant.TaskAlternative
	Excluded     []tenant.ExcludedTask
	Next         string
}

func (c *Console) feedbackPage(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	co := tenant.FromContext(ctx)
	var before int64
	if s := r.URL.Query().Get("before"); s != "" {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n < 1 || n == math.MaxInt64 {
			c.renderError(w, r, http.StatusBadRequest, "That page of feedback does not exist.")
			return
		}
		before = n
	}
	reports, err := c.opts.Feedback.List(ctx, co.ID, before, feedbackPageSize)
	if err != nil {
		c.fail(w, r, err)
		return
	}
	v := feedbackView{Reports: reports, Enabled: co.Settings.Feedback.Enabled,
		Alternatives: co.Settings.Feedback.Alternatives, Excluded: co.Settings.ExcludedTasks}
	if len(reports) == feedbackPageSize {
		v.Next = c.base(co.Slug) + "/feedback?before=" + strconv.FormatInt(reports[len(reports)-1].ID, 10)
	}
	c.render(w, r, http.StatusOK, "feedback", v)
}
