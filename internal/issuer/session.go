package issuer

import (
	"maps"
	"slices"
	"strconv"
	"time"

	"github.com/ory/fosite"
)

// Session is what a grant carries from sign-in to its tokens: the account
// and the lifetimes. It implements fosite.Session and is stored as JSON.
type Session struct {
	AccountID int64                          `json:"account_id"`
	Username  string                         `json:"username"`
	ExpiresAt map[fosite.TokenType]time.Time `json:"expires_at"`
	// RefreshDeadline is the refresh token's absolute expiry, fixed at
	// sign-in: a refresh never moves it (spec 4.4), whatever fosite asks.
	// omitzero: fosite reads the code's row into the live Session during
	// the exchange, after the deadline was set, and a zero value stored
	// with the code would erase it.
	RefreshDeadline time.Time `json:"refresh_deadline,omitzero"`
	// RefreshScopes are the scopes the sign-in granted, which every
	// refresh token of the grant keeps even when one refresh asks for
	// fewer (spec 4.4).
	RefreshScopes []string `json:"refresh_scopes,omitempty"`
	// Resource is the resource indicator of the sign-in (RFC 8707), used
	// for tokens whose request names none.
	Resource string `json:"resource,omitempty"`
	// JKT is the thumbprint of the DPoP key the grant's access tokens are
	// bound to (RFC 9449 §6), set by the token request that first bound
	// one; every refresh must prove the same key.
	JKT string `json:"jkt,omitempty"`
	// Bind says whether this token request's access token is bound to
	// JKT: not for a service that takes only Bearer tokens. Not stored.
	Bind bool `json:"-"`
	// Audience is the access token's aud, chosen per token request from
	// its resource (spec 4.5); it is not stored.
	Audience []string `json:"-"`
}

// SetExpiresAt implements fosite.Session. The first refresh token expiry
// set becomes the grant's deadline; later ones cannot pass it.
func (s *Session) SetExpiresAt(key fosite.TokenType, exp time.Time) {
	if s.ExpiresAt == nil {
		s.ExpiresAt = map[fosite.TokenType]time.Time{}
	}
	if key == fosite.RefreshToken {
		if s.RefreshDeadline.IsZero() {
			// A grant stored without its deadline keeps the expiry it has.
			if old := s.ExpiresAt[fosite.RefreshToken]; !old.IsZero() && old.Before(exp) {
				exp = old
			}
			s.RefreshDeadline = exp
		} else if exp.After(s.RefreshDeadline) {
			exp = s.RefreshDeadline
		}
	}
	s.ExpiresAt[key] = exp
}

// GetExpiresAt implements fosite.Session.
func (s *Session) GetExpiresAt(key fosite.TokenType) time.Time {
	return s.ExpiresAt[key]
}

// GetUsername implements fosite.Session.
func (s *Session) GetUsername() string { return s.Username }

// GetSubject implements fosite.Session: the account, the access token's sub.
func (s *Session) GetSubject() string {
	if s.AccountID == 0 {
		return ""
	}
	return strconv.FormatInt(s.AccountID, 10)
}

// Clone implements fosite.Session.
func (s *Session) Clone() fosite.Session {
	if s == nil {
		return nil
	}
	c := *s
	c.ExpiresAt = maps.Clone(s.ExpiresAt)
	c.RefreshScopes = slices.Clone(s.RefreshScopes)
	c.Audience = slices.Clone(s.Audience)
	return &c
}
