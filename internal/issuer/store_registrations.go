package issuer

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/poppyhost/poppyhost/internal/agentid"
	"github.com/poppyhost/poppyhost/internal/db"
)

// MCP clients that registered themselves (RFC 7591), where the Company
// allows it: mcp_client_registrations.

// registeredPrefix starts every registered client_id, which is never a
// URL, so it cannot be taken for a client metadata document's.
const registeredPrefix = "mcpc_"

// registeredIDLen is the length of a registered client_id after its
// prefix: 24 random bytes in base64url.
const registeredIDLen = 32

// Limits of self-registration.
const (
	// unusedRegistration is how long a registration lasts before its first
	// token; each token then keeps it as long as its refresh token.
	unusedRegistration = 24 * time.Hour
	// maxRegistrations caps a Company's live registrations.
	maxRegistrations = 5000
)

// errTooManyRegistrations is a Company at maxRegistrations.
var errTooManyRegistrations = errors.New("issuer: too many client registrations")

// createRegistration stores c as a new registration of companyID and
// returns it with its client_id, unless the Company holds
// maxRegistrations live ones already.
func (s *Store) createRegistration(ctx context.Context, companyID int64, c *agentid.Client, now time.Time) (*agentid.Client, error) {
	raw := make([]byte, base64.RawURLEncoding.DecodedLen(registeredIDLen))
	if _, err := rand.Read(raw); err != nil {
		return nil, err
	}
	reg := *c
	reg.ClientID = registeredPrefix + base64.RawURLEncoding.EncodeToString(raw)
	err := db.InTx(ctx, s.pool, func(tx pgx.Tx) error {
		// One registration at a time per Company, so the count holds.
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended('mcp_client_registrations', $1))`, companyID); err != nil {
			return err
		}
		var n int
		if err := tx.QueryRow(ctx, `SELECT count(*) FROM mcp_client_registrations
			WHERE company_id = $1 AND expires_at > $2`, companyID, now).Scan(&n); err != nil {
			return err
		}
		if n >= maxRegistrations {
			return errTooManyRegistrations
		}
		_, err := tx.Exec(ctx, `INSERT INTO mcp_client_registrations
			(company_id, client_id, client_name, client_uri, logo_uri, redirect_uris, created_at, expires_at)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`,
			companyID, reg.ClientID, reg.Name, reg.ClientURI, reg.LogoURI, reg.RedirectURIs, now, now.Add(unusedRegistration))
		return err
	})
	if err != nil {
		return nil, err
	}
	return &reg, nil
}

// registration returns the live registration clientID of companyID, or
// nil.
func (s *Store) registration(ctx context.Context, companyID int64, clientID string, now time.Time) (*agentid.Client, error) {
	c := &agentid.Client{ClientID: clientID, Public: true, Extensions: map[string]string{}}
	err := s.pool.QueryRow(ctx, `SELECT client_name, client_uri, logo_uri, redirect_uris FROM mcp_client_registrations
		WHERE company_id = $1 AND client_id = $2 AND expires_at > $3`, companyID, clientID, now).
		Scan(&c.Name, &c.ClientURI, &c.LogoURI, &c.RedirectURIs)
	if db.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return c, nil
}

// keepRegistration keeps a registration until at least until: a token was
// issued to it. A registration kept within a day of until is left as it
// is, so that not every refresh writes.
func (s *Store) keepRegistration(ctx context.Context, companyID int64, clientID string, until time.Time) error {
	_, err := s.pool.Exec(ctx, `UPDATE mcp_client_registrations SET expires_at = $3
		WHERE company_id = $1 AND client_id = $2 AND expires_at < $3::timestamptz - interval '1 day'`, companyID, clientID, until)
	return err
}

// DeleteExpiredRegistrations deletes registrations that expired before
// before, in batches.
func (s *Store) DeleteExpiredRegistrations(ctx context.Context, before time.Time) (int64, error) {
	return db.DeleteInBatches(ctx, s.pool, "mcp_client_registrations", "expires_at < $1", before)
}
