package signing

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"

	"github.com/poppyhost/poppyhost/internal/db"
)

// secretLen is the size of a Company secret: 256 bits, HMAC-SHA256's block
// of security.
const secretLen = 32

// Secret returns the Company's 32-byte random secret, for HMACs of its codes
// and tokens. The first call for a Company makes it; it is the same on every
// replica and never changes, so each replica caches it. Each call returns a
// new copy.
func (k *Keys) Secret(ctx context.Context, companyID int64) ([]byte, error) {
	k.mu.Lock()
	s, ok := k.secrets[companyID]
	k.mu.Unlock()
	if ok {
		return bytes.Clone(s), nil
	}
	s, err := k.readSecret(ctx, companyID)
	if db.IsNotFound(err) {
		s = make([]byte, secretLen)
		_, _ = rand.Read(s) // never fails (crypto/rand)
		// A racing replica's secret wins; both then read the same one.
		if err := k.insertSecret(ctx, companyID, s); err != nil {
			return nil, fmt.Errorf("signing: store the secret of company %d: %w", companyID, err)
		}
		s, err = k.readSecret(ctx, companyID)
	}
	if err != nil {
		return nil, fmt.Errorf("signing: read the secret of company %d: %w", companyID, err)
	}
	if len(s) != secretLen {
		return nil, fmt.Errorf("signing: the stored secret of company %d is not %d bytes", companyID, secretLen)
	}
	k.mu.Lock()
	k.secrets[companyID] = s
	k.mu.Unlock()
	return bytes.Clone(s), nil
}
