package tenant

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/poppyhost/poppyhost/internal/db"
)

// ErrNotFound means no such Company (or key) exists.
var ErrNotFound = errors.New("not found")

// ConflictError means a unique value is already taken.
type ConflictError struct {
	Field   string
	Message string
}

func (e *ConflictError) Error() string { return e.Field + ": " + e.Message }

// Store keeps Companies, their domains and API keys, and operator tokens in
// PostgreSQL. Every query on a Company's rows is filtered by its ID.
type Store struct {
	pool     *pgxpool.Pool
	onModify []ModifyHook

	mu      sync.Mutex
	changed []func(companyID int64) // the Caches on this Store (NewCache)
}

// notifyChanged tells the Caches on this Store that a Company changed,
// once the change committed: this replica's see it at once, before the
// notification that tells every replica's arrives.
func (s *Store) notifyChanged(companyID int64) {
	s.mu.Lock()
	fs := s.changed
	s.mu.Unlock()
	for _, f := range fs {
		f(companyID)
	}
}

// NewStore returns a Store on pool.
func NewStore(pool *pgxpool.Pool) *Store { return &Store{pool: pool} }

// ModifyHook is told of a change of a Company's settings in the
// transaction that writes it, with the Company before and after; its
// error aborts the change. Packages that keep values computed from
// settings (conversations' deadlines) compute them again here.
type ModifyHook func(ctx context.Context, tx pgx.Tx, before, after *Company) error

// OnModify adds a hook that Modify calls. Add hooks before serving.
func (s *Store) OnModify(h ModifyHook) { s.onModify = append(s.onModify, h) }

const companyColumns = `c.id, c.slug, c.settings, c.created_at, c.updated_at`

func scanCompany(row pgx.Row) (*Company, error) {
	var (
		c   Company
		raw []byte
	)
	if err := row.Scan(&c.ID, &c.Slug, &raw, &c.CreatedAt, &c.UpdatedAt); err != nil {
		return nil, db.NotFound(err, ErrNotFound)
	}
	// Settings stored before a setting existed get its default.
	c.Settings = DefaultSettings()
	if err := json.Unmarshal(raw, &c.Settings); err != nil {
		return nil, fmt.Errorf("company %s: stored settings: %w", c.Slug, err)
	}
	Normalize(&c.Settings)
	return &c, nil
}

// mapWriteError turns a unique violation of the slug into a ConflictError;
// everything else passes through.
func mapWriteError(err error) error {
	if db.IsConflict(err, "companies_slug_key") {
		return &ConflictError{Field: "slug", Message: "is taken by another Company"}
	}
	return err
}

// domainField is the path of domain d in s: organization.domain or
// domains[i].
func domainField(s Settings, d string) string {
	if d == s.Organization.Domain {
		return "organization.domain"
	}
	for i, x := range s.Domains {
		if x == d {
			return fmt.Sprintf("domains[%d]", i)
		}
	}
	return "domains"
}

