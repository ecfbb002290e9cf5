package tenant

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"

	jsonpatch "github.com/evanphx/json-patch/v5"
	"github.com/go-chi/chi/v5"

	"github.com/poppyhost/poppyhost/internal/accounts"
	"github.com/poppyhost/poppyhost/internal/audit"
	"github.com/poppyhost/poppyhost/internal/httpx"
)

// AccountCreator creates a Company's user accounts.
type AccountCreator interface {
	Create(ctx context.Context, companyID int64, username, password string) (accounts.Account, error)
}

// Admin serves the operator API under /admin/v1 and the Company API's
// own-settings route under /company/v1.
type Admin struct {
	store        *Store
	audit        *audit.Store
	accounts     AccountCreator
	urls         URLs
	allowPrivate bool
	// limiter and perToken limit requests per operator token
	// (LimitOperators).
	limiter  *httpx.Limiter
	perToken int
}

// NewAdmin returns the admin API handler. allowPrivate is the platform's
// safehttp.Options.AllowPrivate, which Validate needs.
func NewAdmin(store *Store, accts AccountCreator, urls URLs, allowPrivate bool) *Admin {
	return &Admin{store: store, audit: audit.NewStore(store.pool, 0), accounts: accts, urls: urls, allowPrivate: allowPrivate}
}

// maxAdminBody bounds admin request bodies; a Company's settings with
// hundreds of scopes and tasks fit comfortably.
const maxAdminBody = 256 << 10

// AdminAPI serves /admin/v1 on r behind RequireOperator: the operator's
// own routes (admin.Operator) and, under /companies/{slug} with the
// Company in the context, every Admin route of routes (admin's own among
// them when it is listed). Every change is audited (audit.Middleware).
func AdminAPI(r chi.Router, store *Store, admin *Admin, routes ...httpx.AdminRoutes) {
	r.Route("/admin/v1", func(r chi.Router) {
		r.Use(audit.Middleware(store.pool), RequireOperator(store), admin.limitOperators)
		admin.Operator(r)
		r.Route("/companies/{slug}", func(r chi.Router) {
			r.Use(BySlug(store), auditCompany)
			for _, h := range routes {
				h.Admin(r)
			}
		})
	})
}

// Operator mounts the operator's own routes on r, which serves /admin/v1
// behind RequireOperator: creating and listing Companies, and operator
// tokens.
func (a *Admin) Operator(r chi.Router) {
	r.Post("/companies", a.createCompany)
	r.Get("/companies", a.listCompanies)
	r.Post("/operator-tokens", a.createOperatorToken)
	r.Get("/operator-tokens", a.listOperatorTokens)
	r.Delete("/operator-tokens/{id}", a.revokeOperatorToken)
	r.Get("/audit", a.listAudit)
}

// Admin mounts a Company's own routes under /admin/v1/companies/{slug}
// (httpx.AdminRoutes): its settings, accounts, API keys and audit log.
func (a *Admin) Admin(r chi.Router) {
	r.Get("/", a.getCompany)
	r.Patch("/", a.patchCompany)
	r.Delete("/", a.deleteCompany)
	r.Post("/accounts", a.createAccount)
	r.Post("/api-keys", a.createAPIKey)
	r.Get("/api-keys", a.listAPIKeys)
	r.Delete("/api-keys/{id}", a.revokeAPIKey)
	r.Get("/audit", a.listCompanyAudit)
}

// CompanyAPI mounts the Company's own routes under /company/v1
// (httpx.CompanyAPIRoutes): GET /company, its settings; its API keys,
// which it can list and revoke but not create; and its audit log.
func (a *Admin) CompanyAPI(r chi.Router) {
	r.Get("/company", a.getCompany)
	r.Get("/api-keys", a.listAPIKeys)
	r.Delete("/api-keys/{id}", a.revokeAPIKey)
	r.Get("/audit", a.listCompanyAudit)
}

// auditCompany names the request's Company in its audit entry.
func auditCompany(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if c := FromContext(r.Context()); c != nil {
			audit.SetCompany(r.Context(), c.ID, c.Slug)
		}
		next.ServeHTTP(w, r)
	})
}

func bearer(r *http.Request) string {
	h := r.Header.Get("Authorization")
	if len(h) > 7 && strings.EqualFold(h[:7], "bearer ") {
		return strings.TrimSpace(h[7:])
	}
	return ""
}

