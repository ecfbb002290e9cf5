package registry

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/poppyhost/poppyhost/internal/audit"
	"github.com/poppyhost/poppyhost/internal/db"
)

// ErrNotFound: no API or tool of that name.
var ErrNotFound = errors.New("registry: not found")

// Store keeps registered APIs and tools in PostgreSQL. Every query is for
// one Company.
type Store struct {
	db db.Executor
}

// NewStore returns a Store on db, a pool or a transaction.
func NewStore(db db.Executor) *Store { return &Store{db: db} }

const apiColumns = `name, origin, description, openapi, openapi_url, timeout_seconds, max_request_bytes,
	max_response_bytes, created_at, updated_at`

func scanAPI(row pgx.Row) (*API, error) {
	var a API
	err := row.Scan(&a.Name, &a.Origin, &a.Description, &a.OpenAPI, &a.OpenAPIURL, &a.TimeoutSeconds,
		&a.MaxRequestBytes, &a.MaxResponseBytes, &a.CreatedAt, &a.UpdatedAt)
	if err != nil {
		return nil, db.NotFound(err, ErrNotFound)
	}
	return &a, nil
}

// PutAPI creates or replaces the API named a.Name, stamped now, and
// reports whether it was created.
func (s *Store) PutAPI(ctx context.Context, companyID int64, a *API, now time.Time) (created bool, err error) {
	err = s.db.QueryRow(ctx, `INSERT INTO gateway_apis (company_id, `+apiColumns+`)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $10)
		ON CONFLICT (company_id, name) DO UPDATE SET origin = EXCLUDED.origin, description = EXCLUDED.description,
			openapi = EXCLUDED.openapi, openapi_url = EXCLUDED.openapi_url, timeout_seconds = EXCLUDED.timeout_seconds,
			max_request_bytes = EXCLUDED.max_request_bytes, max_response_bytes = EXCLUDED.max_response_bytes,
			updated_at = EXCLUDED.updated_at
		RETURNING created_at, updated_at, xmax = 0`,
		companyID, a.Name, a.Origin, a.Description, a.OpenAPI, a.OpenAPIURL, a.TimeoutSeconds,
		a.MaxRequestBytes, a.MaxResponseBytes, now).Scan(&a.CreatedAt, &a.UpdatedAt, &created)
	return created, err
}

// GetAPI returns the API named name, or ErrNotFound.
func (s *Store) GetAPI(ctx context.Context, companyID int64, name string) (*API, error) {
	return scanAPI(s.db.QueryRow(ctx, `SELECT `+apiColumns+` FROM gateway_apis
		WHERE company_id = $1 AND name = $2`, companyID, name))
}

// APIUpdatedAt returns when the API named name last changed, or
// ErrNotFound: the gateway's cache checks it instead of reloading.
func (s *Store) APIUpdatedAt(ctx context.Context, companyID int64, name string) (time.Time, error) {
	var t time.Time
	err := s.db.QueryRow(ctx, `SELECT updated_at FROM gateway_apis WHERE company_id = $1 AND name = $2`,
		companyID, name).Scan(&t)
	return t, db.NotFound(err, ErrNotFound)
}

// ListAPIs returns the Company's APIs by name.
func (s *Store) ListAPIs(ctx context.Context, companyID int64) ([]*API, error) {
	rows, err := s.db.Query(ctx, `SELECT `+apiColumns+` FROM gateway_apis WHERE company_id = $1 ORDER BY name`, companyID)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (*API, error) { return scanAPI(r) })
}

// Listing is what poppy.json says of a registered API.
type Listing struct {
	Name        string
	Description string
}

// ListAPINames returns the Company's APIs' names and descriptions by name,
// without their descriptions' documents, for poppy.json.
func (s *Store) ListAPINames(ctx context.Context, companyID int64) ([]Listing, error) {
	rows, err := s.db.Query(ctx, `SELECT name, description FROM gateway_apis WHERE company_id = $1 ORDER BY name`, companyID)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowToStructByPos[Listing])
}

// DeleteAPI removes the API named name, or returns ErrNotFound.
func (s *Store) DeleteAPI(ctx context.Context, companyID int64, name string) error {
	tag, err := s.db.Exec(ctx, `DELETE FROM gateway_apis WHERE company_id = $1 AND name = $2`, companyID, name)
	if err == nil && tag.RowsAffected() == 0 {
		err = ErrNotFound
	}
	return err
}

const toolColumns = `name, title, description, input_schema, output_schema, annotations, scopes, url,
	timeout_seconds, created_at, updated_at`

func scanTool(row pgx.Row) (*Tool, error) {
	var t Tool
	err := row.Scan(&t.Name, &t.Title, &t.Description, &t.InputSchema, &t.OutputSchema, &t.Annotations, &t.Scopes,
		&t.URL, &t.TimeoutSeconds, &t.CreatedAt, &t.UpdatedAt)
	if err != nil {
		return nil, db.NotFound(err, ErrNotFound)
	}
	return &t, nil
}

// nullJSON stores an absent document as NULL.
func nullJSON(raw []byte) any {
	if len(raw) == 0 {
		return nil
	}
	return raw
}

