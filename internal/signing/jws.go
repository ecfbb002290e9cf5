package signing

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/lestrrat-go/jwx/v2/jwa"
	"github.com/lestrrat-go/jwx/v2/jws"

	"github.com/poppyhost/poppyhost/internal/jose"
)

// ErrInvalid is wrapped, with the reason, by Verify's errors for anything
// wrong with a token.
var ErrInvalid = errors.New("invalid token")

func invalid(format string, a ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, a...))
}

// maxToken bounds what Verify parses; our tokens are far smaller.
const maxToken = 64 << 10

// kidLen is the length of a kid: a base64url SHA-256 thumbprint.
var kidLen = base64.RawURLEncoding.EncodedLen(32)

// Sign signs payload, JSON, as a compact JWS with the Company's current key.
// The protected header holds alg ES256, kid and typ (RFC 8725 §3.11: each
// kind of token has its own typ).
func (k *Keys) Sign(ctx context.Context, companyID int64, typ string, payload []byte) (string, error) {
	if typ == "" {
		return "", errors.New("signing: Sign needs a typ")
	}
	cur, err := k.current(ctx, companyID)
	if err != nil {
		return "", err
	}
	hdr, err := json.Marshal(protected{Alg: jwa.ES256.String(), Kid: cur.kid, Typ: typ})
	if err != nil {
		return "", fmt.Errorf("signing: %w", err)
	}
	tok, err := jose.SignES256(cur.signer, hdr, payload)
	if err != nil {
		return "", fmt.Errorf("signing: sign: %w", err)
	}
	return tok, nil
}

// protected is the protected header of the JWSs Sign makes.
type protected struct {
	Alg string `json:"alg"`
	Kid string `json:"kid"`
	Typ string `json:"typ"`
}

// Verify checks a compact JWS against the Company's published keys and
// returns its payload. The header must name alg ES256, a kid of the
// Company's current key or of a key retired less than Retain ago, and typ
// equal to typ (compared exactly); crit and b64 are refused. A kid the
// cache lacks makes one reload, so a key made on another replica verifies.
// Anything wrong with the token is ErrInvalid, wrapped with the reason;
// other errors are ours, such as the database's.
func (k *Keys) Verify(ctx context.Context, companyID int64, typ, token string) ([]byte, error) {
	if typ == "" {
		return nil, errors.New("signing: Verify needs a typ")
	}
	if len(token) > maxToken {
		return nil, invalid("larger than %d bytes", maxToken)
	}
	parts, hdr, err := jose.Split(token)
	switch {
	case errors.Is(err, jose.ErrNotCompact):
		return nil, invalid("not a compact JWS")
	case err != nil:
		return nil, invalid("malformed header")
	}
	switch {
	case hdr.Alg == nil || *hdr.Alg != jwa.ES256.String():
		return nil, invalid("alg must be ES256")
	case hdr.Extended():
		return nil, invalid("crit and b64 are not accepted")
	case hdr.Typ == nil || *hdr.Typ != typ:
		return nil, invalid("typ must be %s", typ)
	case hdr.Kid == nil || len(*hdr.Kid) != kidLen:
		return nil, invalid("kid names no key of the Company")
	}
	if _, err := base64.RawURLEncoding.DecodeString(*hdr.Kid); err != nil {
		return nil, invalid("kid names no key of the Company")
	}
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return nil, invalid("malformed payload")
	}
	key, err := k.verifier(ctx, companyID, *hdr.Kid)
	if err != nil {
		return nil, err
	}
	if key == nil {
		return nil, invalid("kid names no key of the Company")
	}
	verified, err := jws.Verify([]byte(token), jws.WithKey(jwa.ES256, key.verifier))
	if err != nil {
		return nil, invalid("the signature does not verify")
	}
	if !bytes.Equal(verified, payload) {
		// Cannot happen for a compact JWS without b64; refuse rather than
		// return a payload that was not what was signed.
		return nil, invalid("the signed payload differs from the token's")
	}
	return payload, nil
}

// verifier returns the Company's key named kid that verifies tokens now, or
// nil. A kid the cache lacks makes one reload.
func (k *Keys) verifier(ctx context.Context, companyID int64, kid string) (*key, error) {
	ring, fresh, err := k.cached(ctx, companyID)
	if err != nil {
		return nil, err
	}
	if key := ring.find(kid, k.opts.Now(), k.opts.Retain); key != nil || fresh {
		return key, nil
	}
	if ring, err = k.fresh(ctx, companyID); err != nil {
		return nil, err
	}
	return ring.find(kid, k.opts.Now(), k.opts.Retain), nil
}
