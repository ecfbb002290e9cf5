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
