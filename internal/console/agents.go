package console

import (
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/poppyhost/poppyhost/internal/issuer"
	"github.com/poppyhost/poppyhost/internal/tenant"
)

// The Agents page (docs/console.md, "Agents"): the Personal Agents
// connected to the Company's accounts and their latest sign-ins
// (issuer.Store.CompanyConnections, SignIns), and disconnecting one from
// an account the way its User does on the account page (spec 5.5):
// issuer.Store.Disconnect, for a connection the account has.

// agentsPageSize is how many connections, and sign-ins, a page shows.
const agentsPageSize = 50

// agentsRoutes are the Agents page's: every role reads it; owners and
// admins disconnect.
func (c *Console) agentsRoutes(r chi.Router) {
	r.Use(c.allow(RoleAdmin, RoleAgent, RoleAuditor))
	r.Get("/agents", c.agentsPage)
	r.With(c.allow(RoleAdmin)).Post("/agents/disconnect", c.agentDisconnect)
}

// agentsView is the data of the page.
type agentsView struct {
	Connections []issuer.AccountConnection
	SignIns     []issuer.SignIn
	// CanDisconnect: the member may disconnect an agent.
	CanDisconnect bool
	Notice        string
	// Next and OlderSignIns are the next pages' URLs.
	Next, OlderSignIns string
}

func (c *Console) agentsPage(w http.ResponseWriter, r *http.Request) {
	ctx, q := r.Context(), r.URL.Query()
	co := tenant.FromContext(ctx)
	var (
		afterAccount int64
		before       time.Time
		err          error
	)
	if s := q.Get("after_account"); s != "" {
		if afterAccount, err = strconv.ParseInt(s, 10, 64); err != nil || afterAccount < 0 {
			c.renderError(w, r, http.StatusBadRequest, "That page of agents does not exist.")
			return
		}
	}
	if s := q.Get("before"); s != "" {
		if before, err = time.Parse(time.RFC3339Nano, s); err != nil {
			c.renderError(w, r, http.StatusBadRequest, "That page of sign-ins does not exist.")
			return
		}
	}
	afterClient := q.Get("after_client")
	now := c.now()
	conns, err := c.opts.Grants.CompanyConnections(ctx, co.ID, now, afterAccount, afterClient, agentsPageSize)
	if err != nil {
		c.fail(w, r, err)
		return
	}
	signIns, err := c.opts.Grants.SignIns(ctx, co.ID, now, before, agentsPageSize)
	if err != nil {
		c.fail(w, r, err)
		return
	}
	m := memberFrom(ctx)
	v := agentsView{Connections: conns, SignIns: signIns, CanDisconnect: m.Role == RoleOwner || m.Role == RoleAdmin}
	if q.Get("disconnected") != "" {
		v.Notice = "The Personal Agent was disconnected: its tokens for that account no longer work."
	}
	base := c.base(co.Slug) + "/agents"
	if len(conns) == agentsPageSize {
		last := conns[len(conns)-1]
		next := q
		next.Set("after_account", strconv.FormatInt(last.AccountID, 10))
		next.Set("after_client", last.ClientID)
		next.Del("disconnected")
		v.Next = base + "?" + next.Encode()
	}
	if len(signIns) == agentsPageSize {
		v.OlderSignIns = base + "?before=" + signIns[len(signIns)-1].At.UTC().Format(time.RFC3339Nano)
	}
	c.render(w, r, http.StatusOK, "agents", v)
}

// agentDisconnect disconnects the form's client_id from its account_id
// when the account, one of the Company's, has it connected; anything else
// answers 404 and changes nothing.
func (c *Console) agentDisconnect(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	co := tenant.FromContext(ctx)
	accountID, err := strconv.ParseInt(r.PostFormValue("account_id"), 10, 64)
	clientID := r.PostFormValue("client_id")
	if err != nil || accountID <= 0 || clientID == "" {
		c.renderError(w, r, http.StatusNotFound, "That Personal Agent is not connected to that account.")
		return
	}
	conns, err := c.opts.Grants.Connections(ctx, co.ID, accountID, c.now())
	if err != nil {
		c.fail(w, r, err)
		return
	}
	if !slices.ContainsFunc(conns, func(cn issuer.Connection) bool { return cn.ClientID == clientID }) {
		c.renderError(w, r, http.StatusNotFound, "That Personal Agent is not connected to that account.")
		return
	}
	if err := c.opts.Grants.Disconnect(ctx, co.ID, accountID, clientID); err != nil {
		c.fail(w, r, err)
		return
	}
	http.Redirect(w, r, c.base(co.Slug)+"/agents?disconnected=1", http.StatusSeeOther)
}
