package membership

import (
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"sort"
	"strings"
)

// KeySize is the size of a SWIM key: AES-256-GCM.
const KeySize = 32

// DefaultKeyName is the Secret's data key of the primary SWIM key when
// swimKeySecretRef.key is not set.
const DefaultKeyName = "key"

// KeySet is the SWIM keys of one network: the primary encrypts, every key
// (the primary included) decrypts.
type KeySet struct {
	Primary []byte
	// Others are accepted for decryption only: the keys of a rotation in
	// progress.
	Others [][]byte
}

// All returns the primary then the others, each once.
func (k *KeySet) All() [][]byte {
	out := [][]byte{k.Primary}
	for _, o := range k.Others {
		if !containsKey(out, o) {
			out = append(out, o)
		}
	}
	return out
}

func containsKey(keys [][]byte, k []byte) bool {
	for _, x := range keys {
		if bytes.Equal(x, k) {
			return true
		}
	}
	return false
}

// Key errors, each a status reason of the network.
var (
	ErrKeyMissing = errors.New("SwimKeyMissing")
	ErrKeyInvalid = errors.New("SwimKeyInvalid")
)

// KeySetFromSecret reads a SWIM key Secret's data. The data key name (the
// reference's swimKeySecretRef.key, "key" when empty) holds the primary
// key; every data key named "<name>.<anything>" holds a key accepted for
// decryption, which is how a rotation installs the next key before any
// site sends with it, and keeps the previous one until every site sends
// with the next. Each must be exactly 32 bytes. Errors name data keys,
// never their values.
func KeySetFromSecret(data map[string][]byte, name string) (*KeySet, error) {
	if name == "" {
		name = DefaultKeyName
	}
	primary, ok := data[name]
	if !ok {
		return nil, fmt.Errorf("%w: the Secret has no data key %q", ErrKeyMissing, name)
	}
	if len(primary) != KeySize {
		return nil, fmt.Errorf("%w: data key %q holds %d bytes, a SWIM key is exactly %d", ErrKeyInvalid, name, len(primary), KeySize)
	}
	ks := &KeySet{Primary: bytes.Clone(primary)}
	var extra []string
	for k := range data {
		if strings.HasPrefix(k, name+".") {
			extra = append(extra, k)
		}
	}
	sort.Strings(extra)
	for _, k := range extra {
		if len(data[k]) != KeySize {
			return nil, fmt.Errorf("%w: data key %q holds %d bytes, a SWIM key is exactly %d", ErrKeyInvalid, k, len(data[k]), KeySize)
		}
		if !containsKey(ks.All(), data[k]) {
			ks.Others = append(ks.Others, bytes.Clone(data[k]))
		}
	}
	return ks, nil
}

// ParseHexKey reads GRID_SWIM_ENCRYPT_KEY: 64 lowercase hex characters.
func ParseHexKey(s string) ([]byte, error) {
	if len(s) != 2*KeySize {
		return nil, fmt.Errorf("a SWIM key is %d lowercase hex characters, got %d characters", 2*KeySize, len(s))
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
