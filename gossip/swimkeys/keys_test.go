package swimkeys

import (
	"bytes"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestFromSecret(t *testing.T) {
	k1, k2, k3 := bytes.Repeat([]byte{1}, 32), bytes.Repeat([]byte{2}, 32), bytes.Repeat([]byte{3}, 32)
	ks, err := FromSecret(map[string][]byte{"key": k1, "key.next": k2, "key.previous": k3, "other": {1}}, "")
	require.NoError(t, err)
	require.Equal(t, k1, ks.Primary)
	require.Equal(t, [][]byte{k2, k3}, ks.Others)

	ks, err = FromSecret(map[string][]byte{"swim": k2}, "swim")
	require.NoError(t, err)
	require.Equal(t, k2, ks.Primary)

	_, err = FromSecret(map[string][]byte{"other": k1}, "")
	require.ErrorIs(t, err, ErrMissing)
	_, err = FromSecret(map[string][]byte{"key": k1[:31]}, "")
	require.ErrorIs(t, err, ErrInvalid)
	require.Contains(t, err.Error(), "31 bytes")
	_, err = FromSecret(map[string][]byte{"key": k1, "key.next": {9, 9}}, "")
	require.ErrorIs(t, err, ErrInvalid)
	require.NotContains(t, err.Error(), "\x09", "a key's bytes never reach a message")
}

func TestParseHex(t *testing.T) {
	k, err := ParseHex(strings.Repeat("0a", 32))
	require.NoError(t, err)
	require.Len(t, k, 32)
	for _, bad := range []string{strings.Repeat("0A", 32), strings.Repeat("0a", 31), strings.Repeat("zz", 32), ""} {
		_, err := ParseHex(bad)
		require.Error(t, err, bad)
	}
}
