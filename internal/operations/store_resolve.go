package operations

import (
	"context"
	"encoding/json"
	"errors"
	"mime"
	"net/http"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/poppyhost/poppyhost/internal/audit"
	"github.com/poppyhost/poppyhost/internal/db"
	"github.com/poppyhost/poppyhost/internal/httpx"
	"github.com/poppyhost/poppyhost/internal/sessions"
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
		// The resolution is a change of the Company's: audited with it,
		// when a request made it (the Company API, the console).
		audit.Note(ctx, "performed", "by", "note")
		if r.Performed {
			if resp != nil {
				audit.Note(ctx, "response")
			}
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
		if err != nil {
			return err
		}
		return audit.Record(ctx, tx)
	})
}

// ResolveRequest is the Company's word on an operation whose outcome is
// unknown, as the Company API (POST /operations/{id}/resolve) and the
// console take it. Response, with Performed, is what every later retry
// gets [200, the operation's status as JSON].
type ResolveRequest struct {
	Performed *bool            `json:"performed"`
	By        string           `json:"by"`
	Note      string           `json:"note"`
	Response  *ResolveResponse `json:"response"`
}

// ResolveResponse is the answer a resolution gives later retries of a
// performed operation. Body is JSON, or a JSON string holding the text of
// a content type that is not JSON.
type ResolveResponse struct {
	Status      int             `json:"status"`
	ContentType string          `json:"content_type"`
	Body        json.RawMessage `json:"body"`
}

// maxContentType bounds the content_type of a resolution's response.
const maxContentType = 255

// check lists every field of req that is wrong, as *httpx.Error.
func (req *ResolveRequest) check() error {
	var f httpx.Fields
	if req.Performed == nil {
		f.Add("performed", "is required: true or false")
	}
	// Who resolved it, said in words; the note may span lines.
	f.Text("by", strings.TrimSpace(req.By), true, 200, false)
	f.Text("note", req.Note, false, 2000, true)
	if req.Response != nil && (req.Response.Status < 200 || req.Response.Status > 499) {
		f.Add("response.status", "must be 200 to 499")
	}
	// Replayed as the Content-Type of every later retry: a media type,
	// as an origin's would be.
	if req.Response != nil && req.Response.ContentType != "" {
		if _, _, err := mime.ParseMediaType(req.Response.ContentType); err != nil || len(req.Response.ContentType) > maxContentType {
			f.Add("response.content_type", "must be a media type of at most %d characters", maxContentType)
		}
	}
	return f.Err()
}

// ResolveUnknown checks req and records it as the Company's resolution of
// its operation id at now, then returns the operation as it is now: the
// rules of the Company API, for every caller. Its errors are *httpx.Error:
// invalid_request listing each bad field, not_found for an id the Company
// has no operation by, conflict when the outcome is not unknown.
func (s *Store) ResolveUnknown(ctx context.Context, companyID int64, id string, req *ResolveRequest,
	now time.Time) (*Record, error) {
	if err := req.check(); err != nil {
		return nil, err
	}
	notFound := httpx.Errorf(httpx.CodeNotFound, "the Company has no operation %q", id)
	if !sessions.ValidID(id) {
		return nil, notFound
	}
	rec, err := s.Get(ctx, companyID, id)
	if errors.Is(err, ErrNotFound) {
		return nil, notFound
	}
	if err != nil {
		return nil, err
	}
	res := &Resolution{Performed: *req.Performed, By: strings.TrimSpace(req.By), Note: req.Note,
		At: now.UTC().Truncate(time.Microsecond)}
	var resp *Response
	if res.Performed {
		resp = &Response{Status: http.StatusOK, ContentType: "application/json"}
		resp.Body, _ = json.Marshal(map[string]string{"operation_id": rec.OperationID, "status": StatusPerformed})
		if b := req.Response; b != nil {
			resp = &Response{Status: b.Status, ContentType: b.ContentType}
			if len(b.Body) > 0 {
				var s string
				if json.Unmarshal(b.Body, &s) == nil && !httpx.IsJSON(b.ContentType) {
					resp.Body = []byte(s)
				} else {
					resp.Body = b.Body
				}
			}
		}
	}
	err = s.Resolve(ctx, companyID, rec.OperationID, res, resp)
	switch {
	case errors.Is(err, ErrNotUnknown):
		return nil, httpx.Errorf(httpx.CodeConflict,
			"the operation is %s: only an operation whose outcome is unknown is resolved", rec.Status)
	case errors.Is(err, ErrNotFound):
		return nil, notFound
	case err != nil:
		return nil, err
	}
	rec, err = s.Get(ctx, companyID, id)
	if errors.Is(err, ErrNotFound) {
		return nil, notFound
	}
	return rec, err
}