func unauthorized(w http.ResponseWriter, r *http.Request, realm, msg string) {
	w.Header().Set("WWW-Authenticate", `Bearer realm="`+realm+`"`)
	httpx.WriteError(w, r, httpx.Errorf(httpx.CodeUnauthorized, "%s", msg))
}

// RequireOperator lets through only requests with a live operator token
// (Authorization: Bearer), for the operator API under /admin/v1.
func RequireOperator(store *Store) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			tok := bearer(r)
			if tok == "" {
				unauthorized(w, r, "poppyhost-admin", "an operator token is required (Authorization: Bearer ...)")
				return
			}
			t, err := store.OperatorTokenFor(r.Context(), tok)
			if errors.Is(err, ErrNotFound) {
				unauthorized(w, r, "poppyhost-admin", "the operator token is not valid")
				return
			}
			if err != nil {
				httpx.WriteError(w, r, err)
				return
			}
			audit.SetActor(r.Context(), t.Actor())
			next.ServeHTTP(w, r.WithContext(withCredential(r.Context(), "operator", t.ID)))
		})
	}
}

// RequireAPIKey authenticates a Company API key and puts its Company in
// the request context. Every change behind it is audited
// (audit.Middleware), in the key's name.
func RequireAPIKey(store *Store) func(http.Handler) http.Handler {
	audited := audit.Middleware(store.pool)
	return func(next http.Handler) http.Handler {
		return audited(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			tok := bearer(r)
			if tok == "" {
				unauthorized(w, r, "poppyhost-company", "a Company API key is required (Authorization: Bearer ...)")
				return
			}
			c, k, err := store.APIKeyFor(r.Context(), tok)
			if errors.Is(err, ErrNotFound) {
				unauthorized(w, r, "poppyhost-company", "the API key is not valid")
				return
			}
			if err != nil {
				httpx.WriteError(w, r, err)
				return
			}
			audit.SetActor(r.Context(), k.Actor())
			audit.SetCompany(r.Context(), c.ID, c.Slug)
			ctx := withCredential(WithCompany(r.Context(), c), "api-key", k.ID)
			next.ServeHTTP(w, r.WithContext(ctx))
		}))
	}
}

// companyBody is a Company as the admin API reads it.
type companyBody struct {
	Slug string `json:"slug"`
	Settings
}

// CompanyView is a Company as the admin API shows it: its settings plus the
// URLs derived from them.
type CompanyView struct {
	Slug string `json:"slug"`
	Settings
	Identifier string    `json:"identifier"`
	Issuer     string    `json:"issuer,omitempty"`
	CreatedAt  time.Time `json:"created_at"`
	UpdatedAt  time.Time `json:"updated_at"`
}

func (a *Admin) view(c *Company) CompanyView {
	return CompanyView{
		Slug: c.Slug, Settings: c.Settings,
		Identifier: a.urls.Identifier(c), Issuer: a.urls.Issuer(c),
		CreatedAt: c.CreatedAt, UpdatedAt: c.UpdatedAt,
	}
}

// Normalize fills defaults left empty and turns absent lists into empty
// ones, so stored documents have one shape.
func Normalize(s *Settings) {
	if s.Conversations.Access == "" {
		s.Conversations.Access = "session"
	}
	if s.Domains == nil {
		s.Domains = []string{}
	}
	if s.Auth.Scopes == nil {
		s.Auth.Scopes = map[string]string{}
	}
	if s.Auth.ScopeHints == nil {
		s.Auth.ScopeHints = map[string]ScopeHint{}
	}
	if s.Auth.OtherAuthorizationServers == nil {
		s.Auth.OtherAuthorizationServers = []string{}
	}
	if s.ExcludedTasks == nil {
		s.ExcludedTasks = []ExcludedTask{}
	}
	if s.APIs == nil {
		s.APIs = []API{}
	}
	if s.Extensions == nil {
		s.Extensions = map[string]map[string]any{}
	}
	if s.Feedback.Alternatives == nil {
		s.Feedback.Alternatives = []TaskAlternative{}
	}
	if s.Agents.Accept == "" {
		s.Agents.Accept = AcceptAll
	}
	if s.Agents.ClientIDs == nil {
		s.Agents.ClientIDs = []string{}
	}
	if s.Agents.SignInRefused == nil {
		s.Agents.SignInRefused = map[string][]string{}
	}
	for id, grants := range s.Agents.SignInRefused {
		if grants == nil {
			s.Agents.SignInRefused[id] = []string{}
		}
	}
	if s.Web.ScopeRules == nil {
		s.Web.ScopeRules = []WebScopeRule{}
	}
	if s.SkillIndex != nil && s.SkillIndex.Skills == nil {
		s.SkillIndex.Skills = []Skill{}
	}
}

