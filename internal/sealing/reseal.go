package sealing

import (
	"context"
	"fmt"
	"log/slog"
)

// batch is how many rows Reseal and SealPlaintext read at once.
const batch = 500

// Reseal seals again under the current KEK every data key sealed under
// another, logging its progress, and returns how many it resealed. The
// data keys themselves do not change, so nothing sealed by them does, and
// each is updated by one statement: an interrupted run is resumed by the
// next. Once it returns, no data key is sealed under an older KEK, which
// may then be dropped from the configuration.
func (s *Sealer) Reseal(ctx context.Context, logger *slog.Logger) (int, error) {
	cur := s.ring.Current()
	var left int
	if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM company_data_keys WHERE kek_id <> $1`, cur).Scan(&left); err != nil {
		return 0, fmt.Errorf("sealing: reseal: %w", err)
	}
	logger.Info("resealing data keys under the current KEK", slog.String("kek_id", cur), slog.Int("data_keys", left))
	done := 0
	after := int64(0)
	for {
		keys, err := s.rows(ctx, `SELECT company_id, kek_id, sealed_key FROM company_data_keys
			WHERE kek_id <> $1 AND company_id > $2 ORDER BY company_id LIMIT $3`, cur, after, batch)
		if err != nil {
			return done, fmt.Errorf("sealing: reseal: %w", err)
		}
		if len(keys) == 0 {
			break
		}
		for _, o := range keys {
			key, err := s.openDataKey(o.companyID, o.name, o.value)
			if err != nil {
				return done, err
			}
			kekID, sealed := s.sealDataKey(o.companyID, key)
			// Only if no other run resealed it meanwhile.
			tag, err := s.pool.Exec(ctx, `UPDATE company_data_keys SET kek_id = $3, sealed_key = $4
				WHERE company_id = $1 AND kek_id = $2`, o.companyID, o.name, kekID, sealed)
			if err != nil {
				return done, fmt.Errorf("sealing: reseal the data key of company %d: %w", o.companyID, err)
			}
			done += int(tag.RowsAffected())
			after = o.companyID
		}
		logger.Info("resealed data keys", slog.Int("done", done), slog.Int("of", left))
	}
	logger.Info("every data key is sealed under the current KEK", slog.String("kek_id", cur), slog.Int("resealed", done))
	return done, nil
}
