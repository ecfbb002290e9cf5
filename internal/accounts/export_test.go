package accounts

import (
	"context"
	"sync/atomic"
)

// CountVerifies makes s count the password verifications it does (the
// dummy one for unknown usernames included), so tests can tell that a
// throttled attempt did no hashing. Call it before using s.
func CountVerifies(s *Store) *atomic.Int64 {
	var n atomic.Int64
	verify := s.verify
	s.verify = func(encoded, password string) bool {
		n.Add(1)
		return verify(encoded, password)
	}
	return &n
}

// Concurrency records how many verifications ran at once.
type Concurrency struct {
	now, peak atomic.Int64
}

// Peak is the most verifications that ran at once.
func (c *Concurrency) Peak() int64 { return c.peak.Load() }

// TrackConcurrency makes s record how many password verifications run at
// once. Call it before using s.
func TrackConcurrency(s *Store) *Concurrency {
	c := &Concurrency{}
	verify := s.verify
	s.verify = func(encoded, password string) bool {
		n := c.now.Add(1)
		defer c.now.Add(-1)
		for p := c.peak.Load(); n > p && !c.peak.CompareAndSwap(p, n); p = c.peak.Load() {
		}
		return verify(encoded, password)
	}
	return c
}

// UnknownKey is the login_failures key of an unknown username.
func UnknownKey(s *Store, companyID int64, username string) string {
	k, err := s.unknownKey(context.Background(), companyID, unknownUsernames, username)
	if err != nil {
		panic(err)
	}
	return k
}
