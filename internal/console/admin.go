package console

import (
	"errors"
	"net/http"

	"github.com/go-chi/chi/v5"

	"github.com/poppyhost/poppyhost/internal/accounts"
	"github.com/poppyhost/poppyhost/internal/audit"
	"github.com/poppyhost/poppyhost/internal/httpx"
	"github.com/poppyhost/poppyhost/internal/tenant"
)

// Admin mounts the operator's console route under
// /admin/v1/companies/{slug} (httpx.AdminRoutes): creating a staff member,
// such as a new Company's first owner.
func (c *Console) Admin(r chi.Router) {
	r.Post("/staff", c.createStaff)
}

// staffView is a staff member as the admin API shows them.
type staffView struct {
	ID         int64  `json:"id"`
	Email      string `json:"email"`
	Name       string `json:"name"`
	Role       Role   `json:"role"`
	ConsoleURL string `json:"console_url"`
}

// createStaff adds a staff member with a password: the operator's way to
// give a Company its first owner, who invites the others.
func (c *Console) createStaff(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Email    string `json:"email"`
		Name     string `json:"name"`
		Role     Role   `json:"role"`
		Password string `json:"password"`
	}
	if err := httpx.DecodeJSON(w, r, &body, httpx.DecodeOptions{Strict: true, MaxBytes: 4 << 10}); err != nil {
		httpx.WriteError(w, r, err)
		return
	}
	if body.Role == "" {
		body.Role = RoleOwner
	}
	var f httpx.Fields
	email, problem := NormalizeEmail(body.Email)
	if problem != "" {
		f.Add("email", "%s", problem)
	}
	if problem := CheckName(body.Name); problem != "" {
		f.Add("name", "%s", problem)
	}
	if !body.Role.Valid() {
		f.Add("role", "must be one of owner, admin, agent, auditor")
	}
	if problem := accounts.CheckPassword(body.Password); problem != "" {
		f.Add("password", "%s", problem)
	}
	if err := f.Err(); err != nil {
		httpx.WriteError(w, r, err)
		return
	}
	co := tenant.FromContext(r.Context())
	audit.Note(r.Context(), "email", "name", "role", "password")
	m, err := c.staff.Create(r.Context(), co.ID, email, body.Name, body.Role, body.Password)
	if errors.Is(err, ErrTaken) {
		httpx.WriteError(w, r, &httpx.Error{Code: httpx.CodeConflict, Description: "email: is taken",
			Fields: []httpx.FieldError{{Field: "email", Message: "is taken"}}})
		return
	}
	if err != nil {
		httpx.WriteError(w, r, err)
		return
	}
	httpx.WriteJSON(w, http.StatusCreated, staffView{ID: m.ID, Email: m.Email, Name: m.Name, Role: m.Role,
		ConsoleURL: c.opts.URLs.Public.String() + c.base(co.Slug) + "/signin"})
}