// decodeCompany reads a Company body strictly on top of the defaults.
func decodeCompany(raw []byte) (companyBody, error) {
	b := companyBody{Settings: DefaultSettings()}
	if err := httpx.Unmarshal(raw, &b, httpx.DecodeOptions{Strict: true}); err != nil {
		return b, err
	}
	Normalize(&b.Settings)
	return b, nil
}

func (a *Admin) publicHost() string { return a.urls.Public.Hostname() }

// FieldErrors returns the fields of a Company's body that err names, each
// with its message, as the admin API's error body lists them: those of an
// invalid_request (Validate, a value that does not decode) and the one of
// a ConflictError; nil for any other error. Paths are the settings' JSON
// members, dotted, with [i] for an item of a list.
func FieldErrors(err error) []httpx.FieldError {
	var (
		ce *ConflictError
		he *httpx.Error
	)
	switch {
	case errors.As(err, &ce):
		return []httpx.FieldError{{Field: ce.Field, Message: ce.Message}}
	case errors.As(err, &he) && he.Code == httpx.CodeInvalidRequest:
		return he.Fields
	}
	return nil
}

func (a *Admin) writeStoreError(w http.ResponseWriter, r *http.Request, err error) {
	var ce *ConflictError
	switch {
	case errors.As(err, &ce):
		httpx.WriteError(w, r, &httpx.Error{Code: httpx.CodeConflict, Description: ce.Error(), Fields: FieldErrors(err)})
	case errors.Is(err, ErrNotFound):
		httpx.NotFound(w, r)
	default:
		httpx.WriteError(w, r, err)
	}
}

func (a *Admin) createCompany(w http.ResponseWriter, r *http.Request) {
	var raw json.RawMessage
	if err := httpx.DecodeJSON(w, r, &raw, httpx.DecodeOptions{MaxBytes: maxAdminBody}); err != nil {
		httpx.WriteError(w, r, err)
		return
	}
	b, err := decodeCompany(raw)
	if err != nil {
		httpx.WriteError(w, r, err)
		return
	}
	if err := Validate(b.Slug, &b.Settings, a.publicHost(), a.allowPrivate); err != nil {
		httpx.WriteError(w, r, err)
		return
	}
	c, err := a.store.Create(r.Context(), b.Slug, b.Settings)
	if err != nil {
		a.writeStoreError(w, r, err)
		return
	}
	w.Header().Set("Location", "/admin/v1/companies/"+c.Slug)
	httpx.WriteJSON(w, http.StatusCreated, a.view(c))
}

func (a *Admin) listCompanies(w http.ResponseWriter, r *http.Request) {
	limit, err := httpx.QueryInt(r, "limit", 100, 1, 500)
	if err != nil {
		httpx.WriteError(w, r, err)
		return
	}
	list, err := a.store.List(r.Context(), r.URL.Query().Get("after"), int(limit))
	if err != nil {
		httpx.WriteError(w, r, err)
		return
	}
	out := struct {
		Companies []CompanyView `json:"companies"`
		Next      string        `json:"next,omitempty"`
	}{Companies: make([]CompanyView, 0, len(list))}
	for _, c := range list {
		out.Companies = append(out.Companies, a.view(c))
	}
	if len(list) == int(limit) {
		out.Next = list[len(list)-1].Slug
	}
	httpx.WriteJSON(w, http.StatusOK, out)
}

// getCompany answers the Company with its ETag, which a PATCH sends back
// in If-Match.
func (a *Admin) getCompany(w http.ResponseWriter, r *http.Request) {
	httpx.WriteJSONTagged(w, http.StatusOK, a.view(FromContext(r.Context())))
}

