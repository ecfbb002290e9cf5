package dpop

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"time"
)

// NonceHeader is the response header that carries a server nonce (RFC
// 9449 §8.1).
const NonceHeader = "DPoP-Nonce"

// nonceLabel separates nonce MACs from every other use of a Company secret.
const nonceLabel = "poppyhost dpop nonce v1"

// nonceMACLen is how much of the HMAC a nonce carries: 128 bits.
const nonceMACLen = 16

// Secrets returns a Company's secret (signing.Keys.Secret).
type Secrets func(ctx context.Context, companyID int64) ([]byte, error)

// Nonces makes and checks server nonces (RFC 9449 §8, §9) without storing
// them: a nonce is a time step and a MAC of it under the Company's secret,
// so every replica accepts every other's, and one Company's nonce is no
// use at another. A nonce is good in its step and the next, so it lives
// between one and two steps.
type Nonces struct {
	secrets Secrets
	step    time.Duration
	now     func() time.Time
}

// NewNonces returns Nonces with the given step [5m] and clock [time.Now].
func NewNonces(secrets Secrets, step time.Duration, now func() time.Time) *Nonces {
	if step <= 0 {
		step = 5 * time.Minute
	}
	if now == nil {
		now = time.Now
	}
	return &Nonces{secrets: secrets, step: step, now: now}
}

// Current returns the nonce of the present step.
func (n *Nonces) Current(ctx context.Context, companyID int64) (string, error) {
	return n.make(ctx, companyID, n.stepAt(n.now()))
}

// check reports whether nonce is one of the Company's from the present step
// or the one before, and whether it is the present one.
func (n *Nonces) check(ctx context.Context, companyID int64, nonce string) (valid, current bool, err error) {
	raw, derr := base64.RawURLEncoding.DecodeString(nonce)
	if derr != nil || len(raw) != 8+nonceMACLen {
		return false, false, nil
	}
	step := binary.BigEndian.Uint64(raw[:8])
	now := n.stepAt(n.now())
	if step != now && step+1 != now {
		return false, false, nil
	}
	mac, err := n.mac(ctx, companyID, step)
	if err != nil {
		return false, false, err
	}
	return hmac.Equal(mac, raw[8:]), step == now, nil
}

func (n *Nonces) stepAt(t time.Time) uint64 { return uint64(t.UnixNano() / int64(n.step)) }

func (n *Nonces) make(ctx context.Context, companyID int64, step uint64) (string, error) {
	mac, err := n.mac(ctx, companyID, step)
	if err != nil {
		return "", err
	}
	raw := binary.BigEndian.AppendUint64(make([]byte, 0, 8+nonceMACLen), step)
	return base64.RawURLEncoding.EncodeToString(append(raw, mac...)), nil
}

// mac is the MAC of a step for a Company: HMAC-SHA256 under the Company's
// secret of the label, the Company and the step, cut to nonceMACLen.
func (n *Nonces) mac(ctx context.Context, companyID int64, step uint64) ([]byte, error) {
	secret, err := n.secrets(ctx, companyID)
	if err != nil {
		return nil, err
	}
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(nonceLabel))
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], uint64(companyID))
	binary.BigEndian.PutUint64(b[8:], step)
	m.Write(b[:])
	return m.Sum(nil)[:nonceMACLen], nil
}
