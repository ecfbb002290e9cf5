package console

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/poppyhost/poppyhost/internal/audit"
	"github.com/poppyhost/poppyhost/internal/db"
)

// ErrLastOwner: the change would leave the Company without an owner.
var ErrLastOwner = errors.New("console: a Company keeps at least one owner")

// StaffRow is a staff member as the staff page lists them.
type StaffRow struct {
	Member
	CreatedAt time.Time
	HasTOTP   bool
	Passkeys  int
}

// List returns the Company's staff, by email.
func (s *Store) List(ctx context.Context, companyID int64) ([]StaffRow, error) {
	rows, err := s.pool.Query(ctx, `SELECT st.id, st.email, st.name, st.role, st.created_at, st.totp_secret IS NOT NULL,
			(SELECT count(*) FROM staff_passkeys p WHERE p.staff_id = st.id), c.slug
		FROM staff st JOIN companies c ON c.id = st.company_id
		WHERE st.company_id = $1 ORDER BY st.email`, companyID)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (StaffRow, error) {
		r := StaffRow{Member: Member{CompanyID: companyID}}
		var role string
		err := row.Scan(&r.ID, &r.Email, &r.Name, &role, &r.CreatedAt, &r.HasTOTP, &r.Passkeys, &r.CompanySlug)
		r.Role = Role(role)
		return r, err
	})
}

// lockOwners locks the Company's owners' rows for the rest of tx and
// returns their ids, so that two changes at once cannot both remove the
// last but one.
func lockOwners(ctx context.Context, tx pgx.Tx, companyID int64) ([]int64, error) {
	rows, err := tx.Query(ctx, `SELECT id FROM staff WHERE company_id = $1 AND role = 'owner' ORDER BY id FOR UPDATE`, companyID)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[int64])
}

// leavesNoOwner reports whether taking id out of owners leaves none.
func leavesNoOwner(owners []int64, id int64) bool {
	return len(owners) == 1 && owners[0] == id
}

// SetRole changes the role of the Company's staff member id, audited in
// the same transaction; a member who is no longer an owner loses the
// invites they made. It returns ErrNotFound, or ErrLastOwner when id is
// the only owner and role is not owner.
func (s *Store) SetRole(ctx context.Context, companyID, id int64, role Role) error {
	return db.InTx(ctx, s.pool, func(tx pgx.Tx) error {
		owners, err := lockOwners(ctx, tx, companyID)
		if err != nil {
			return err
		}
		if role != RoleOwner && leavesNoOwner(owners, id) {
			return ErrLastOwner
		}
		tag, err := tx.Exec(ctx, `UPDATE staff SET role = $3 WHERE company_id = $1 AND id = $2`, companyID, id, string(role))
		if err == nil && tag.RowsAffected() > 0 && role != RoleOwner {
			if err := dropInvites(ctx, tx, companyID, id); err != nil {
				return err
			}
		}
		return audited(ctx, tx, tag, err, "role")
	})
}

// Remove deletes the Company's staff member id, with their sessions,
// passkeys and the invites they made, audited in the same transaction.
// It returns ErrNotFound, or ErrLastOwner when id is the only owner.
func (s *Store) Remove(ctx context.Context, companyID, id int64) error {
	return db.InTx(ctx, s.pool, func(tx pgx.Tx) error {
		owners, err := lockOwners(ctx, tx, companyID)
		if err != nil {
			return err
		}
		if leavesNoOwner(owners, id) {
			return ErrLastOwner
		}
		if err := dropInvites(ctx, tx, companyID, id); err != nil {
			return err
		}
		tag, err := tx.Exec(ctx, `DELETE FROM staff WHERE company_id = $1 AND id = $2`, companyID, id)
		return audited(ctx, tx, tag, err)
	})
}

// dropInvites deletes the invites staff member id made: only owners
// invite, and a link must not outlive its inviter's ownership (a removed
// owner could otherwise come back through a link they kept).
func dropInvites(ctx context.Context, tx pgx.Tx, companyID, id int64) error {
	_, err := tx.Exec(ctx, `DELETE FROM staff_invites WHERE company_id = $1 AND invited_by = $2`, companyID, id)
	return err
}

