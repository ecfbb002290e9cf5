package sessions

import (
	"context"
	"time"
)

// RecordJTI runs the Session lookup and jti insert of a request, as
// Authenticate does, and reports whether the jti was new.
func (s *Store) RecordJTI(ctx context.Context, companyID int64, clientID, sid, jti string, until time.Time) (bool, error) {
	_, fresh, err := s.lookup(ctx, companyID, &Claims{ClientID: clientID, SID: sid, JTI: jti}, until, true)
	return fresh, err
}

// CachedHeaders is how many decoded Session JWT headers v keeps.
func (v *Verifier) CachedHeaders() int {
	v.headers.mu.RLock()
	defer v.headers.mu.RUnlock()
	return len(v.headers.m)
}
