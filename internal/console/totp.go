package console

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha1"
	"crypto/subtle"
	"encoding/base32"
	"encoding/binary"
	"fmt"
	"net/url"
	"time"
)

// TOTP (RFC 6238) with the parameters every authenticator app supports:
// HMAC-SHA1, 30-second steps, 6 digits, a 160-bit secret (RFC 4226 §4).
const (
	totpStep    = 30 * time.Second
	totpDigits  = 6
	totpSecretN = 20
	// totpSkew is how many steps either side of now a code may be from,
	// for clocks that disagree a little.
	totpSkew = 1
)

// totpEncoding is how secrets are shown and put in otpauth URIs.
var totpEncoding = base32.StdEncoding.WithPadding(base32.NoPadding)

// newTOTPSecret returns a random TOTP secret.
func newTOTPSecret() []byte {
	b := make([]byte, totpSecretN)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	return b
}

// totpCode is the code of secret at time step n (RFC 4226 §5.3).
func totpCode(secret []byte, n uint64) string {
	m := hmac.New(sha1.New, secret)
	_ = binary.Write(m, binary.BigEndian, n)
	sum := m.Sum(nil)
	off := sum[len(sum)-1] & 0x0f
	v := binary.BigEndian.Uint32(sum[off:off+4]) & 0x7fffffff
	return fmt.Sprintf("%06d", v%1_000_000)
}

// totpStepAt is the time step of t.
func totpStepAt(t time.Time) uint64 { return uint64(t.Unix()) / uint64(totpStep/time.Second) }

// totpMatch returns the step of now, or one either side, whose code is
// code, if it is after last (the step of the last code accepted, so no
// code is accepted twice).
func totpMatch(secret []byte, code string, now time.Time, last uint64) (uint64, bool) {
	if len(code) != totpDigits {
		return 0, false
	}
	cur := totpStepAt(now)
	for n := cur - totpSkew; n <= cur+totpSkew; n++ {
		if n > last && subtle.ConstantTimeCompare([]byte(totpCode(secret, n)), []byte(code)) == 1 {
			return n, true
		}
	}
	return 0, false
}

// totpURI is the otpauth URI an authenticator app reads (Key Uri Format).
func totpURI(secret []byte, issuer, account string) string {
	q := url.Values{"secret": {totpEncoding.EncodeToString(secret)}, "issuer": {issuer},
		"algorithm": {"SHA1"}, "digits": {"6"}, "period": {"30"}}
	return "otpauth://totp/" + url.PathEscape(issuer+":"+account) + "?" + q.Encode()
}