// Invite is an invitation to join a Company's staff, valid until it
// expires or is accepted.
type Invite struct {
	CompanyID int64
	Email     string
	Name      string
	Role      Role
	ExpiresAt time.Time
}

// InviteLifetime is how long an invite link works.
const InviteLifetime = 7 * 24 * time.Hour

// CreateInvite stores an invite from staff member by (0: the operator)
// and returns its token, which only the link shown once holds (the
// database keeps its hash), audited in the same transaction. It returns
// ErrTaken if a staff member has the email.
func (s *Store) CreateInvite(ctx context.Context, inv Invite, by int64) (string, error) {
	token := newToken()
	var inviter any
	if by != 0 {
		inviter = by
	}
	err := db.InTx(ctx, s.pool, func(tx pgx.Tx) error {
		var taken bool
		if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM staff WHERE company_id = $1 AND email = $2)`,
			inv.CompanyID, inv.Email).Scan(&taken); err != nil {
			return err
		}
		if taken {
			return ErrTaken
		}
		if _, err := tx.Exec(ctx, `INSERT INTO staff_invites (token_hash, company_id, email, name, role, invited_by, expires_at)
			VALUES ($1, $2, $3, $4, $5, $6, $7)`, tokenHash(token), inv.CompanyID, inv.Email, inv.Name,
			string(inv.Role), inviter, inv.ExpiresAt); err != nil {
			return err
		}
		audit.Note(ctx, "email", "name", "role")
		return audit.Record(ctx, tx)
	})
	return token, err
}

// PendingInvite is an invite not yet accepted, as the staff page lists
// it: ID names it in forms (the token's hash, base64url: it reveals
// nothing of the token).
type PendingInvite struct {
	Invite
	ID string
}

// Invites lists the Company's unexpired invites, by email.
func (s *Store) Invites(ctx context.Context, companyID int64, now time.Time) ([]PendingInvite, error) {
	rows, err := s.pool.Query(ctx, `SELECT token_hash, email, name, role, expires_at FROM staff_invites
		WHERE company_id = $1 AND expires_at > $2 ORDER BY email, expires_at`, companyID, now)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (PendingInvite, error) {
		inv := PendingInvite{Invite: Invite{CompanyID: companyID}}
		var hash []byte
		var role string
		err := row.Scan(&hash, &inv.Email, &inv.Name, &role, &inv.ExpiresAt)
		inv.ID, inv.Role = base64.RawURLEncoding.EncodeToString(hash), Role(role)
		return inv, err
	})
}

// RevokeInvite deletes the Company's invite id (PendingInvite.ID), so its
// link stops working, audited in the same transaction; ErrNotFound if
// there is none.
func (s *Store) RevokeInvite(ctx context.Context, companyID int64, id string) error {
	hash, err := base64.RawURLEncoding.DecodeString(id)
	if err != nil {
		return ErrNotFound
	}
	return db.InTx(ctx, s.pool, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `DELETE FROM staff_invites WHERE company_id = $1 AND token_hash = $2`, companyID, hash)
		return audited(ctx, tx, tag, err)
	})
}

// invite returns the Company's unexpired invite with token, or
// ErrNotFound.
func (s *Store) invite(ctx context.Context, companyID int64, token string, now time.Time) (Invite, error) {
	inv := Invite{CompanyID: companyID}
	var role string
	err := s.pool.QueryRow(ctx, `SELECT email, name, role, expires_at FROM staff_invites
		WHERE token_hash = $1 AND company_id = $2 AND expires_at > $3`, tokenHash(token), companyID, now).
		Scan(&inv.Email, &inv.Name, &role, &inv.ExpiresAt)
	inv.Role = Role(role)
	return inv, db.NotFound(err, ErrNotFound)
}

// AcceptInvite turns the Company's unexpired invite with token into a
// staff member with name and password, once: the invite is deleted in the
// same transaction, which the audit entry (actor: the new member) joins.
// It returns ErrNotFound for a used, expired or unknown token, ErrTaken if
// the email joined meanwhile.
func (s *Store) AcceptInvite(ctx context.Context, companyID int64, token, name, password string, now time.Time) (Member, error) {
	hash, err := s.passwords.Hash(ctx, companyID, password)
	if err != nil {
		return Member{}, err
	}
	var m Member
	err = db.InTx(ctx, s.pool, func(tx pgx.Tx) error {
		var role string
		err := tx.QueryRow(ctx, `DELETE FROM staff_invites WHERE token_hash = $1 AND company_id = $2 AND expires_at > $3
			RETURNING email, role`, tokenHash(token), companyID, now).Scan(&m.Email, &role)
		if err != nil {
			return db.NotFound(err, ErrNotFound)
		}
		m.CompanyID, m.Name, m.Role = companyID, name, Role(role)
		err = tx.QueryRow(ctx, `INSERT INTO staff (company_id, email, name, role, password_hash, user_handle)
			VALUES ($1, $2, $3, $4, $5, $6) RETURNING id, (SELECT slug FROM companies WHERE id = $1)`,
			companyID, m.Email, name, role, hash, randomHandle()).Scan(&m.ID, &m.CompanySlug)
		if db.IsConflict(err, "") {
			return ErrTaken
		}
		if err != nil {
			return err
		}
		audit.SetActor(ctx, actorOf(m))
		audit.SetCompany(ctx, m.CompanyID, m.CompanySlug)
		audit.Note(ctx, "name", "password")
		return audit.Record(ctx, tx)
	})
	return m, err
}

// audited ends a change to one row made in tx: the change's error, or
// ErrNotFound if it touched no row, or else its audit entry (noting
// fields) recorded in tx.
func audited(ctx context.Context, tx pgx.Tx, tag pgconn.CommandTag, err error, fields ...string) error {
	switch {
	case err != nil:
		return err
	case tag.RowsAffected() == 0:
		return ErrNotFound
	}
	audit.Note(ctx, fields...)
	return audit.Record(ctx, tx)
}

// randomHandle is a new WebAuthn user handle.
func randomHandle() []byte {
	b := make([]byte, 32)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	return b
}

// actorOf names m in the audit log.
func actorOf(m Member) audit.Actor {
	return audit.Actor{Kind: audit.KindStaff, ID: m.ID, Name: m.Email}
}

// deleteSessions ends every session of the Company's staff member,
// audited in the same transaction (the console answers it with a
// redirect, which audit.Middleware would not record).
func (s *Store) deleteSessions(ctx context.Context, companyID, staffID int64) error {
	return db.InTx(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `DELETE FROM console_sessions WHERE company_id = $1 AND staff_id = $2`,
			companyID, staffID); err != nil {
			return err
		}
		audit.Note(ctx, "sessions")
		return audit.Record(ctx, tx)
	})
}

// DeleteExpired removes the sessions, invites and WebAuthn ceremonies
// that can no longer be used as of now, and returns how many.
func (s *Store) DeleteExpired(ctx context.Context, now time.Time, idle, absolute time.Duration) (int64, error) {
	var total int64
	for _, d := range []struct {
		table, where string
		arg          any
	}{
		{"console_sessions", "last_seen_at <= $1", now.Add(-idle)},
		{"console_sessions", "created_at <= $1", now.Add(-absolute)},
		{"staff_invites", "expires_at <= $1", now},
		{"console_ceremonies", "expires_at <= $1", now},
	} {
		n, err := db.DeleteInBatches(ctx, s.pool, d.table, d.where, d.arg)
		if err != nil {
			return total, err
		}
		total += n
	}
	return total, nil
}

// SetPassword replaces the password of the Company's staff member with
// email, or returns ErrNotFound. The caller has checked the password.
func (s *Store) SetPassword(ctx context.Context, companyID int64, email, password string) error {
	hash, err := s.passwords.Hash(ctx, companyID, password)
	if err != nil {
		return err
	}
	tag, err := s.pool.Exec(ctx, `UPDATE staff SET password_hash = $3 WHERE company_id = $1 AND email = $2`,
		companyID, email, hash)
	if err == nil && tag.RowsAffected() == 0 {
		return ErrNotFound
	}
	return err
}
