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

	"github.com/poppyhost/poppyhost/internal/audit"
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
	return decodeSettings(c, raw)
}

// decodeSettings returns c with its settings decoded from raw, as stored.
func decodeSettings(c Company, raw []byte) (*Company, error) {
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
		if err := insertDomains(ctx, tx, c.ID, settings); err != nil {
			return err
		}
		audit.SetCompany(ctx, c.ID, c.Slug)
		// The fields named are those set to other than their defaults.
		defaults := DefaultSettings()
		Normalize(&defaults)
		if err := audit.NoteChanged(ctx, defaults, c.Settings); err != nil {
			return err
		}
		return audit.Record(ctx, tx)
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
		if err := audit.NoteChanged(ctx, c.Settings, out.Settings); err != nil {
			return err
		}
		return audit.Record(ctx, tx)
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
		if _, err = tx.Exec(ctx, `INSERT INTO retired_slugs (slug) VALUES ($1) ON CONFLICT DO NOTHING`, slug); err != nil {
			return err
		}
		return audit.Record(ctx, tx)
	})
	if err == nil {
		s.notifyChanged(companyID)
	}
	return err
}

// Secrets: API keys and operator tokens are 32 random bytes, shown once with
// a prefix that says what they are, and stored as SHA-256 hashes. A fast
// hash is right here: the secrets are random, so there is nothing to guess.
// The first characters of each (shownPrefix) are kept in the clear, so a
// person can tell which credential a list or an audit entry names: eight
// characters are 48 of the secret's 256 bits, which leaves nothing to
// guess either.

// APIKeyPrefix starts every Company API key.
const APIKeyPrefix = "phk_"

// shownPrefixChars is how many characters of a secret after its kind's
// prefix are kept in the clear.
const shownPrefixChars = 8

func newSecret(prefix string) string {
	var b [32]byte
	_, _ = rand.Read(b[:])
	return prefix + base64.RawURLEncoding.EncodeToString(b[:])
}

// shownPrefix is the part of secret, made by newSecret with kind, that is
// kept in the clear.
func shownPrefix(kind, secret string) string { return secret[:len(kind)+shownPrefixChars] }

func hashSecret(s string) []byte {
	h := sha256.Sum256([]byte(s))
	return h[:]
}

// touchAfter is how long after a credential's last recorded use another
// use is recorded: its last_used_at is written at most this often, not on
// every request.
const touchAfter = "1 minute"

// touch records that the credential id of table was used now, unless a use
// within touchAfter is recorded already (stale says whether the reading
// found none). Of concurrent requests only one writes: the row is
// checked again when its lock is had.
func (s *Store) touch(ctx context.Context, table string, id int64, stale bool) error {
	if !stale {
		return nil
	}
	_, err := s.pool.Exec(ctx, `UPDATE `+table+` SET last_used_at = now() WHERE id = $1
		AND (last_used_at IS NULL OR last_used_at < now() - interval '`+touchAfter+`')`, id)
	return err
}

// staleColumn says whether a credential's last use was recorded more than
// touchAfter ago (or never).
const staleColumn = `(last_used_at IS NULL OR last_used_at < now() - interval '` + touchAfter + `')`

// Credential is what is kept of an operator token or a Company API key:
// never the secret, only its prefix.
type Credential struct {
	ID         int64      `json:"id"`
	Name       string     `json:"name"`
	Prefix     string     `json:"prefix"`
	CreatedAt  time.Time  `json:"created_at"`
	LastUsedAt *time.Time `json:"last_used_at,omitempty"`
	RevokedAt  *time.Time `json:"revoked_at,omitempty"`
}

// credentialColumns are a Credential's columns in both tables, for scan.
const credentialColumns = `id, name, prefix, created_at, last_used_at, revoked_at`

// scanCredential reads a Credential's columns, then extra.
func scanCredential(row pgx.Row, extra ...any) (Credential, error) {
	var c Credential
	err := row.Scan(append([]any{&c.ID, &c.Name, &c.Prefix, &c.CreatedAt, &c.LastUsedAt, &c.RevokedAt}, extra...)...)
	return c, db.NotFound(err, ErrNotFound)
}

// APIKey describes a Company API key.
type APIKey struct{ Credential }

// Actor is the key as the audit log names it.
func (k APIKey) Actor() audit.Actor {
	return audit.Actor{Kind: audit.KindAPIKey, ID: k.ID, Prefix: k.Prefix, Name: k.Name}
}

const apiKeyColumns = `k.id, k.name, k.prefix, k.created_at, k.last_used_at, k.revoked_at`

func scanAPIKey(row pgx.Row, extra ...any) (APIKey, error) {
	c, err := scanCredential(row, extra...)
	return APIKey{c}, err
}

// CreateAPIKey makes a new key for a Company and returns it with its
// secret, which is not kept.
func (s *Store) CreateAPIKey(ctx context.Context, companyID int64, name string) (APIKey, string, error) {
	secret := newSecret(APIKeyPrefix)
	var k APIKey
	err := db.InTx(ctx, s.pool, func(tx pgx.Tx) error {
		var err error
		k, err = scanAPIKey(tx.QueryRow(ctx, `INSERT INTO company_api_keys AS k (company_id, name, prefix, key_hash)
			VALUES ($1, $2, $3, $4) RETURNING `+apiKeyColumns, companyID, name, shownPrefix(APIKeyPrefix, secret),
			hashSecret(secret)))
		if err != nil {
			return err
		}
		audit.Note(ctx, "name")
		return audit.Record(ctx, tx)
	})
	return k, secret, err
}

