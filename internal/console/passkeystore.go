package console

import (
	"context"
	"encoding/json"
	"time"

	"github.com/go-webauthn/webauthn/webauthn"
	"github.com/jackc/pgx/v5"

	"github.com/poppyhost/poppyhost/internal/audit"
	"github.com/poppyhost/poppyhost/internal/db"
)

// passkeyUser is a staff member as go-webauthn sees them.
type passkeyUser struct {
	Member
	handle []byte
	creds  []webauthn.Credential
}

func (u *passkeyUser) WebAuthnID() []byte                         { return u.handle }
func (u *passkeyUser) WebAuthnName() string                       { return u.Email }
func (u *passkeyUser) WebAuthnDisplayName() string                { return displayName(u.Member) }
func (u *passkeyUser) WebAuthnCredentials() []webauthn.Credential { return u.creds }

// displayName is the member's name, or their email without one.
func displayName(m Member) string {
	if m.Name != "" {
		return m.Name
	}
	return m.Email
}

// passkeyUser returns the Company's staff member id with their passkeys.
func (s *Store) passkeyUser(ctx context.Context, companyID, id int64) (*passkeyUser, error) {
	return s.findPasskeyUser(ctx, `st.company_id = $1 AND st.id = $2`, companyID, id)
}

// passkeyUserByHandle returns the Company's staff member whose WebAuthn
// user handle is handle: a handle of another Company's member is not found.
func (s *Store) passkeyUserByHandle(ctx context.Context, companyID int64, handle []byte) (*passkeyUser, error) {
	return s.findPasskeyUser(ctx, `st.company_id = $1 AND st.user_handle = $2`, companyID, handle)
}

func (s *Store) findPasskeyUser(ctx context.Context, where string, args ...any) (*passkeyUser, error) {
	u := &passkeyUser{}
	var role string
	var creds []json.RawMessage
	err := s.pool.QueryRow(ctx, `SELECT st.id, st.company_id, c.slug, st.email, st.name, st.role, st.user_handle,
			coalesce((SELECT array_agg(p.credential ORDER BY p.id) FROM staff_passkeys p WHERE p.staff_id = st.id), '{}')
		FROM staff st JOIN companies c ON c.id = st.company_id WHERE `+where, args...).
		Scan(&u.ID, &u.CompanyID, &u.CompanySlug, &u.Email, &u.Name, &role, &u.handle, &creds)
	if err != nil {
		return nil, db.NotFound(err, ErrNotFound)
	}
	u.Role = Role(role)
	for _, raw := range creds {
		var c webauthn.Credential
		if err := json.Unmarshal(raw, &c); err != nil {
			return nil, err
		}
		u.creds = append(u.creds, c)
	}
	return u, nil
}

// addPasskey stores a new passkey of the member, audited in the same
// transaction, or returns ErrNotFound.
func (s *Store) addPasskey(ctx context.Context, m Member, cred *webauthn.Credential, name string) error {
	raw, err := json.Marshal(cred)
	if err != nil {
		return err
	}
	return db.InTx(ctx, s.pool, func(tx pgx.Tx) error {
		// Only a member of the Company gets the passkey.
		tag, err := tx.Exec(ctx, `INSERT INTO staff_passkeys (company_id, staff_id, credential_id, name, credential)
			SELECT company_id, id, $3, $4, $5 FROM staff WHERE company_id = $1 AND id = $2`,
			m.CompanyID, m.ID, cred.ID, name, raw)
		return audited(ctx, tx, tag, err, "passkey")
	})
}

// usedPasskey records a sign-in with the member's passkey: its new
// signature count and when.
func (s *Store) usedPasskey(ctx context.Context, m Member, cred *webauthn.Credential, now time.Time) error {
	raw, err := json.Marshal(cred)
	if err != nil {
		return err
	}
	_, err = s.pool.Exec(ctx, `UPDATE staff_passkeys SET credential = $4, last_used_at = $5
		WHERE company_id = $1 AND staff_id = $2 AND credential_id = $3`, m.CompanyID, m.ID, cred.ID, raw, now)
	return err
}

// Passkey is a passkey as the account page lists it.
type Passkey struct {
	ID         int64
	Name       string
	CreatedAt  time.Time
	LastUsedAt *time.Time
}

// passkeys lists the member's passkeys, oldest first.
func (s *Store) passkeys(ctx context.Context, m Member) ([]Passkey, error) {
	rows, err := s.pool.Query(ctx, `SELECT id, name, created_at, last_used_at FROM staff_passkeys
		WHERE company_id = $1 AND staff_id = $2 ORDER BY id`, m.CompanyID, m.ID)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowToStructByPos[Passkey])
}

// removePasskey deletes one of the member's passkeys, audited in the same
// transaction, or returns ErrNotFound.
func (s *Store) removePasskey(ctx context.Context, m Member, id int64) error {
	return db.InTx(ctx, s.pool, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `DELETE FROM staff_passkeys WHERE company_id = $1 AND staff_id = $2 AND id = $3`,
			m.CompanyID, m.ID, id)
		return audited(ctx, tx, tag, err, "passkey")
	})
}

// ceremony is what a WebAuthn ceremony or TOTP enrolment under way keeps
// between its two requests.
type ceremony struct {
	WebAuthn *webauthn.SessionData `json:"webauthn,omitempty"`
	// StaffID is the member a registration or second factor is for.
	StaffID int64 `json:"staff_id,omitempty"`
	// TOTP is a proposed TOTP secret, sealed, until a code confirms it.
	TOTP []byte `json:"totp,omitempty"`
}

