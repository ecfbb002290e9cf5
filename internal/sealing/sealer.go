package sealing

import (
	"context"
	"crypto/cipher"
	"crypto/rand"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/poppyhost/poppyhost/internal/db"
)

// Purpose names what a sealed value is, as the column it is stored in.
// It is part of the value's associated data, so a value moved to another
// column does not open.
type Purpose string

// The columns that hold sealed secrets.
const (
	SigningKey            Purpose = "signing_keys.private_jwk"
	CompanySecret         Purpose = "company_secrets.secret"
	WebhookSecret         Purpose = "conversation_webhook_secrets.secret"
	PreviousWebhookSecret Purpose = "conversation_webhook_secrets.previous_secret"
	// StaffTOTPSecret is a console staff member's TOTP secret, by staff id.
	StaffTOTPSecret Purpose = "staff.totp_secret"
)

// ErrOpen: a sealed value or data key does not open: it was changed, moved
// to another Company, column or row, or sealed under another key.
var ErrOpen = errors.New("sealing: the sealed value does not open (tampered, moved, or another key)")

// format is the first byte of a sealed value, so another format can come.
const format = 1

// dataKeySize is the size of a Company's data key: AES-256.
const dataKeySize = 32

// Sealer seals and opens Companies' secrets with their data keys. It is
// safe for concurrent use; make one per process.
type Sealer struct {
	pool db.Executor
	ring *Keyring
	now  func() time.Time

	mu   sync.Mutex
	keys map[int64]cipher.AEAD // opened data keys, by Company
}

// New returns a Sealer of the data keys in pool, sealed by ring's KEKs.
// now is the clock of created_at [time.Now].
func New(pool db.Executor, ring *Keyring, now func() time.Time) *Sealer {
	if now == nil {
		now = time.Now
	}
	return &Sealer{pool: pool, ring: ring, now: now, keys: map[int64]cipher.AEAD{}}
}

// Seal seals plaintext for the Company, bound to purpose and row (what
// identifies the row within the Company's rows of that column, e.g. a kid;
// "" for a column with one row per Company).
func (s *Sealer) Seal(ctx context.Context, companyID int64, purpose Purpose, row string, plaintext []byte) ([]byte, error) {
	aead, err := s.dataKey(ctx, companyID)
	if err != nil {
		return nil, err
	}
	out := append(make([]byte, 0, 1+aead.Overhead()+len(plaintext)), format)
	return aead.Seal(out, nil, plaintext, valueAD(companyID, purpose, row)), nil
}

// Open returns what Seal sealed for the same Company, purpose and row;
// ErrOpen when sealed was changed or was sealed for another.
func (s *Sealer) Open(ctx context.Context, companyID int64, purpose Purpose, row string, sealed []byte) ([]byte, error) {
	aead, err := s.dataKey(ctx, companyID)
	if err != nil {
		return nil, err
	}
	if len(sealed) < 1 || sealed[0] != format {
		return nil, ErrOpen
	}
	out, err := aead.Open(nil, nil, sealed[1:], valueAD(companyID, purpose, row))
	if err != nil {
		return nil, ErrOpen
	}
	return out, nil
}

// valueAD is a sealed value's associated data.
func valueAD(companyID int64, purpose Purpose, row string) []byte {
	return []byte("poppyhost sealed value\x00" + string(purpose) + "\x00" + strconv.FormatInt(companyID, 10) + "\x00" + row)
}

// dataKeyAD is a sealed data key's associated data.
func dataKeyAD(companyID int64, kekID string) []byte {
	return []byte("poppyhost data key\x00" + strconv.FormatInt(companyID, 10) + "\x00" + kekID)
}

