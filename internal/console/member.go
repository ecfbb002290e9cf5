package console

import (
	"context"
	"net/http"
	"slices"
)

// Role is what a staff member may do in the console.
type Role string

// The roles: see docs/console.md, "Roles".
const (
	// RoleOwner may do everything, staff and API keys included.
	RoleOwner Role = "owner"
	// RoleAdmin manages settings, APIs and tools and webhooks, and reads
	// everything.
	RoleAdmin Role = "admin"
	// RoleAgent handles conversations and reads operations and feedback.
	RoleAgent Role = "agent"
	// RoleAuditor reads conversations, operations, feedback and the audit
	// log, and changes nothing.
	RoleAuditor Role = "auditor"
)

// Roles are every role, most powerful first.
var Roles = []Role{RoleOwner, RoleAdmin, RoleAgent, RoleAuditor}

// Valid reports whether r is one of Roles.
func (r Role) Valid() bool { return slices.Contains(Roles, r) }

// Member is a staff member of one Company, as signed in.
type Member struct {
	ID          int64
	CompanyID   int64
	CompanySlug string
	Name        string
	Email       string
	Role        Role
}

type memberKey struct{}

// withMember returns ctx carrying the signed-in member.
func withMember(ctx context.Context, m Member) context.Context {
	return context.WithValue(ctx, memberKey{}, m)
}

// memberFrom returns the signed-in member of a request behind the
// authentication middleware (the zero Member elsewhere).
func memberFrom(ctx context.Context) Member {
	m, _ := ctx.Value(memberKey{}).(Member)
	return m
}

// allow lets through the requests of members with one of roles (owners
// always) and answers the others 403 with a page that says so.
func (c *Console) allow(roles ...Role) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			m := memberFrom(r.Context())
			if m.Role != RoleOwner && !slices.Contains(roles, m.Role) {
				c.renderError(w, r, http.StatusForbidden, "Your role does not allow this.")
				return
			}
			next.ServeHTTP(w, r)
		})
	}
}
