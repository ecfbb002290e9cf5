package console

import (
	"errors"
	"net/http"
	"net/url"
	"strconv"

	"github.com/go-chi/chi/v5"

	"github.com/poppyhost/poppyhost/internal/accounts"
	"github.com/poppyhost/poppyhost/internal/tenant"
)

// staffPage is the staff page's data.
type staffPage struct {
	Staff []StaffRow
	// Invites are the invites not yet accepted.
	Invites []PendingInvite
	Roles   []Role
	// CanManage: the member is an owner.
	CanManage bool
	// Invite is the invite form as sent, with its errors.
	Invite inviteForm
	// Link is the invite link just made, shown once.
	Link string
	// Error is a problem with a change to a member.
	Error string
}

// inviteForm is the invite form's fields and their problems.
type inviteForm struct {
	Email, Name, Role string
	Errors            map[string]string
}

func (c *Console) staffList(w http.ResponseWriter, r *http.Request) {
	c.renderStaff(w, r, http.StatusOK, staffPage{})
}

func (c *Console) renderStaff(w http.ResponseWriter, r *http.Request, status int, page staffPage) {
	m := memberFrom(r.Context())
	list, err := c.staff.List(r.Context(), m.CompanyID)
	if err == nil {
		page.Invites, err = c.staff.Invites(r.Context(), m.CompanyID, c.now())
	}
	if err != nil {
		c.fail(w, r, err)
		return
	}
	page.Staff, page.Roles, page.CanManage = list, Roles, m.Role == RoleOwner
	if page.Invite.Role == "" {
		page.Invite.Role = string(RoleAgent)
	}
	c.render(w, r, status, "staff", page)
}

// invite makes an invite link for a new staff member, shown once.
func (c *Console) invite(w http.ResponseWriter, r *http.Request) {
	m := memberFrom(r.Context())
	f := inviteForm{Email: r.PostForm.Get("email"), Name: r.PostForm.Get("name"), Role: r.PostForm.Get("role"),
		Errors: map[string]string{}}
	email, problem := NormalizeEmail(f.Email)
	if problem != "" {
		f.Errors["email"] = "Email " + problem + "."
	}
	if problem := CheckName(f.Name); problem != "" {
		f.Errors["name"] = "Name " + problem + "."
	}
	if !Role(f.Role).Valid() {
		f.Errors["role"] = "Choose a role."
	}
	if len(f.Errors) > 0 {
		c.renderStaff(w, r, http.StatusBadRequest, staffPage{Invite: f})
		return
	}
	token, err := c.staff.CreateInvite(r.Context(), Invite{CompanyID: m.CompanyID, Email: email, Name: f.Name,
		Role: Role(f.Role), ExpiresAt: c.now().Add(InviteLifetime)}, m.ID)
	switch {
	case errors.Is(err, ErrTaken):
		f.Errors["email"] = "A staff member already has this email."
		c.renderStaff(w, r, http.StatusConflict, staffPage{Invite: f})
		return
	case err != nil:
		c.fail(w, r, err)
		return
	}
	// The token is in the query, which access logs and the audit log
	// leave out (they keep the path).
	c.renderStaff(w, r, http.StatusOK, staffPage{Link: c.opts.URLs.Public.String() + c.base(m.CompanySlug) +
		"/invite?" + url.Values{"token": {token}}.Encode()})
}

// revokeInvite cancels an invite: its link stops working.
func (c *Console) revokeInvite(w http.ResponseWriter, r *http.Request) {
	m := memberFrom(r.Context())
	err := c.staff.RevokeInvite(r.Context(), m.CompanyID, r.PostForm.Get("invite"))
	switch {
	case errors.Is(err, ErrNotFound):
		c.renderError(w, r, http.StatusNotFound, "There is no such invite.")
	case err != nil:
		c.fail(w, r, err)
	default:
		http.Redirect(w, r, c.base(m.CompanySlug)+"/staff", http.StatusSeeOther)
	}
}

// staffTarget is the staff id of the URL, or 0 (a 404 was answered).
func (c *Console) staffTarget(w http.ResponseWriter, r *http.Request) int64 {
	id, err := strconv.ParseInt(chi.URLParam(r, "id"), 10, 64)
	if err != nil || id <= 0 {
		c.renderError(w, r, http.StatusNotFound, "There is no such staff member.")
		return 0
	}
	return id
}

