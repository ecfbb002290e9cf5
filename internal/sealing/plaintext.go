package sealing

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/jackc/pgx/v5"
)

// plainColumn is a column that held a secret in plaintext before
// migration 00025, and the column that holds it sealed since.
type plainColumn struct {
	table, plain, sealed string
	// row is the SQL expression, as text, of what identifies a row within
	// its Company's: the row argument of Seal.
	row     string
	purpose Purpose
}

var plainColumns = []plainColumn{
	{"signing_keys", "private_jwk", "private_jwk_sealed", "kid", SigningKey},
	{"company_secrets", "secret", "secret_sealed", "version::text", CompanySecret},
	{"conversation_webhook_secrets", "secret", "secret_sealed", "''", WebhookSecret},
	{"conversation_webhook_secrets", "previous_secret", "previous_secret_sealed", "''", PreviousWebhookSecret},
}

// SealPlaintext seals every secret still stored in plaintext, logging its
// progress, and returns how many it sealed. Each row is sealed by one
// UPDATE that fills its sealed column and empties its plaintext one, so an
// interrupted run loses nothing and the next one finishes it; readers
// take either form meanwhile. It costs one query per column when nothing
// is left, so the server runs it at every start.
func (s *Sealer) SealPlaintext(ctx context.Context, logger *slog.Logger) (int, error) {
	done := 0
	for _, c := range plainColumns {
		for {
			// jsonb is sealed as its text.
			found, err := s.rows(ctx, fmt.Sprintf(`SELECT company_id, %s, %s FROM %s
				WHERE %s IS NOT NULL ORDER BY company_id LIMIT $1`, c.row, plainText(c), c.table, c.plain), batch)
			if err != nil {
				return done, fmt.Errorf("sealing: seal %s.%s: %w", c.table, c.plain, err)
			}
			if len(found) == 0 {
				break
			}
			for _, p := range found {
				sealed, err := s.Seal(ctx, p.companyID, c.purpose, p.name, p.value)
				if err != nil {
					return done, err
				}
				tag, err := s.pool.Exec(ctx, fmt.Sprintf(`UPDATE %s SET %s = $3, %s = NULL
					WHERE company_id = $1 AND %s = $2 AND %s IS NOT NULL`, c.table, c.sealed, c.plain, c.row, c.plain),
					p.companyID, p.name, sealed)
				if err != nil {
					return done, fmt.Errorf("sealing: seal %s.%s of company %d: %w", c.table, c.plain, p.companyID, err)
				}
				done += int(tag.RowsAffected())
			}
			logger.Info("sealed secrets stored in plaintext", slog.String("column", c.table+"."+c.plain), slog.Int("sealed", done))
		}
	}
	return done, nil
}

// stored is one row of a Company's: what names it and a value.
type stored struct {
	companyID int64
	name      string
	value     []byte
}

// rows runs a query of (company_id, a name, a value) rows.
func (s *Sealer) rows(ctx context.Context, sql string, args ...any) ([]stored, error) {
	rows, err := s.pool.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (stored, error) {
		var r stored
		return r, row.Scan(&r.companyID, &r.name, &r.value)
	})
}

// plainText is the SQL expression of c's plaintext as bytes: bytea as it
// is, jsonb as its text.
func plainText(c plainColumn) string {
	if c.purpose == SigningKey {
		return "convert_to(" + c.plain + "::text, 'UTF8')"
	}
	return c.plain
}
