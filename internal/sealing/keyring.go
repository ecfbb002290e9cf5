package sealing

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strings"
)

// KEKSize is the size of a key-encryption key: AES-256.
const KEKSize = 32

// validID is what a KEK id may be: it is stored next to every data key
// sealed under the KEK.
var validID = regexp.MustCompile(`^[A-Za-z0-9._-]{1,64}$`)

// Keyring is the operator's key-encryption keys. The last one is current:
// it seals new data keys, and the others only open what they sealed.
type Keyring struct {
	ids   []string // in the order given, the current one last
	aeads map[string]cipher.AEAD
}

// ParseKeyring reads KEKs written as "id:base64key", one per line or
// separated by commas; the key is 32 bytes in standard base64. Blank
// lines and lines starting with # are skipped. Its errors never quote a
// key.
func ParseKeyring(text string) (*Keyring, error) {
	r := &Keyring{aeads: map[string]cipher.AEAD{}}
	var entries []string
	for _, line := range strings.Split(text, "\n") {
		if line = strings.TrimSpace(line); !strings.HasPrefix(line, "#") {
			entries = append(entries, strings.Split(line, ",")...)
		}
	}
	for _, line := range entries {
		if line = strings.TrimSpace(line); line == "" {
			continue
		}
		id, b64, ok := strings.Cut(line, ":")
		id = strings.TrimSpace(id)
		if !ok || !validID.MatchString(id) {
			return nil, errors.New(`a KEK is written "id:base64key", the id of letters, digits, '.', '_' or '-'`)
		}
		if _, dup := r.aeads[id]; dup {
			return nil, fmt.Errorf("KEK id %q is given twice", id)
		}
		key, err := base64.StdEncoding.DecodeString(strings.TrimSpace(b64))
		if err != nil {
			key, err = base64.RawStdEncoding.DecodeString(strings.TrimSpace(b64))
		}
		if err != nil || len(key) != KEKSize {
			return nil, fmt.Errorf("KEK %q: the key must be %d bytes in base64", id, KEKSize)
		}
		aead, err := newAEAD(key)
		if err != nil {
			return nil, fmt.Errorf("KEK %q: %w", id, err)
		}
		r.ids = append(r.ids, id)
		r.aeads[id] = aead
	}
	if len(r.ids) == 0 {
		return nil, errors.New("no KEK given")
	}
	return r, nil
}

// ReadKeyring reads a Keyring from a file in ParseKeyring's format.
func ReadKeyring(path string) (*Keyring, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	r, err := ParseKeyring(string(b))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return r, nil
}

// NewKEK makes a random KEK named id, written as ParseKeyring reads it.
func NewKEK(id string) string {
	key := make([]byte, KEKSize)
	_, _ = rand.Read(key) // never fails (crypto/rand)
	return id + ":" + base64.StdEncoding.EncodeToString(key)
}

// Current is the id of the KEK that seals new data keys.
func (r *Keyring) Current() string { return r.ids[len(r.ids)-1] }

// IDs lists the KEKs' ids, the current one last.
func (r *Keyring) IDs() []string { return append([]string(nil), r.ids...) }

// newAEAD is AES-256-GCM with a random 96-bit nonce, which Seal prepends
// to its output and Open takes from its input.
func newAEAD(key []byte) (cipher.AEAD, error) {
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	return cipher.NewGCMWithRandomNonce(block)
}
