package issuer

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"strings"
	"time"

	"github.com/ory/fosite"

	"github.com/poppyhost/poppyhost/internal/tenant"
)

// AccessTokenType is the JWT typ of our access tokens (RFC 9068 §2.1).
const AccessTokenType = "at+jwt"

// AccessClaims are the claims of an access token (RFC 9068 §2.2).
type AccessClaims struct {
	Issuer   string   `json:"iss"`
	Subject  string   `json:"sub"`
	Audience []string `json:"aud"`
	ClientID string   `json:"client_id"`
	Scope    string   `json:"scope"`
	JTI      string   `json:"jti"`
	IssuedAt int64    `json:"iat"`
	Expires  int64    `json:"exp"`
	// Cnf binds a DPoP-bound token to its key (RFC 9449 §6.1).
	Cnf *Confirmation `json:"cnf,omitempty"`
}

// Confirmation is an access token's cnf claim: the RFC 7638 thumbprint of
// the DPoP key, base64url.
type Confirmation struct {
	JKT string `json:"jkt"`
}

// JKT is the thumbprint the token is bound to, or "" for a Bearer token.
func (c *AccessClaims) JKT() string {
	if c.Cnf == nil {
		return ""
	}
	return c.Cnf.JKT
}

// accessTokens are fosite's access token strategy: JWTs signed with the
// Company's key, stored by signature so that they stay revocable.
type accessTokens struct {
	keys   Keys
	issuer func(*tenant.Company) string
	now    func() time.Time
}

// AccessTokenSignature implements oauth2.AccessTokenStrategy: the JWS
// signature, the part an attacker cannot choose.
func (a *accessTokens) AccessTokenSignature(_ context.Context, token string) string {
	return Signature(token)
}

// Signature is the storage key of an access token: its JWS signature.
func Signature(token string) string {
	i := strings.LastIndexByte(token, '.')
	if i < 0 || strings.Count(token, ".") != 2 {
		return ""
	}
	return token[i+1:]
}

// GenerateAccessToken implements oauth2.AccessTokenStrategy.
func (a *accessTokens) GenerateAccessToken(ctx context.Context, r fosite.Requester) (string, string, error) {
	c := tenant.FromContext(ctx)
	sess, ok := r.GetSession().(*Session)
	if !ok {
		return "", "", errors.New("issuer: unexpected session type")
	}
	exp := sess.GetExpiresAt(fosite.AccessToken)
	if exp.IsZero() {
		exp = a.now().Add(AccessTokenLifetime(c))
	}
	jti := make([]byte, 18)
	if _, err := rand.Read(jti); err != nil {
		return "", "", err
	}
	claims := AccessClaims{
		Issuer:   a.issuer(c),
		Subject:  sess.GetSubject(),
		Audience: sess.Audience,
		ClientID: r.GetClient().GetID(),
		Scope:    strings.Join(r.GetGrantedScopes(), " "),
		JTI:      base64.RawURLEncoding.EncodeToString(jti),
		IssuedAt: a.now().Unix(),
		Expires:  exp.Unix(),
	}
	if sess.Bind && sess.JKT != "" {
		claims.Cnf = &Confirmation{JKT: sess.JKT}
	}
	payload, err := json.Marshal(claims)
	if err != nil {
		return "", "", err
	}
	token, err := a.keys.Sign(ctx, c.ID, AccessTokenType, payload)
	if err != nil {
		return "", "", err
	}
	return token, Signature(token), nil
}

// ValidateAccessToken implements oauth2.AccessTokenStrategy.
func (a *accessTokens) ValidateAccessToken(ctx context.Context, _ fosite.Requester, token string) error {
	_, err := ParseAccessToken(ctx, a.keys, tenant.FromContext(ctx), token, a.now())
	return err
}

// ParseAccessToken verifies an access token's signature and expiry for
// Company c and returns its claims. It does not check revocation.
func ParseAccessToken(ctx context.Context, keys Keys, c *tenant.Company, token string, now time.Time) (*AccessClaims, error) {
	payload, err := keys.Verify(ctx, c.ID, AccessTokenType, token)
	if err != nil {
		return nil, err
	}
	var claims AccessClaims
	if err := json.Unmarshal(payload, &claims); err != nil {
		return nil, fosite.ErrTokenSignatureMismatch.WithWrap(err)
	}
	if !now.Before(time.Unix(claims.Expires, 0)) {
		return nil, fosite.ErrTokenExpired
	}
	return &claims, nil
}