// dataKey returns the Company's opened data key, from memory once read;
// the first use for a Company makes it. Racing first uses on any number
// of replicas settle on one.
func (s *Sealer) dataKey(ctx context.Context, companyID int64) (cipher.AEAD, error) {
	s.mu.Lock()
	aead := s.keys[companyID]
	s.mu.Unlock()
	if aead != nil {
		return aead, nil
	}
	kekID, sealed, err := s.readDataKey(ctx, companyID)
	if db.IsNotFound(err) {
		if err := s.createDataKey(ctx, companyID); err != nil {
			return nil, err
		}
		kekID, sealed, err = s.readDataKey(ctx, companyID)
	}
	if err != nil {
		return nil, fmt.Errorf("sealing: read the data key of company %d: %w", companyID, err)
	}
	key, err := s.openDataKey(companyID, kekID, sealed)
	if err != nil {
		return nil, err
	}
	if aead, err = newAEAD(key); err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.keys[companyID] = aead
	s.mu.Unlock()
	return aead, nil
}

// openDataKey opens a data key sealed under KEK kekID.
func (s *Sealer) openDataKey(companyID int64, kekID string, sealed []byte) ([]byte, error) {
	kek := s.ring.aeads[kekID]
	if kek == nil {
		return nil, fmt.Errorf("sealing: the data key of company %d is sealed under KEK %q, which is not configured", companyID, kekID)
	}
	key, err := kek.Open(nil, nil, sealed, dataKeyAD(companyID, kekID))
	if err != nil || len(key) != dataKeySize {
		return nil, fmt.Errorf("sealing: KEK %q does not open the data key of company %d: %w", kekID, companyID, ErrOpen)
	}
	return key, nil
}

// sealDataKey seals a data key under the current KEK and returns its id.
func (s *Sealer) sealDataKey(companyID int64, key []byte) (string, []byte) {
	id := s.ring.Current()
	return id, s.ring.aeads[id].Seal(nil, nil, key, dataKeyAD(companyID, id))
}

func (s *Sealer) readDataKey(ctx context.Context, companyID int64) (kekID string, sealed []byte, err error) {
	err = s.pool.QueryRow(ctx, `SELECT kek_id, sealed_key FROM company_data_keys WHERE company_id = $1`,
		companyID).Scan(&kekID, &sealed)
	return kekID, sealed, err
}

// createDataKey stores a new data key for the Company unless it has one.
func (s *Sealer) createDataKey(ctx context.Context, companyID int64) error {
	key := make([]byte, dataKeySize)
	_, _ = rand.Read(key) // never fails (crypto/rand)
	kekID, sealed := s.sealDataKey(companyID, key)
	_, err := s.pool.Exec(ctx, `INSERT INTO company_data_keys (company_id, kek_id, sealed_key, created_at)
		VALUES ($1, $2, $3, $4) ON CONFLICT (company_id) DO NOTHING`, companyID, kekID, sealed, s.now())
	if err != nil {
		return fmt.Errorf("sealing: store a data key for company %d: %w", companyID, err)
	}
	return nil
}

// Check verifies that the Keyring opens the stored data keys: every KEK
// named in company_data_keys is configured and opens one of the data keys
// sealed under it. The server refuses to start otherwise.
func (s *Sealer) Check(ctx context.Context) error {
	rows, err := s.pool.Query(ctx, `SELECT DISTINCT ON (kek_id) kek_id, company_id, sealed_key
		FROM company_data_keys ORDER BY kek_id, company_id`)
	if err != nil {
		return fmt.Errorf("sealing: check the KEKs: %w", err)
	}
	type sample struct {
		kekID     string
		companyID int64
		sealed    []byte
	}
	var samples []sample
	var smp sample
	if _, err := pgx.ForEachRow(rows, []any{&smp.kekID, &smp.companyID, &smp.sealed}, func() error {
		samples = append(samples, smp)
		return nil
	}); err != nil {
		return fmt.Errorf("sealing: check the KEKs: %w", err)
	}
	var errs []error
	for _, smp := range samples {
		if _, err := s.openDataKey(smp.companyID, smp.kekID, smp.sealed); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
