package console

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/go-webauthn/webauthn/webauthn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/poppyhost/poppyhost/internal/accounts"
	"github.com/poppyhost/poppyhost/internal/audit"
	"github.com/poppyhost/poppyhost/internal/conversations"
	"github.com/poppyhost/poppyhost/internal/feedback"
	"github.com/poppyhost/poppyhost/internal/issuer"
	"github.com/poppyhost/poppyhost/internal/jobs"
	"github.com/poppyhost/poppyhost/internal/operations"
	"github.com/poppyhost/poppyhost/internal/sealing"
	"github.com/poppyhost/poppyhost/internal/tenant"
)

// Options are what a Console is built from. Each page adds the services
// it needs here; the platform passes them.
type Options struct {
	Pool *pgxpool.Pool
	// Passwords hashes and checks staff passwords under the accounts'
	// limits and throttle (accounts.Store.AuthenticateOther).
	Passwords *accounts.Store
	// Sealer seals staff members' TOTP secrets.
	Sealer *sealing.Sealer
	// Companies finds the Company of the URL's slug.
	Companies tenant.Lookup
	URLs      tenant.URLs
	Logger    *slog.Logger
	// Now is the clock [time.Now].
	Now func() time.Time
	// LoginAllowed counts a password sign-in attempt against the
	// Company's sign-in rates (issuer.Server.LoginAllowed); false: over a
	// rate, Retry-After set. Nil allows every attempt.
	LoginAllowed func(http.ResponseWriter, *http.Request) bool
	// SignedOut, when set, wraps the routes that need no session (sign-in,
	// passkey ceremonies, invites): the platform limits them per client
	// address, as the Companies' other public routes.
	SignedOut func(http.Handler) http.Handler
	// IdleTimeout ends a session not used for this long [30 minutes].
	IdleTimeout time.Duration
	// AbsoluteTimeout ends a session this long after sign-in, used or not
	// [12 hours].
	AbsoluteTimeout time.Duration

	// Conversations and Hub serve the Inbox and Conversations pages
	// (conversations.go); without both those pages are left out.
	Conversations *conversations.Store
	Hub           *conversations.Hub

	// The Settings pages' services (settings.go): the admin API's
	// settings code (*tenant.Admin), the Companies as stored with their
	// API keys (*tenant.Store), registered APIs and tools
	// (*registry.Store) and the webhook secret (*conversations.Delivery);
	// a page whose service is nil is not served.
	Settings      SettingsEditor
	Tenants       CompanyStore
	Registrations Registrations
	Webhooks      WebhookSecrets
	// Operations, Feedback and Grants are the stores the Operations,
	// Feedback and Agents pages read, as the Company API does; a page
	// whose store is nil is not served.
	Operations *operations.Store
	Feedback   *feedback.Store
	Grants     *issuer.Store
}

// Default timeouts of a console session.
const (
	DefaultIdleTimeout     = 30 * time.Minute
	DefaultAbsoluteTimeout = 12 * time.Hour
)

// Console serves the Company console.
type Console struct {
	opts     Options
	staff    *Store
	log      *slog.Logger
	now      func() time.Time
	pages    *pages
	webauthn *webauthn.WebAuthn
}