// PutTool creates or replaces the tool named t.Name, stamped now, and
// reports whether it was created.
func (s *Store) PutTool(ctx context.Context, companyID int64, t *Tool, now time.Time) (created bool, err error) {
	if t.Scopes == nil {
		t.Scopes = []string{}
	}
	err = s.db.QueryRow(ctx, `INSERT INTO gateway_tools (company_id, `+toolColumns+`)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $11)
		ON CONFLICT (company_id, name) DO UPDATE SET title = EXCLUDED.title, description = EXCLUDED.description,
			input_schema = EXCLUDED.input_schema, output_schema = EXCLUDED.output_schema,
			annotations = EXCLUDED.annotations, scopes = EXCLUDED.scopes, url = EXCLUDED.url,
			timeout_seconds = EXCLUDED.timeout_seconds, updated_at = EXCLUDED.updated_at
		RETURNING created_at, updated_at, xmax = 0`,
		companyID, t.Name, t.Title, t.Description, t.InputSchema, nullJSON(t.OutputSchema), nullJSON(t.Annotations),
		t.Scopes, t.URL, t.TimeoutSeconds, now).Scan(&t.CreatedAt, &t.UpdatedAt, &created)
	return created, err
}

// GetTool returns the tool named name, or ErrNotFound.
func (s *Store) GetTool(ctx context.Context, companyID int64, name string) (*Tool, error) {
	return scanTool(s.db.QueryRow(ctx, `SELECT `+toolColumns+` FROM gateway_tools
		WHERE company_id = $1 AND name = $2`, companyID, name))
}

// ListTools returns the Company's tools by name.
func (s *Store) ListTools(ctx context.Context, companyID int64) ([]*Tool, error) {
	rows, err := s.db.Query(ctx, `SELECT `+toolColumns+` FROM gateway_tools WHERE company_id = $1 ORDER BY name`, companyID)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (*Tool, error) { return scanTool(r) })
}

// HasTools reports whether the Company has registered any tool, which
// puts its MCP server in poppy.json.
func (s *Store) HasTools(ctx context.Context, companyID int64) (bool, error) {
	var ok bool
	err := s.db.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM gateway_tools WHERE company_id = $1)`, companyID).Scan(&ok)
	return ok, err
}

// DeleteTool removes the tool named name, or returns ErrNotFound.
func (s *Store) DeleteTool(ctx context.Context, companyID int64, name string) error {
	tag, err := s.db.Exec(ctx, `DELETE FROM gateway_tools WHERE company_id = $1 AND name = $2`, companyID, name)
	if err == nil && tag.RowsAffected() == 0 {
		err = ErrNotFound
	}
	return err
}

// registrations counts the Company's rows of table (gateway_apis or
// gateway_tools) and reports whether one is named name.
func (s *Store) registrations(ctx context.Context, table string, companyID int64, name string) (int, bool, error) {
	if table != "gateway_apis" && table != "gateway_tools" {
		return 0, false, fmt.Errorf("registry: no registrations table %q", table)
	}
	var (
		n      int
		exists bool
	)
	err := s.db.QueryRow(ctx, `SELECT count(*), coalesce(bool_or(name = $2), false) FROM `+table+`
		WHERE company_id = $1`, companyID, name).Scan(&n, &exists)
	return n, exists, err
}

// PutAPIIf stores a as PutAPI does, in a transaction that first locks the
// API as stored and passes it to cond (nil when there is none): cond's
// error aborts with nothing written, so a version check in cond and the
// write are one step. The change is audited in the transaction.
func (s *Store) PutAPIIf(ctx context.Context, companyID int64, a *API, now time.Time, cond func(current *API) error) (bool, error) {
	return lockedPut(ctx, s, `SELECT `+apiColumns+` FROM gateway_apis`, scanAPI, companyID, a.Name, cond,
		func(ts *Store) (bool, error) { return ts.PutAPI(ctx, companyID, a, now) })
}

// PutToolIf stores t as PutTool does, after cond, as PutAPIIf.
func (s *Store) PutToolIf(ctx context.Context, companyID int64, t *Tool, now time.Time, cond func(current *Tool) error) (bool, error) {
	return lockedPut(ctx, s, `SELECT `+toolColumns+` FROM gateway_tools`, scanTool, companyID, t.Name, cond,
		func(ts *Store) (bool, error) { return ts.PutTool(ctx, companyID, t, now) })
}

// lockedPut runs put on a Store in a transaction after locking, with
// selectFrom, the company's registration named name and passing it to
// cond; then it records the audit entry in the transaction.
func lockedPut[T any](ctx context.Context, s *Store, selectFrom string, scan func(pgx.Row) (*T, error),
	companyID int64, name string, cond func(*T) error, put func(ts *Store) (bool, error)) (bool, error) {
	b, ok := s.db.(db.Beginner)
	if !ok {
		return false, errors.New("registry: the store cannot begin a transaction")
	}
	var created bool
	err := db.InTx(ctx, b, func(tx pgx.Tx) error {
		cur, err := scan(tx.QueryRow(ctx, selectFrom+` WHERE company_id = $1 AND name = $2 FOR UPDATE`, companyID, name))
		if err != nil && !errors.Is(err, ErrNotFound) {
			return err
		}
		if err := cond(cur); err != nil {
			return err
		}
		if created, err = put(&Store{db: tx}); err != nil {
			return err
		}
		return audit.Record(ctx, tx)
	})
	return created, err
}