// ListAPIKeys lists a Company's keys, newest first.
func (s *Store) ListAPIKeys(ctx context.Context, companyID int64) ([]APIKey, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+apiKeyColumns+` FROM company_api_keys k
		WHERE k.company_id = $1 ORDER BY k.id DESC`, companyID)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (APIKey, error) { return scanAPIKey(row) })
}

// RevokeAPIKey revokes one of a Company's keys; from the next request on,
// on every replica, the key is refused (each request reads the key's row:
// there is no cache to wait for). Revoking twice is fine.
func (s *Store) RevokeAPIKey(ctx context.Context, companyID, keyID int64) error {
	return s.revoke(ctx, `UPDATE company_api_keys SET revoked_at = coalesce(revoked_at, now())
		WHERE company_id = $1 AND id = $2`, companyID, keyID)
}

// revoke runs the revoking statement sql with args and records the change
// in its transaction; no row means ErrNotFound.
func (s *Store) revoke(ctx context.Context, sql string, args ...any) error {
	return db.InTx(ctx, s.pool, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, sql, args...)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return ErrNotFound
		}
		audit.Note(ctx, "revoked_at")
		return audit.Record(ctx, tx)
	})
}

// APIKeyFor returns the live key secret is and the Company it belongs to,
// or ErrNotFound, and records the key's use (at most once a minute).
func (s *Store) APIKeyFor(ctx context.Context, secret string) (*Company, APIKey, error) {
	if !strings.HasPrefix(secret, APIKeyPrefix) {
		return nil, APIKey{}, ErrNotFound
	}
	var (
		c     Company
		raw   []byte
		stale bool
	)
	k, err := scanAPIKey(s.pool.QueryRow(ctx, `SELECT `+apiKeyColumns+`, `+companyColumns+`, `+staleColumn+`
		FROM company_api_keys k JOIN companies c ON c.id = k.company_id
		WHERE k.key_hash = $1 AND k.revoked_at IS NULL`, hashSecret(secret)),
		&c.ID, &c.Slug, &raw, &c.CreatedAt, &c.UpdatedAt, &stale)
	if err != nil {
		return nil, APIKey{}, err
	}
	co, err := decodeSettings(c, raw)
	if err != nil {
		return nil, APIKey{}, err
	}
	return co, k, s.touch(ctx, "company_api_keys", k.ID, stale)
}

// CompanyForAPIKey returns the Company a live key belongs to, and records
// the key's use as APIKeyFor does.
func (s *Store) CompanyForAPIKey(ctx context.Context, secret string) (*Company, error) {
	c, _, err := s.APIKeyFor(ctx, secret)
	return c, err
}

// EnsureOperatorToken stores token (the bootstrap one from the
// environment) unless it is stored already. Its prefix is not kept: the
// operator chose it, so part of it may be guessable.
func (s *Store) EnsureOperatorToken(ctx context.Context, name, token string) error {
	_, err := s.pool.Exec(ctx, `INSERT INTO operator_tokens (name, token_hash) VALUES ($1, $2)
		ON CONFLICT (token_hash) DO NOTHING`, name, hashSecret(token))
	return err
}

// OperatorTokenPrefix starts every operator token the admin API creates.
const OperatorTokenPrefix = "pho_"

// OperatorToken describes an operator token.
type OperatorToken struct{ Credential }

// Actor is the token as the audit log names it.
func (t OperatorToken) Actor() audit.Actor {
	return audit.Actor{Kind: audit.KindOperatorToken, ID: t.ID, Prefix: t.Prefix, Name: t.Name}
}

func scanOperatorToken(row pgx.Row, extra ...any) (OperatorToken, error) {
	c, err := scanCredential(row, extra...)
	return OperatorToken{c}, err
}

// OperatorTokenFor returns the live operator token that token is, or
// ErrNotFound, and records its use (at most once a minute). Every request
// reads the token's row, so a revoked token is refused at once on every
// replica.
func (s *Store) OperatorTokenFor(ctx context.Context, token string) (OperatorToken, error) {
	var stale bool
	t, err := scanOperatorToken(s.pool.QueryRow(ctx, `SELECT `+credentialColumns+`, `+staleColumn+`
		FROM operator_tokens WHERE token_hash = $1 AND revoked_at IS NULL`, hashSecret(token)), &stale)
	if err != nil {
		return OperatorToken{}, err
	}
	return t, s.touch(ctx, "operator_tokens", t.ID, stale)
}

// CreateOperatorToken makes a new operator token and returns its secret,
// which is not kept.
func (s *Store) CreateOperatorToken(ctx context.Context, name string) (OperatorToken, string, error) {
	secret := newSecret(OperatorTokenPrefix)
	var t OperatorToken
	err := db.InTx(ctx, s.pool, func(tx pgx.Tx) error {
		var err error
		t, err = scanOperatorToken(tx.QueryRow(ctx, `INSERT INTO operator_tokens (name, prefix, token_hash)
			VALUES ($1, $2, $3) RETURNING `+credentialColumns, name, shownPrefix(OperatorTokenPrefix, secret),
			hashSecret(secret)))
		if err != nil {
			return err
		}
		audit.Note(ctx, "name")
		return audit.Record(ctx, tx)
	})
	return t, secret, err
}

// ListOperatorTokens lists the operator tokens, newest first.
func (s *Store) ListOperatorTokens(ctx context.Context) ([]OperatorToken, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+credentialColumns+` FROM operator_tokens ORDER BY id DESC`)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (OperatorToken, error) { return scanOperatorToken(row) })
}

// RevokeOperatorToken revokes an operator token; from the next request on,
// on every replica, it is refused.
func (s *Store) RevokeOperatorToken(ctx context.Context, id int64) error {
	return s.revoke(ctx, `UPDATE operator_tokens SET revoked_at = coalesce(revoked_at, now()) WHERE id = $1`, id)
}