// changeRole gives a staff member another role; the last owner keeps
// theirs.
func (c *Console) changeRole(w http.ResponseWriter, r *http.Request) {
	m := memberFrom(r.Context())
	id := c.staffTarget(w, r)
	if id == 0 {
		return
	}
	role := Role(r.PostForm.Get("role"))
	if !role.Valid() {
		c.renderStaff(w, r, http.StatusBadRequest, staffPage{Error: "Choose a role."})
		return
	}
	c.staffChanged(w, r, m, c.staff.SetRole(r.Context(), m.CompanyID, id, role))
}

// removeStaff removes a staff member; never the last owner.
func (c *Console) removeStaff(w http.ResponseWriter, r *http.Request) {
	m := memberFrom(r.Context())
	id := c.staffTarget(w, r)
	if id == 0 {
		return
	}
	err := c.staff.Remove(r.Context(), m.CompanyID, id)
	if err == nil && id == m.ID {
		// Their sessions went with them.
		setCookie(w, sessionCookie(m.CompanySlug), "")
		http.Redirect(w, r, c.base(m.CompanySlug)+"/signin", http.StatusSeeOther)
		return
	}
	c.staffChanged(w, r, m, err)
}

// staffChanged answers a change to a staff member that returned err.
func (c *Console) staffChanged(w http.ResponseWriter, r *http.Request, m Member, err error) {
	switch {
	case errors.Is(err, ErrNotFound):
		c.renderError(w, r, http.StatusNotFound, "There is no such staff member.")
	case errors.Is(err, ErrLastOwner):
		c.renderStaff(w, r, http.StatusConflict, staffPage{Error: "The Company needs at least one owner: make someone else an owner first."})
	case err != nil:
		c.fail(w, r, err)
	default:
		http.Redirect(w, r, c.base(m.CompanySlug)+"/staff", http.StatusSeeOther)
	}
}

// acceptPage is the invite page's data.
type acceptPage struct {
	Email, Name, Role string
	// Token is the invite's, posted back with the form.
	Token  string
	Errors map[string]string
}

// inviteGone is what an unknown, used or expired invite link shows.
const inviteGone = "This invite link is unknown, used or expired. Ask an owner for a new one."

// inviteToken is the invite token of the link (GET) or of its form
// (POST).
func inviteToken(r *http.Request) string {
	if r.Method == http.MethodPost {
		return r.PostForm.Get("token")
	}
	return r.URL.Query().Get("token")
}

// findInvite returns the Company's unexpired invite of the request's
// token, or answers 404 and returns false.
func (c *Console) findInvite(w http.ResponseWriter, r *http.Request) (Invite, bool) {
	co := tenant.FromContext(r.Context())
	inv, err := c.staff.invite(r.Context(), co.ID, inviteToken(r), c.now())
	switch {
	case errors.Is(err, ErrNotFound):
		c.renderError(w, r, http.StatusNotFound, inviteGone)
		return Invite{}, false
	case err != nil:
		c.fail(w, r, err)
		return Invite{}, false
	}
	return inv, true
}

// invitePage shows an invite's form: choose a name and password.
func (c *Console) invitePage(w http.ResponseWriter, r *http.Request) {
	if inv, ok := c.findInvite(w, r); ok {
		c.render(w, r, http.StatusOK, "invite", acceptPage{Email: inv.Email, Name: inv.Name, Role: string(inv.Role),
			Token: inviteToken(r)})
	}
}

// acceptInvite makes the invited staff member and signs them in.
func (c *Console) acceptInvite(w http.ResponseWriter, r *http.Request) {
	inv, ok := c.findInvite(w, r)
	if !ok {
		return
	}
	co, token := tenant.FromContext(r.Context()), inviteToken(r)
	page := acceptPage{Email: inv.Email, Name: r.PostForm.Get("name"), Role: string(inv.Role), Token: token,
		Errors: map[string]string{}}
	password := r.PostForm.Get("password")
	if problem := CheckName(page.Name); problem != "" {
		page.Errors["name"] = "Name " + problem + "."
	}
	if problem := accounts.CheckPassword(password); problem != "" {
		page.Errors["password"] = "Password " + problem + "."
	}
	if len(page.Errors) > 0 {
		c.render(w, r, http.StatusBadRequest, "invite", page)
		return
	}
	m, err := c.staff.AcceptInvite(r.Context(), co.ID, token, page.Name, password, c.now())
	switch {
	case errors.Is(err, ErrNotFound), errors.Is(err, ErrTaken):
		c.renderError(w, r, http.StatusNotFound, inviteGone)
		return
	case err != nil:
		c.fail(w, r, err)
		return
	}
	c.passwordAccepted(w, r, co, m)
}
