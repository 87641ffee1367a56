package backend

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"os"
	"strings"
)

// MACSize is the size of a Secret's MAC.
const MACSize = sha256.Size

// NonceSize is the size of handshake and connection nonces.
const NonceSize = 16

// MinSecretSize is the shortest secret accepted.
const MinSecretSize = 16

// Secret is the key managers of one deployment share. Routes prove it on
// the actor handshake and on every data connection. The zero Secret means
// authentication is off (loopback-only deployments).
type Secret struct {
	key []byte
}

// NewSecret wraps key; it must be at least MinSecretSize bytes.
func NewSecret(key []byte) (Secret, error) {
	if len(key) < MinSecretSize {
		return Secret{}, fmt.Errorf("secret of %d bytes, want at least %d", len(key), MinSecretSize)
	}
	return Secret{key: append([]byte(nil), key...)}, nil
}

// LoadSecret reads a secret file (surrounding white space is ignored).
func LoadSecret(path string) (Secret, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Secret{}, fmt.Errorf("secret file: %w", err)
	}
	s, err := NewSecret([]byte(strings.TrimSpace(string(b))))
	if err != nil {
		return Secret{}, fmt.Errorf("secret file %s: %w", path, err)
	}
	return s, nil
}

// Enabled reports whether the secret is set.
func (s Secret) Enabled() bool { return len(s.key) > 0 }

// MAC returns HMAC-SHA256 over a label and length-prefixed parts, so no two
// different part lists give the same input. With no secret it returns nil.
func (s Secret) MAC(label string, parts ...[]byte) []byte {
	if !s.Enabled() {
		return nil
	}
	h := hmac.New(sha256.New, s.key)
	var l [4]byte
	binary.LittleEndian.PutUint32(l[:], uint32(len(label)))
	h.Write(l[:])
	h.Write([]byte(label))
	for _, p := range parts {
		binary.LittleEndian.PutUint32(l[:], uint32(len(p)))
		h.Write(l[:])
		h.Write(p)
	}
	return h.Sum(nil)
}

// Verify checks mac against the MAC of label and parts in constant time.
// With no secret every MAC verifies.
func (s Secret) Verify(mac []byte, label string, parts ...[]byte) bool {
	if !s.Enabled() {
		return true
	}
	return hmac.Equal(mac, s.MAC(label, parts...))
}

// Nonce returns NonceSize fresh random bytes.
func Nonce() []byte {
	b := make([]byte, NonceSize)
	if _, err := rand.Read(b); err != nil {
		panic(fmt.Sprintf("crypto/rand: %v", err)) // the runtime's rand never fails on Linux
	}
	return b
}