// Create stores a new Company with its domains.
func (s *Store) Create(ctx context.Context, slug string, settings Settings) (*Company, error) {
	raw, err := json.Marshal(settings)
	if err != nil {
		return nil, err
	}
	var c *Company
	err = db.InTx(ctx, s.pool, func(tx pgx.Tx) error {
		var err error
		c, err = scanCompany(tx.QueryRow(ctx,
			`INSERT INTO companies AS c (slug, settings) VALUES ($1, $2) RETURNING `+companyColumns, slug, raw))
		if err != nil {
			return err
		}
		// Checked after the insert: a Delete of this slug that committed
		// while the insert waited on it is visible to this statement.
		var retired bool
		if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM retired_slugs WHERE slug = $1)`, slug).Scan(&retired); err != nil {
			return err
		}
		if retired {
			return &ConflictError{Field: "slug", Message: "belonged to a deleted Company; an issuer stands for one Company only (spec 3.2), so choose another"}
		}
		return insertDomains(ctx, tx, c.ID, settings)
	})
	if err != nil {
		return nil, mapWriteError(err)
	}
	return c, nil
}

// insertDomains stores the domains of s as companyID's; a domain another
// Company holds is a ConflictError naming its field in s.
func insertDomains(ctx context.Context, tx db.Executor, companyID int64, s Settings) error {
	for i, d := range s.AllDomains() {
		_, err := tx.Exec(ctx,
			`INSERT INTO company_domains (domain, company_id, is_primary) VALUES ($1, $2, $3)`,
			d, companyID, i == 0)
		if db.IsConflict(err, "company_domains_pkey") {
			return &ConflictError{Field: domainField(s, d), Message: fmt.Sprintf("%s belongs to another Company", d)}
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// Modify changes a Company's settings and domains atomically: in one
// transaction it locks the Company's row (SELECT ... FOR NO KEY UPDATE,
// which the foreign-key checks of rows that name the Company do not wait
// for, so its traffic goes on while hooks run), passes
// the Company as stored to change, and writes the settings change returns.
// Concurrent Modify calls on one Company thus run one after another, each
// on what the one before wrote, and no change is lost; a change computed
// from a copy read earlier (the request's context) could undo another's.
// An error from change aborts with nothing written and is returned as is;
// ErrNotFound means the Company is gone.
func (s *Store) Modify(ctx context.Context, companyID int64, change func(c *Company) (Settings, error)) (*Company, error) {
	var (
		out      *Company
		settings Settings
	)
	err := db.InTx(ctx, s.pool, func(tx pgx.Tx) error {
		c, err := scanCompany(tx.QueryRow(ctx,
			`SELECT `+companyColumns+` FROM companies c WHERE c.id = $1 FOR NO KEY UPDATE`, companyID))
		if err != nil {
			return err
		}
		if settings, err = change(c); err != nil {
			return err
		}
		raw, err := json.Marshal(settings)
		if err != nil {
			return err
		}
		out, err = scanCompany(tx.QueryRow(ctx,
			`UPDATE companies AS c SET settings = $2, updated_at = now() WHERE c.id = $1 RETURNING `+companyColumns,
			companyID, raw))
		if err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `DELETE FROM company_domains WHERE company_id = $1`, companyID); err != nil {
			return err
		}
		if err := insertDomains(ctx, tx, companyID, settings); err != nil {
			return err
		}
		for _, h := range s.onModify {
			if err := h(ctx, tx, c, out); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, mapWriteError(err)
	}
	s.notifyChanged(companyID)
	return out, nil
}

// Get returns the Company with slug.
func (s *Store) Get(ctx context.Context, slug string) (*Company, error) {
	return scanCompany(s.pool.QueryRow(ctx, `SELECT `+companyColumns+` FROM companies c WHERE c.slug = $1`, slug))
}

// GetByID returns the Company with id, for background jobs that name
// Companies by their ID.
func (s *Store) GetByID(ctx context.Context, id int64) (*Company, error) {
	return scanCompany(s.pool.QueryRow(ctx, `SELECT `+companyColumns+` FROM companies c WHERE c.id = $1`, id))
}

// GetByDomain returns the Company that domain belongs to.
func (s *Store) GetByDomain(ctx context.Context, domain string) (*Company, error) {
	return scanCompany(s.pool.QueryRow(ctx, `SELECT `+companyColumns+`
		FROM company_domains d JOIN companies c ON c.id = d.company_id WHERE d.domain = $1`, domain))
}

// List returns up to limit Companies ordered by slug, after the slug after.
func (s *Store) List(ctx context.Context, after string, limit int) ([]*Company, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+companyColumns+` FROM companies c
		WHERE c.slug > $1 ORDER BY c.slug LIMIT $2`, after, limit)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []*Company
	for rows.Next() {
		c, err := scanCompany(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, rows.Err()
}

// Delete removes a Company and, by cascade, every row it owns, and retires
// its slug.
func (s *Store) Delete(ctx context.Context, companyID int64) error {
	err := db.InTx(ctx, s.pool, func(tx pgx.Tx) error {
		var slug string
		err := tx.QueryRow(ctx, `DELETE FROM companies WHERE id = $1 RETURNING slug`, companyID).Scan(&slug)
		if err != nil {
			return db.NotFound(err, ErrNotFound)
		}
		_, err = tx.Exec(ctx, `INSERT INTO retired_slugs (slug) VALUES ($1) ON CONFLICT DO NOTHING`, slug)
		return err
	})
	if err == nil {
		s.notifyChanged(companyID)
	}
	return err
}

// Secrets: API keys and operator tokens are 32 random bytes, shown once with
// a prefix that says what they are, and stored as SHA-256 hashes. A fast
// hash is right here: the secrets are random, so there is nothing to guess.

// APIKeyPrefix starts every Company API key.
const APIKeyPrefix = "phk_"

func newSecret(prefix string) string {
	var b [32]byte
	_, _ = rand.Read(b[:])
	return prefix + base64.RawURLEncoding.EncodeToString(b[:])
}

func hashSecret(s string) []byte {
	h := sha256.Sum256([]byte(s))
	return h[:]
}

// APIKey describes a Company API key; the secret itself is never stored.
type APIKey struct {
	ID        int64      `json:"id"`
	Name      string     `json:"name"`
	CreatedAt time.Time  `json:"created_at"`
	RevokedAt *time.Time `json:"revoked_at,omitempty"`
}

// CreateAPIKey makes a new key for a Company and returns it with its
// secret, which is not kept.
func (s *Store) CreateAPIKey(ctx context.Context, companyID int64, name string) (APIKey, string, error) {
	secret := newSecret(APIKeyPrefix)
	var k APIKey
	err := s.pool.QueryRow(ctx, `INSERT INTO company_api_keys (company_id, name, key_hash)
		VALUES ($1, $2, $3) RETURNING id, name, created_at`, companyID, name, hashSecret(secret)).
		Scan(&k.ID, &k.Name, &k.CreatedAt)
	return k, secret, err
}

// ListAPIKeys lists a Company's keys, newest first.
func (s *Store) ListAPIKeys(ctx context.Context, companyID int64) ([]APIKey, error) {
	rows, err := s.pool.Query(ctx, `SELECT id, name, created_at, revoked_at FROM company_api_keys
		WHERE company_id = $1 ORDER BY id DESC`, companyID)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (APIKey, error) {
		var k APIKey
		err := row.Scan(&k.ID, &k.Name, &k.CreatedAt, &k.RevokedAt)
		return k, err
	})
}

// RevokeAPIKey revokes one of a Company's keys. Revoking twice is fine.
func (s *Store) RevokeAPIKey(ctx context.Context, companyID, keyID int64) error {
	tag, err := s.pool.Exec(ctx, `UPDATE company_api_keys SET revoked_at = coalesce(revoked_at, now())
		WHERE company_id = $1 AND id = $2`, companyID, keyID)
	if err != nil {
		return err
	}
	if tag.RowsAffected() == 0 {
		return ErrNotFound
	}
	return nil
}

// CompanyForAPIKey returns the Company a live key belongs to.
func (s *Store) CompanyForAPIKey(ctx context.Context, secret string) (*Company, error) {
	if !strings.HasPrefix(secret, APIKeyPrefix) {
		return nil, ErrNotFound
	}
	return scanCompany(s.pool.QueryRow(ctx, `SELECT `+companyColumns+`
		FROM company_api_keys k JOIN companies c ON c.id = k.company_id
		WHERE k.key_hash = $1 AND k.revoked_at IS NULL`, hashSecret(secret)))
}

// EnsureOperatorToken stores token (the bootstrap one from the
// environment) unless it is stored already.
func (s *Store) EnsureOperatorToken(ctx context.Context, name, token string) error {
	_, err := s.pool.Exec(ctx, `INSERT INTO operator_tokens (name, token_hash) VALUES ($1, $2)
		ON CONFLICT (token_hash) DO NOTHING`, name, hashSecret(token))
	return err
}

// OperatorTokenValid reports whether token is a live operator token.
func (s *Store) OperatorTokenValid(ctx context.Context, token string) (bool, error) {
	var ok bool
	err := s.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM operator_tokens
		WHERE token_hash = $1 AND revoked_at IS NULL)`, hashSecret(token)).Scan(&ok)
	return ok, err
}