// patchCompany applies a JSON merge patch (RFC 7396) to the Company's
// settings; null resets a setting to its default. The patch is merged into
// the Company as stored when the write happens, with its row locked
// (Store.Modify), not into the copy read when the request came in:
// concurrent patches each see the one before, so none undoes another.
// If-Match is checked there too, against the Company as stored, so of two
// patches sent with the same ETag only the first is applied.
func (a *Admin) patchCompany(w http.ResponseWriter, r *http.Request) {
	cond := httpx.IfMatch(r)
	var patch json.RawMessage
	if err := httpx.DecodeJSON(w, r, &patch, httpx.DecodeOptions{MaxBytes: maxAdminBody}); err != nil {
		httpx.WriteError(w, r, err)
		return
	}
	if len(patch) == 0 || patch[0] != '{' {
		httpx.WriteError(w, r, httpx.Errorf(httpx.CodeInvalidRequest, "the body must be a JSON object (a merge patch, RFC 7396)"))
		return
	}
	out, err := a.PatchSettings(r.Context(), FromContext(r.Context()).ID, cond, patch)
	if err != nil {
		a.writeStoreError(w, r, err)
		return
	}
	httpx.WriteJSONTagged(w, http.StatusOK, a.view(out))
}

// Version is the ETag the admin and Company APIs answer c with; a write
// that sends it back (If-Match, httpx.MatchTag) applies only while c is
// unchanged.
func (a *Admin) Version(c *Company) (string, error) { return httpx.ETag(a.view(c)) }

// PatchSettings applies a JSON merge patch to the settings of the Company
// companyID as PATCH /admin/v1/companies/{slug} does, for every caller
// that changes settings (the admin API, the console): cond is checked
// against the Company's Version and the patch merged and validated with
// its row locked (Store.Modify), and nothing is written unless both pass.
// A bad value is an *httpx.Error of code invalid_request whose Fields name
// each bad setting by its path in the settings' JSON (organization.name,
// domains[1], auth.scopes.read); a domain another Company holds is a
// *ConflictError naming its field; a stale cond is precondition_failed.
func (a *Admin) PatchSettings(ctx context.Context, companyID int64, cond httpx.Precondition, patch []byte) (*Company, error) {
	return a.store.Modify(ctx, companyID, func(c *Company) (Settings, error) {
		tag, err := a.Version(c)
		if err != nil {
			return Settings{}, err
		}
		if err := cond.Check(tag); err != nil {
			return Settings{}, err
		}
		return a.mergePatch(c, patch)
	})
}

// mergePatch returns c's settings with patch merged in, validated.
func (a *Admin) mergePatch(c *Company, patch []byte) (Settings, error) {
	current, err := json.Marshal(companyBody{Slug: c.Slug, Settings: c.Settings})
	if err != nil {
		return Settings{}, err
	}
	merged, err := jsonpatch.MergePatch(current, patch)
	if err != nil {
		return Settings{}, httpx.Errorf(httpx.CodeInvalidRequest, "the merge patch cannot be applied")
	}
	b, err := decodeCompany(merged)
	if err != nil {
		return Settings{}, err
	}
	if b.Slug != c.Slug {
		return Settings{}, httpx.Invalid(httpx.FieldError{Field: "slug", Message: "cannot change: the slug is part of the Company's issuer"})
	}
	if err := Validate(b.Slug, &b.Settings, a.publicHost(), a.allowPrivate); err != nil {
		return Settings{}, err
	}
	return b.Settings, nil
}