// New returns a Console.
func New(opts Options) (*Console, error) {
	if opts.Pool == nil || opts.Passwords == nil || opts.Sealer == nil || opts.Companies == nil || opts.URLs.Public == nil {
		return nil, errors.New("console: Pool, Passwords, Sealer, Companies and URLs are required")
	}
	if opts.IdleTimeout <= 0 {
		opts.IdleTimeout = DefaultIdleTimeout
	}
	if opts.AbsoluteTimeout <= 0 {
		opts.AbsoluteTimeout = DefaultAbsoluteTimeout
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	p, err := parsePages()
	if err != nil {
		return nil, err
	}
	wa, err := newWebAuthn(opts.URLs)
	if err != nil {
		return nil, fmt.Errorf("console: %w", err)
	}
	return &Console{opts: opts, staff: NewStore(opts.Pool, opts.Passwords), log: opts.Logger,
		now: opts.Now, pages: p, webauthn: wa}, nil
}

// Mount adds the console's routes to r, which the platform mounts at
// /console/{slug} on its own host.
func (c *Console) Mount(r chi.Router) {
	r.Use(c.headers, c.text, audit.Middleware(c.opts.Pool), c.company)
	r.NotFound(func(w http.ResponseWriter, r *http.Request) {
		c.renderError(w, r, http.StatusNotFound, "There is no such page.")
	})
	r.MethodNotAllowed(func(w http.ResponseWriter, r *http.Request) {
		c.renderError(w, r, http.StatusMethodNotAllowed, "This page cannot be used that way.")
	})
	r.Get("/assets/{name}", c.asset)
	// Signed out: the pre-session cookie binds the forms' CSRF tokens.
	r.Group(func(r chi.Router) {
		if c.opts.SignedOut != nil {
			r.Use(c.opts.SignedOut)
		}
		r.Use(c.preSession, c.csrf)
		r.Get("/signin", c.signInPage)
		r.Post("/signin", c.signIn)
		r.Post("/signin/passkey/begin", c.signInBegin)
		r.Post("/signin/passkey/finish", c.signInFinish)
		r.Get("/invite", c.invitePage)
		r.Post("/invite", c.acceptInvite)
	})
	// Password given, second factor awaited.
	r.Route("/signin/second", func(r chi.Router) {
		r.Use(c.pending, c.csrf)
		r.Get("/", c.secondFactorPage)
		r.Post("/totp", c.secondTOTP)
		r.Post("/enroll", c.secondEnroll)
		// Signing in changes nothing the audit log keeps.
		r.With(audit.Exempt).Post("/passkey/begin", c.secondBegin)
		r.With(audit.Exempt).Post("/passkey/finish", c.secondFinish)
	})
	// Live pages' feeds: signed in, but not a use of the session (feeds.go).
	r.Group(c.feedRoutes)
	r.Group(func(r chi.Router) {
		r.Use(c.authenticate, c.csrf)
		c.routes(r)
	})
}

// Staff is the console's store of staff members, for what creates them
// outside the console (dev mode's demo owner).
func (c *Console) Staff() *Store { return c.staff }

// Sweeps delete the sessions, invites and ceremonies that can no longer
// be used.
func (c *Console) Sweeps() []jobs.Sweep {
	return []jobs.Sweep{{Name: "console_sweep_expired", Every: 10 * time.Minute,
		Run: func(ctx context.Context, now time.Time) (int64, error) {
			return c.staff.DeleteExpired(ctx, now, c.opts.IdleTimeout, c.opts.AbsoluteTimeout)
		}}}
}

// routes are the signed-in pages. Each page adds its own group here.
func (c *Console) routes(r chi.Router) {
	r.Get("/", c.home)
	r.Post("/signout", c.signOut)
	r.Post("/signout/everywhere", c.signOutEverywhere)
	r.Route("/account", func(r chi.Router) {
		r.Get("/", c.account)
		// Changing second factors needs a recent sign-in (reauth.go).
		page, script := r.With(c.recentSignIn(false)), r.With(c.recentSignIn(true))
		page.Get("/totp", c.totpPage)
		page.Post("/totp", c.setUpTOTP)
		script.With(audit.Exempt).Post("/passkeys/begin", c.registerBegin)
		script.Post("/passkeys/finish", c.registerFinish)
		page.Post("/passkeys/{id}/remove", c.removePasskey)
	})
	r.Group(func(r chi.Router) {
		r.Use(c.allow(RoleAdmin))
		r.Get("/staff", c.staffList)
	})
	r.Group(func(r chi.Router) {
		r.Use(c.allow(RoleOwner))
		r.Post("/staff/invite", c.invite)
		r.Post("/staff/invites/revoke", c.revokeInvite)
		r.Post("/staff/{id}/role", c.changeRole)
		r.Post("/staff/{id}/remove", c.removeStaff)
	})
	c.conversationRoutes(r)

	r.Group(c.settingsRoutes)
	if c.opts.Operations != nil {
		r.Group(c.operationsRoutes)
	}
	if c.opts.Feedback != nil {
		r.Group(c.feedbackRoutes)
	}
	if c.opts.Grants != nil {
		r.Group(c.agentsRoutes)
	}
}

// home sends a member to the first page of the navigation their role
// may see.
func (c *Console) home(w http.ResponseWriter, r *http.Request) {
	m := memberFrom(r.Context())
	to := c.base(m.CompanySlug) + "/inbox"
	if nav := navFor(m, ""); len(nav) > 0 {
		to = nav[0].URL
	}
	http.Redirect(w, r, to, http.StatusSeeOther)
}

// base is the console's path for a Company.
func (c *Console) base(slug string) string { return "/console/" + slug }

// navItem is one entry of the navigation.
type navItem struct {
	Label   string
	URL     string
	Current bool
}

// navPages are the console's pages in navigation order, with the roles
// besides owner that may open them (docs/console.md, "Roles").
var navPages = []struct {
	label, path string
	roles       []Role
}{
	{"Inbox", "inbox", []Role{RoleAdmin, RoleAgent}},
	{"Conversations", "conversations", []Role{RoleAdmin, RoleAgent, RoleAuditor}},
	{"Operations", "operations", []Role{RoleAdmin, RoleAgent, RoleAuditor}},
	{"Feedback", "feedback", []Role{RoleAdmin, RoleAgent, RoleAuditor}},
	{"Agents", "agents", []Role{RoleAdmin, RoleAgent, RoleAuditor}},
	{"Settings", "settings", []Role{RoleAdmin}},
	{"Audit log", "audit", []Role{RoleAdmin, RoleAuditor}},
	{"Staff", "staff", []Role{RoleAdmin}},
}

// navFor is the navigation m's role may see, with current marked.
func navFor(m Member, current string) []navItem {
	var out []navItem
	for _, p := range navPages {
		if m.Role == RoleOwner || slices.Contains(p.roles, m.Role) {
			out = append(out, navItem{Label: p.label, URL: "/console/" + m.CompanySlug + "/" + p.path,
				Current: p.path == current})
		}
	}
	return out
}