// ceremonyLifetime bounds a ceremony: WebAuthn's own timeout is 5 minutes.
const ceremonyLifetime = 10 * time.Minute

// saveCeremony stores c under key, replacing any before it.
func (s *Store) saveCeremony(ctx context.Context, companyID int64, key []byte, c ceremony, now time.Time) error {
	raw, err := json.Marshal(c)
	if err != nil {
		return err
	}
	_, err = s.pool.Exec(ctx, `INSERT INTO console_ceremonies (key_hash, company_id, data, expires_at) VALUES ($1, $2, $3, $4)
		ON CONFLICT (key_hash) DO UPDATE SET company_id = $2, data = $3, expires_at = $4`,
		key, companyID, raw, now.Add(ceremonyLifetime))
	return err
}

// takeCeremony returns and deletes the Company's unexpired ceremony under
// key, or ErrNotFound: each is finished at most once.
func (s *Store) takeCeremony(ctx context.Context, companyID int64, key []byte, now time.Time) (ceremony, error) {
	var raw []byte
	err := s.pool.QueryRow(ctx, `DELETE FROM console_ceremonies WHERE key_hash = $1 AND company_id = $2 AND expires_at > $3
		RETURNING data`, key, companyID, now).Scan(&raw)
	if err != nil {
		return ceremony{}, db.NotFound(err, ErrNotFound)
	}
	var c ceremony
	return c, json.Unmarshal(raw, &c)
}

// peekCeremony is takeCeremony without deleting it.
func (s *Store) peekCeremony(ctx context.Context, companyID int64, key []byte, now time.Time) (ceremony, error) {
	var raw []byte
	err := s.pool.QueryRow(ctx, `SELECT data FROM console_ceremonies WHERE key_hash = $1 AND company_id = $2 AND expires_at > $3`,
		key, companyID, now).Scan(&raw)
	if err != nil {
		return ceremony{}, db.NotFound(err, ErrNotFound)
	}
	var c ceremony
	return c, json.Unmarshal(raw, &c)
}

// factors says which second factors the member has.
func (s *Store) factors(ctx context.Context, m Member) (totp bool, passkeys int, err error) {
	err = s.pool.QueryRow(ctx, `SELECT st.totp_secret IS NOT NULL, (SELECT count(*) FROM staff_passkeys p WHERE p.staff_id = st.id)
		FROM staff st WHERE st.company_id = $1 AND st.id = $2`, m.CompanyID, m.ID).Scan(&totp, &passkeys)
	return totp, passkeys, db.NotFound(err, ErrNotFound)
}

// totpSecret returns the member's sealed TOTP secret and the step of the
// last code accepted; ErrNotFound without one.
func (s *Store) totpSecret(ctx context.Context, m Member) ([]byte, uint64, error) {
	var sealed []byte
	var last int64
	err := s.pool.QueryRow(ctx, `SELECT totp_secret, totp_last_step FROM staff
		WHERE company_id = $1 AND id = $2 AND totp_secret IS NOT NULL`, m.CompanyID, m.ID).Scan(&sealed, &last)
	return sealed, uint64(last), db.NotFound(err, ErrNotFound)
}

// acceptTOTPStep records that the member's code of step was used, unless
// one of that step or later was already: false then.
func (s *Store) acceptTOTPStep(ctx context.Context, m Member, step uint64) (bool, error) {
	tag, err := s.pool.Exec(ctx, `UPDATE staff SET totp_last_step = $3 WHERE company_id = $1 AND id = $2 AND totp_last_step < $3`,
		m.CompanyID, m.ID, int64(step))
	return err == nil && tag.RowsAffected() == 1, err
}

// setTOTP stores the member's sealed TOTP secret, confirmed by a code of
// step, audited in the same transaction.
func (s *Store) setTOTP(ctx context.Context, m Member, sealed []byte, step uint64) error {
	return db.InTx(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `UPDATE staff SET totp_secret = $3, totp_last_step = $4 WHERE company_id = $1 AND id = $2`,
			m.CompanyID, m.ID, sealed, int64(step)); err != nil {
			return err
		}
		audit.Note(ctx, "totp")
		return audit.Record(ctx, tx)
	})
}

// promote turns the pending session with hash into a signed-in one under
// a new token's hash: the token that passed only the password is spent.
func (s *Store) promote(ctx context.Context, m Member, hash, newHash []byte, now time.Time) error {
	return db.InTx(ctx, s.pool, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `DELETE FROM console_sessions WHERE token_hash = $1 AND company_id = $2 AND staff_id = $3
			AND second_factor`, hash, m.CompanyID, m.ID)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return ErrNotFound
		}
		_, err = tx.Exec(ctx, `INSERT INTO console_sessions (token_hash, company_id, staff_id, second_factor, created_at, last_seen_at)
			VALUES ($1, $2, $3, false, $4, $4)`, newHash, m.CompanyID, m.ID, now)
		return err
	})
}

// failSecond counts a wrong second factor against the Company's pending
// session with hash and ends it at max; it reports whether it ended.
func (s *Store) failSecond(ctx context.Context, companyID int64, hash []byte, max int) (bool, error) {
	var n int
	err := s.pool.QueryRow(ctx, `UPDATE console_sessions SET failures = failures + 1
		WHERE token_hash = $1 AND company_id = $2 AND second_factor RETURNING failures`, hash, companyID).Scan(&n)
	if db.IsNotFound(err) {
		return true, nil
	}
	if err != nil || n < max {
		return false, err
	}
	return true, s.deleteSession(ctx, companyID, hash)
}
