package keypolicy

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"errors"
	"math/big"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestCheckPublicKey(t *testing.T) {
	p256, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	p384, err := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	require.NoError(t, err)
	p521, err := ecdsa.GenerateKey(elliptic.P521(), rand.Reader)
	require.NoError(t, err)
	p224, err := ecdsa.GenerateKey(elliptic.P224(), rand.Reader)
	require.NoError(t, err)
	edPub, _, err := ed25519.GenerateKey(rand.Reader)
	require.NoError(t, err)
	rsa2048, err := rsa.GenerateKey(rand.Reader, 2048)
	require.NoError(t, err)

	// RSA keys are checked by modulus size and exponent only: a modulus of
	// the right bit length stands in for keys too slow to generate here.
	modulus := func(bits int) *big.Int { return new(big.Int).Lsh(big.NewInt(1), uint(bits-1)) }

	for _, tc := range []struct {
		name string
		pub  any
		ok   bool
	}{
		{"ECDSA P-256", &p256.PublicKey, true},
		{"ECDSA P-384", &p384.PublicKey, true},
		{"ECDSA P-521", &p521.PublicKey, false},
		{"ECDSA P-224", &p224.PublicKey, false},
		{"Ed25519", edPub, true},
		{"Ed25519 short", edPub[:16], false},
		{"RSA 2048", &rsa2048.PublicKey, true},
		{"RSA 4096", &rsa.PublicKey{N: modulus(4096), E: 65537}, true},
		{"RSA 1024", &rsa.PublicKey{N: modulus(1024), E: 65537}, false},
		{"RSA 4097", &rsa.PublicKey{N: modulus(4097), E: 65537}, false},
		{"RSA 44800", &rsa.PublicKey{N: modulus(44800), E: 65537}, false},
		{"RSA exponent 3", &rsa.PublicKey{N: modulus(2048), E: 3}, false},
		{"RSA no modulus", &rsa.PublicKey{E: 65537}, false},
		{"nil", nil, false},
		{"other type", "a string", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckPublicKey(tc.pub)
			if tc.ok {
				require.NoError(t, err)
				return
			}
			require.Error(t, err)
			require.True(t, errors.Is(err, ErrKeyRefused), "refusals wrap ErrKeyRefused: %v", err)
		})
	}
}

func TestCheckChain(t *testing.T) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	good := &x509.Certificate{PublicKey: &key.PublicKey}
	huge := &x509.Certificate{PublicKey: &rsa.PublicKey{N: new(big.Int).Lsh(big.NewInt(1), 59199), E: 65537}}

	require.NoError(t, CheckChain([]*x509.Certificate{good, good, good, good}))
	require.ErrorIs(t, CheckChain(nil), ErrKeyRefused)
	require.ErrorIs(t, CheckChain([]*x509.Certificate{good, good, good, good, good}), ErrKeyRefused)
	require.ErrorIs(t, CheckChain([]*x509.Certificate{good, huge, good}), ErrKeyRefused)
	require.ErrorIs(t, CheckCertificate(nil), ErrKeyRefused)
}
