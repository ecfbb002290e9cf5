package verified

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/lestrrat-go/jwx/v2/jwa"
	"github.com/lestrrat-go/jwx/v2/jwk"
	"github.com/lestrrat-go/jwx/v2/jws"
)

// Header is the request header that carries the JWT.
const Header = "Poppy-Verified"

// Type is the JWT's typ.
const Type = "poppy-verified+jwt"

// Lifetime is how long a Poppy-Verified JWT is good for.
const Lifetime = 5 * time.Minute

// Facts are what the platform verified on a Personal Agent's request
// (spec 5.3, 4.5). A receiver acts only within them.
type Facts struct {
	ClientID string `json:"client_id"`
	SID      string `json:"sid"`
	UserID   string `json:"user_id"`
	AgentID  string `json:"agent_id"`
	// Account is the account of the request's access token, its id in
	// decimal, or "" signed out.
	Account string   `json:"account"`
	Scopes  []string `json:"scopes"`
	// Extensions the Personal Agent declares, name to version (spec 3.3).
	Extensions map[string]string `json:"extensions,omitempty"`
	// AgentOperator is the operator of the Personal Agent that a Web Bot
	// Auth signature on the request verified (spec 5.3): the host of its
	// key directory. Absent when the request was not signed or its
	// signature was refused; it identifies traffic, it authorizes nothing.
	AgentOperator string `json:"agent_operator,omitempty"`
}

// Claims are the JWT's claims: the facts, who vouches for them (iss: the
// Company's identifier), who they are for (aud), and what they come with.
type Claims struct {
	Issuer   string `json:"iss"`
	Audience string `json:"aud"`
	IssuedAt int64  `json:"iat"`
	Expires  int64  `json:"exp"`
	ID       string `json:"jti"`
	Facts
	// ConversationID and EventID bind an agent webhook delivery to its
	// event.
	ConversationID string `json:"conversation_id,omitempty"`
	EventID        string `json:"event_id,omitempty"`
	// API and Tool name the registered API or MCP tool a gateway call is
	// for.
	API  string `json:"api,omitempty"`
	Tool string `json:"tool,omitempty"`
	// Method and Path are the request a gateway call forwards, as the
	// origin receives it.
	Method string `json:"htm,omitempty"`
	Path   string `json:"htu,omitempty"`
	// OperationID, Revision and Approver state the approval an approved
	// operation is performed under (Operations extension 6).
	OperationID string `json:"operation_id,omitempty"`
	Revision    string `json:"revision,omitempty"`
	Approver    string `json:"approver,omitempty"`
	// ActionKey and Terms are the approved revision's: the origin's name
	// for the action and exactly the terms approved, which it performs and
	// never recomputes.
	ActionKey string          `json:"action_key,omitempty"`
	Terms     json.RawMessage `json:"terms,omitempty"`
}

// Signer signs JWTs with a Company's platform key (signing.Keys).
type Signer interface {
	Sign(ctx context.Context, companyID int64, typ string, payload []byte) (string, error)
}

// Sign completes c (iat, exp, jti from now) and signs it for companyID.
func Sign(ctx context.Context, s Signer, companyID int64, c Claims, now time.Time) (string, error) {
	c.IssuedAt = now.Unix()
	c.Expires = now.Add(Lifetime).Unix()
	c.ID = rand.Text()
	if c.Scopes == nil {
		c.Scopes = []string{}
	}
	payload, err := json.Marshal(c)
	if err != nil {
		return "", err
	}
	return s.Sign(ctx, companyID, Type, payload)
}

// ErrInvalid: the JWT is not a valid Poppy-Verified for this receiver.
var ErrInvalid = errors.New("verified: invalid Poppy-Verified")

// leeway allows for clock skew between the platform and the receiver.
const leeway = 30 * time.Second

// Verify checks token as a receiver does: signed ES256 by a key of set
// (the Company's {issuer}/oauth/jwks.json), typ poppy-verified+jwt, aud
// the receiver's own URL, iss the Company's identifier, and not expired.
func Verify(token string, set jwk.Set, issuer, audience string, now time.Time) (*Claims, error) {
	msg, err := jws.Parse([]byte(token))
	if err != nil || len(msg.Signatures()) != 1 {
		return nil, fmt.Errorf("%w: not a compact JWS", ErrInvalid)
	}
	h := msg.Signatures()[0].ProtectedHeaders()
	if h.Type() != Type {
		return nil, fmt.Errorf("%w: typ %q", ErrInvalid, h.Type())
	}
	if h.Algorithm() != jwa.ES256 {
		return nil, fmt.Errorf("%w: alg %q", ErrInvalid, h.Algorithm())
	}
	key, ok := set.LookupKeyID(h.KeyID())
	if !ok {
		return nil, fmt.Errorf("%w: unknown kid", ErrInvalid)
	}
	payload, err := jws.Verify([]byte(token), jws.WithKey(jwa.ES256, key))
	if err != nil {
		return nil, fmt.Errorf("%w: signature", ErrInvalid)
	}
	var c Claims
	if err := json.Unmarshal(payload, &c); err != nil {
		return nil, fmt.Errorf("%w: claims", ErrInvalid)
	}
	switch {
	case c.Issuer != issuer:
		return nil, fmt.Errorf("%w: iss %q", ErrInvalid, c.Issuer)
	case c.Audience != audience:
		return nil, fmt.Errorf("%w: aud %q", ErrInvalid, c.Audience)
	case now.After(time.Unix(c.Expires, 0).Add(leeway)):
		return nil, fmt.Errorf("%w: expired", ErrInvalid)
	case time.Unix(c.IssuedAt, 0).After(now.Add(leeway)):
		return nil, fmt.Errorf("%w: issued in the future", ErrInvalid)
	}
	return &c, nil
}

// Has reports whether the facts carry every scope.
func (f *Facts) Has(scopes ...string) bool {
	for _, s := range scopes {
		if !slices.Contains(f.Scopes, s) {
			return false
		}
	}
	return true
}
