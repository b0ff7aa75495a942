// Package swimkeys reads a network's SWIM keys: the Secret a GridNetwork
// names (a primary key and the keys of a rotation in progress) and the
// agent's key from its environment. Errors name data keys, never bytes.
package swimkeys

import (
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"sort"
	"strings"
)

// Size is the size of a SWIM key: AES-256-GCM.
const Size = 32

// DefaultName is the Secret's data key of the primary SWIM key when
// swimKeySecretRef.key is not set.
const DefaultName = "key"

// Set is the SWIM keys of one network: the primary encrypts, every key
// (the primary included) decrypts.
type Set struct {
	Primary []byte
	// Others are accepted for decryption only: the keys of a rotation in
	// progress.
	Others [][]byte
}

// All returns the primary then the others, each once.
func (k *Set) All() [][]byte {
	out := [][]byte{k.Primary}
	for _, o := range k.Others {
		if !Contains(out, o) {
			out = append(out, o)
		}
	}
	return out
}

// Contains reports whether keys holds k.
func Contains(keys [][]byte, k []byte) bool {
	for _, x := range keys {
		if bytes.Equal(x, k) {
			return true
		}
	}
	return false
}

// Key errors, each a status reason of the network.
var (
	ErrMissing = errors.New("SwimKeyMissing")
	ErrInvalid = errors.New("SwimKeyInvalid")
)

// FromSecret reads a SWIM key Secret's data. The data key name (the
// reference's swimKeySecretRef.key, "key" when empty) holds the primary
// key; every data key named "<name>.<anything>" holds a key accepted for
// decryption, which is how a rotation installs the next key before any
// site sends with it, and keeps the previous one until every site sends
// with the next. Each must be exactly 32 bytes. Errors name data keys,
// never their values.
func FromSecret(data map[string][]byte, name string) (*Set, error) {
	if name == "" {
		name = DefaultName
	}
	primary, ok := data[name]
	if !ok {
		return nil, fmt.Errorf("%w: the Secret has no data key %q", ErrMissing, name)
	}
	if len(primary) != Size {
		return nil, fmt.Errorf("%w: data key %q holds %d bytes, a SWIM key is exactly %d", ErrInvalid, name, len(primary), Size)
	}
	ks := &Set{Primary: bytes.Clone(primary)}
	var extra []string
	for k := range data {
		if strings.HasPrefix(k, name+".") {
			extra = append(extra, k)
		}
	}
	sort.Strings(extra)
	for _, k := range extra {
		if len(data[k]) != Size {
			return nil, fmt.Errorf("%w: data key %q holds %d bytes, a SWIM key is exactly %d", ErrInvalid, k, len(data[k]), Size)
		}
		if !Contains(ks.All(), data[k]) {
			ks.Others = append(ks.Others, bytes.Clone(data[k]))
		}
	}
	return ks, nil
}

// ParseHex reads GRID_SWIM_ENCRYPT_KEY: 64 lowercase hex characters.
func ParseHex(s string) ([]byte, error) {
	if len(s) != 2*Size {
		return nil, fmt.Errorf("a SWIM key is %d lowercase hex characters, got %d characters", 2*Size, len(s))
	}
	if strings.ToLower(s) != s {
		return nil, errors.New("a SWIM key is lowercase hex")
	}
	k, err := hex.DecodeString(s)
	if err != nil {
		return nil, errors.New("a SWIM key is lowercase hex: it has a character that is not")
	}
	return k, nil
}
