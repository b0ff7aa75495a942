package membership

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gridsync/gridsync/trust/sitetrust"
)

func pkcs8PEM(t *testing.T, key any) []byte {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	require.NoError(t, err)
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})
}

// A kept pending key is used again only when it parses, is of a kind
// gridsync accepts and is not the key already certified: otherwise a new
// one replaces it.
func TestAPendingKeyIsKeptOnlyWhenUsable(t *testing.T) {
	caPEM, caKey, err := sitetrust.NewCA(time.Now(), time.Hour)
	require.NoError(t, err)
	ca, err := sitetrust.ParseCA(caPEM, caKey)
	require.NoError(t, err)
	chain, heldKey, err := ca.Issue("site-a", time.Now(), time.Hour)
	require.NoError(t, err)
	held, err := sitetrust.ParseHeld(chain, heldKey)
	require.NoError(t, err)

	pending, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	key, ok := usablePendingKey(pkcs8PEM(t, pending), held)
	require.True(t, ok)
	assert.True(t, pending.PublicKey.Equal(key.Public()), "the kept key is the one asked for again")
	_, ok = usablePendingKey(pkcs8PEM(t, pending), nil)
	assert.True(t, ok, "without a certificate held (an enrolment)")

	_, ok = usablePendingKey(pkcs8PEM(t, held.Pair.PrivateKey), held)
	assert.False(t, ok, "the key already certified is not asked for again")
	_, ok = usablePendingKey([]byte("not a key"), held)
	assert.False(t, ok)
	_, ok = usablePendingKey(nil, held)
	assert.False(t, ok)
	_, ok = usablePendingKey(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: []byte("garbage")}), held)
	assert.False(t, ok)
	small, err := rsa.GenerateKey(rand.Reader, 1024) //nolint:gosec // a key gridsync refuses, on purpose
	require.NoError(t, err)
	_, ok = usablePendingKey(pkcs8PEM(t, small), held)
	assert.False(t, ok, "a key keypolicy refuses is replaced")
}