// OperatorTokenPrefix starts every operator token the admin API creates.
const OperatorTokenPrefix = "pho_"

// OperatorToken describes an operator token; the secret is never stored.
type OperatorToken struct {
	ID        int64      `json:"id"`
	Name      string     `json:"name"`
	CreatedAt time.Time  `json:"created_at"`
	RevokedAt *time.Time `json:"revoked_at,omitempty"`
}

// CreateOperatorToken makes a new operator token and returns its secret,
// which is not kept.
func (s *Store) CreateOperatorToken(ctx context.Context, name string) (OperatorToken, string, error) {
	secret := newSecret(OperatorTokenPrefix)
	var t OperatorToken
	err := s.pool.QueryRow(ctx, `INSERT INTO operator_tokens (name, token_hash) VALUES ($1, $2)
		RETURNING id, name, created_at`, name, hashSecret(secret)).Scan(&t.ID, &t.Name, &t.CreatedAt)
	return t, secret, err
}

// RevokeOperatorToken revokes an operator token.
func (s *Store) RevokeOperatorToken(ctx context.Context, id int64) error {
	tag, err := s.pool.Exec(ctx, `UPDATE operator_tokens SET revoked_at = coalesce(revoked_at, now()) WHERE id = $1`, id)
	if err != nil {
		return err
	}
	if tag.RowsAffected() == 0 {
		return ErrNotFound
	}
	return nil
}