func (a *Admin) deleteCompany(w http.ResponseWriter, r *http.Request) {
	if err := a.store.Delete(r.Context(), FromContext(r.Context()).ID); err != nil {
		a.writeStoreError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (a *Admin) createAccount(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Username string `json:"username"`
		Password string `json:"password"`
	}
	if err := httpx.DecodeJSON(w, r, &body, httpx.DecodeOptions{Strict: true, MaxBytes: 4 << 10}); err != nil {
		httpx.WriteError(w, r, err)
		return
	}
	var f httpx.Fields
	if msg := accounts.CheckUsername(body.Username); msg != "" {
		f.Add("username", "%s", msg)
	}
	if msg := accounts.CheckPassword(body.Password); msg != "" {
		f.Add("password", "%s", msg)
	}
	if err := f.Err(); err != nil {
		httpx.WriteError(w, r, err)
		return
	}
	audit.Note(r.Context(), "username", "password")
	acct, err := a.accounts.Create(r.Context(), FromContext(r.Context()).ID, body.Username, body.Password)
	if errors.Is(err, accounts.ErrTaken) {
		httpx.WriteError(w, r, &httpx.Error{Code: httpx.CodeConflict, Description: "username: is taken",
			Fields: []httpx.FieldError{{Field: "username", Message: "is taken"}}})
		return
	}
	if err != nil {
		httpx.WriteError(w, r, err)
		return
	}
	httpx.WriteJSON(w, http.StatusCreated, acct)
}

type nameBody struct {
	Name string `json:"name"`
}

// decodeName reads an optional {"name"} body; an empty body is fine.
func decodeName(w http.ResponseWriter, r *http.Request) (string, error) {
	var body nameBody
	if r.ContentLength != 0 {
		if err := httpx.DecodeJSON(w, r, &body, httpx.DecodeOptions{Strict: true, MaxBytes: 4 << 10}); err != nil {
			return "", err
		}
	}
	return body.Name, CheckKeyName(body.Name)
}

// CheckKeyName checks the name of an API key or operator token: optional
// free text of at most 200 characters (httpx.TextProblem). Its error
// names field "name".
func CheckKeyName(name string) error {
	var f httpx.Fields
	f.Text("name", name, false, maxName, true)
	return f.Err()
}

func (a *Admin) createAPIKey(w http.ResponseWriter, r *http.Request) {
	name, err := decodeName(w, r)
	if err != nil {
		httpx.WriteError(w, r, err)
		return
	}
	k, secret, err := a.store.CreateAPIKey(r.Context(), FromContext(r.Context()).ID, name)
	if err != nil {
		httpx.WriteError(w, r, err)
		return
	}
	httpx.WriteJSON(w, http.StatusCreated, struct {
		APIKey
		Key string `json:"key"`
	}{k, secret})
}

func (a *Admin) listAPIKeys(w http.ResponseWriter, r *http.Request) {
	keys, err := a.store.ListAPIKeys(r.Context(), FromContext(r.Context()).ID)
	if err != nil {
		httpx.WriteError(w, r, err)
		return
	}
	httpx.WriteJSON(w, http.StatusOK, struct {
		APIKeys []APIKey `json:"api_keys"`
	}{keys})
}

func idParam(r *http.Request) (int64, bool) {
	id, err := strconv.ParseInt(chi.URLParam(r, "id"), 10, 64)
	return id, err == nil && id > 0
}

func (a *Admin) revokeAPIKey(w http.ResponseWriter, r *http.Request) {
	id, ok := idParam(r)
	if !ok {
		httpx.NotFound(w, r)
		return
	}
	if err := a.store.RevokeAPIKey(r.Context(), FromContext(r.Context()).ID, id); err != nil {
		a.writeStoreError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (a *Admin) createOperatorToken(w http.ResponseWriter, r *http.Request) {
	name, err := decodeName(w, r)
	if err != nil {
		httpx.WriteError(w, r, err)
		return
	}
	t, secret, err := a.store.CreateOperatorToken(r.Context(), name)
	if err != nil {
		httpx.WriteError(w, r, err)
		return
	}
	httpx.WriteJSON(w, http.StatusCreated, struct {
		OperatorToken
		Token string `json:"token"`
	}{t, secret})
}

func (a *Admin) listOperatorTokens(w http.ResponseWriter, r *http.Request) {
	tokens, err := a.store.ListOperatorTokens(r.Context())
	if err != nil {
		httpx.WriteError(w, r, err)
		return
	}
	httpx.WriteJSON(w, http.StatusOK, struct {
		OperatorTokens []OperatorToken `json:"operator_tokens"`
	}{tokens})
}

// listAudit answers the whole audit log: every Company's changes, those
// of deleted Companies and the operator's own.
func (a *Admin) listAudit(w http.ResponseWriter, r *http.Request) { a.audit.ServeList(w, r, 0) }

// listCompanyAudit answers the audit log of the request's Company.
func (a *Admin) listCompanyAudit(w http.ResponseWriter, r *http.Request) {
	a.audit.ServeList(w, r, FromContext(r.Context()).ID)
}

func (a *Admin) revokeOperatorToken(w http.ResponseWriter, r *http.Request) {
	id, ok := idParam(r)
	if !ok {
		httpx.NotFound(w, r)
		return
	}
	if err := a.store.RevokeOperatorToken(r.Context(), id); err != nil {
		a.writeStoreError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
