package console

import (
	"context"
	"errors"
	"net/http"
	"slices"

	"github.com/go-chi/chi/v5"

	"github.com/poppyhost/poppyhost/internal/db"
	"github.com/poppyhost/poppyhost/internal/tenant"
)

// The live pages' feeds (server-sent events; conversations.Hub.ServeFeed)
// are authenticated on their own: a feed stays open for minutes and
// reconnects by itself, so it must not count as the member using the
// console, or an open Inbox would never reach the idle timeout; and it
// checks the session again before each update, so that signing out
// everywhere, a removal or a change of role stops it.

// feedRoutes adds the feeds, outside the authenticated pages.
func (c *Console) feedRoutes(r chi.Router) {
	if c.opts.Conversations == nil || c.opts.Hub == nil {
		return
	}
	r.Use(c.feedSession)
	r.With(c.allow(inboxReaders...)).Get("/inbox/feed", c.inboxFeed)
	r.With(c.allow(conversationReaders...)).Get("/conversations/{id}/feed", c.transcriptFeed)
}

// errSignedOut: the request's session is over, or its member may no
// longer read what the feed shows.
var errSignedOut = errors.New("console: signed out")

// liveMember returns the member of the request's session while it is
// signed in (neither idle nor too old, second factor done), without
// marking it used; errSignedOut otherwise.
func (c *Console) liveMember(ctx context.Context, r *http.Request) (Member, error) {
	co := tenant.FromContext(r.Context())
	ck, err := r.Cookie(sessionCookie(co.Slug))
	if err != nil {
		return Member{}, errSignedOut
	}
	now := c.now()
	m := Member{CompanyID: co.ID, CompanySlug: co.Slug}
	var role string
	err = c.opts.Pool.QueryRow(ctx, `SELECT st.id, st.email, st.name, st.role
		FROM console_sessions AS cs JOIN staff AS st ON st.id = cs.staff_id AND st.company_id = cs.company_id
		WHERE cs.token_hash = $1 AND cs.company_id = $2 AND NOT cs.second_factor
			AND cs.last_seen_at > $3 AND cs.created_at > $4`,
		tokenHash(ck.Value), co.ID, now.Add(-c.opts.IdleTimeout), now.Add(-c.opts.AbsoluteTimeout)).
		Scan(&m.ID, &m.Email, &m.Name, &role)
	m.Role = Role(role)
	return m, db.NotFound(err, errSignedOut)
}

// feedSession lets a feed's request through with its member and CSRF
// token (the forms it renders carry it). A signed-out request gets 204,
// which tells the browser's EventSource not to reconnect; the page's
// next action leads to the sign-in page.
func (c *Console) feedSession(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		m, err := c.liveMember(r.Context(), r)
		switch {
		case errors.Is(err, errSignedOut):
			w.WriteHeader(http.StatusNoContent)
			return
		case err != nil:
			c.fail(w, r, err)
			return
		}
		ck, _ := r.Cookie(sessionCookie(m.CompanySlug))
		next.ServeHTTP(w, r.WithContext(withCSRF(withMember(r.Context(), m), ck.Value)))
	})
}

// stillAllowed checks, before a feed's update, that its member is still
// signed in with one of roles (owners always), and says whether they may
// act on conversations now.
func (c *Console) stillAllowed(ctx context.Context, r *http.Request, roles []Role) (bool, error) {
	m, err := c.liveMember(ctx, r)
	if err != nil {
		return false, err
	}
	if m.Role != RoleOwner && !slices.Contains(roles, m.Role) {
		return false, errSignedOut
	}
	return m.Role == RoleOwner || m.Role == RoleAgent, nil
}
