package operations

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/poppyhost/poppyhost/internal/db"
)

// Resolution is how a Company resolved an operation whose outcome was
// unknown: whether its systems performed it, who said so, and when.
type Resolution struct {
	Performed bool      `json:"performed"`
	By        string    `json:"by"`
	Note      string    `json:"note,omitempty"`
	At        time.Time `json:"at"`
}

// ErrNotUnknown: the operation's outcome is not unknown, so there is
// nothing to resolve.
var ErrNotUnknown = errors.New("operations: the operation's outcome is not unknown")

// Resolve records the Company's resolution r of unknown operation id.
// Performed, every later retry gets resp. Not performed, the approved
// revision is replaced: a retry of the approval fails check 3 and gets a
// new revision (extension 7), and the Personal Agent learns from the
// Company's own records whether to approve it.
func (s *Store) Resolve(ctx context.Context, companyID int64, id string, r *Resolution, resp *Response) error {
	return db.InTx(ctx, s.pool, func(tx pgx.Tx) error {
		var status, revision string
		err := tx.QueryRow(ctx, `SELECT status, revision FROM operations WHERE company_id = $1 AND id = $2 FOR UPDATE`,
			companyID, id).Scan(&status, &revision)
		if err != nil {
			return db.NotFound(err, ErrNotFound)
		}
		if status != stateUnknown {
			return ErrNotUnknown
		}
		if r.Performed {
			_, err = tx.Exec(ctx, `UPDATE operations SET status = 'performed', response = $3, performed_at = $4,
					updated_at = $4, expires_at = greatest(expires_at, $4), resolution = $5, lease_until = NULL
				WHERE company_id = $1 AND id = $2`, companyID, id, resp, r.At, r)
		} else {
			_, err = tx.Exec(ctx, `WITH released AS (UPDATE operations SET status = 'proposed', approval = NULL,
					facts = NULL, performing_since = NULL, claim = NULL, lease_until = NULL, updated_at = $4,
					resolution = $5
				WHERE company_id = $1 AND id = $2)
				UPDATE operation_revisions SET replaced_at = coalesce(replaced_at, $4)
				WHERE company_id = $1 AND operation_id = $2 AND revision = $3`, companyID, id, revision, r.At, r)
		}
		return err
	})
}
