package accounts

import "sync/atomic"

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
