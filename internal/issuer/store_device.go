package issuer

import (
	"context"
	"crypto/rand"
	"errors"
	"time"

	"github.com/poppyhost/poppyhost/internal/db"
)

// deviceRequest is a pending Device Sign-In.
type deviceRequest struct {
	ClientID string
	Scopes   []string
	Resource string
	Status   string
	Expires  time.Time
}

// createDevice stores a new request and returns its device and user codes.
func (s *Store) createDevice(ctx context.Context, clientID string, scopes []string, resource string, now time.Time) (deviceCode, userCode string, err error) {
	deviceCode = rand.Text() + rand.Text()
	for range 5 {
		userCode = newUserCode()
		// A user code still held, even by an expired request not swept
		// yet, inserts nothing: try another.
		tag, err := s.pool.Exec(ctx, `
			INSERT INTO device_grants (company_id, device_code, user_code, client_id, scopes, resource,
				interval_seconds, created_at, expires_at)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
			ON CONFLICT (company_id, user_code) DO NOTHING`,
			companyID(ctx), hashSig(deviceCode), userCode, clientID, scopes, resource,
			deviceInterval, now, now.Add(deviceLifetime))
		if err != nil {
			return "", "", err
		}
		if tag.RowsAffected() == 1 {
			return deviceCode, userCode, nil
		}
	}
	return "", "", errors.New("issuer: no free user code after 5 tries")
}

// deviceByUserCode finds a pending, unexpired request by its user code.
func (s *Store) deviceByUserCode(ctx context.Context, userCode string, now time.Time) (*deviceRequest, error) {
	var d deviceRequest
	err := s.pool.QueryRow(ctx, `
		SELECT client_id, scopes, resource, status, expires_at FROM device_grants
		WHERE company_id = $1 AND user_code = $2 AND expires_at > $3 AND status = 'pending'`,
		companyID(ctx), userCode, now).Scan(&d.ClientID, &d.Scopes, &d.Resource, &d.Status, &d.Expires)
	if db.IsNotFound(err) {
		return nil, nil
	}
	return &d, err
}

// decideDevice approves (with the granted scopes) or denies a pending
// request; false when it was no longer pending or has expired.
func (s *Store) decideDevice(ctx context.Context, userCode string, accountID int64, granted []string, now time.Time) (bool, error) {
	status := "approved"
	if len(granted) == 0 {
		status = "denied"
	}
	tag, err := s.pool.Exec(ctx, `
		UPDATE device_grants SET status = $3, account_id = $4, granted_scopes = $5
		WHERE company_id = $1 AND user_code = $2 AND status = 'pending' AND expires_at > $6`,
		companyID(ctx), userCode, status, accountID, nonNil(granted), now)
	if err != nil {
		return false, err
	}
	return tag.RowsAffected() == 1, nil
}

// errNoDevice means no device request has the device code for the client.
var errNoDevice = errors.New("issuer: no such device code for the client")

// devicePoll is what a poll of the token endpoint finds of its request.
type devicePoll struct {
	Status    string
	AccountID *int64
	Scopes    []string
	Granted   []string
	Resource  string
	Expires   time.Time
	// TooFast is true when the poll came before the interval had passed
	// and so lengthened it by 5 seconds (RFC 8628 §3.5).
	TooFast bool
}

// pollDevice records a poll of the device code by clientID at now and
// returns its request, or errNoDevice when clientID has no request with
// that code.
func (s *Store) pollDevice(ctx context.Context, deviceCode, clientID string, now time.Time) (*devicePoll, error) {
	var p devicePoll
	err := s.pool.QueryRow(ctx, `
		WITH old AS (
			SELECT last_polled_at, interval_seconds FROM device_grants
			WHERE company_id = $1 AND device_code = $2 AND client_id = $4 FOR UPDATE
		)
		UPDATE device_grants g SET last_polled_at = $3,
			interval_seconds = g.interval_seconds + CASE
				WHEN g.status = 'pending' AND old.last_polled_at IS NOT NULL
					AND $3 < old.last_polled_at + make_interval(secs => old.interval_seconds) THEN 5 ELSE 0 END
		FROM old
		WHERE g.company_id = $1 AND g.device_code = $2 AND g.client_id = $4
		RETURNING g.status, g.account_id, g.scopes, g.granted_scopes, g.resource, g.expires_at,
			g.interval_seconds > old.interval_seconds`,
		companyID(ctx), hashSig(deviceCode), now, clientID).
		Scan(&p.Status, &p.AccountID, &p.Scopes, &p.Granted, &p.Resource, &p.Expires, &p.TooFast)
	if err != nil {
		return nil, db.NotFound(err, errNoDevice)
	}
	return &p, nil
}

// useDevice marks an approved request used, in the transaction in ctx,
// and reports whether it was approved (and not used yet).
func (s *Store) useDevice(ctx context.Context, deviceCode string) (bool, error) {
	tag, err := s.db(ctx).Exec(ctx, `UPDATE device_grants SET status = 'used'
		WHERE company_id = $1 AND device_code = $2 AND status = 'approved'`,
		companyID(ctx), hashSig(deviceCode))
	if err != nil {
		return false, err
	}
	return tag.RowsAffected() == 1, nil
}
