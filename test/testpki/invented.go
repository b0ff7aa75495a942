package testpki

import (
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Invented is a certificate for pub that names parent as its issuer (by
// name and key identifier), signed by signer whatever parent's key is: a
// certificate as anyone can make one, valid for an hour either side of
// now. Its signature verifies only when signer holds parent's key.
func Invented(t testing.TB, cn string, pub any, parent *x509.Certificate, signer crypto.Signer, isCA bool) []byte {
	t.Helper()
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial.Add(1)), Subject: pkix.Name{CommonName: cn, Organization: []string{cn}},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), BasicConstraintsValid: true, IsCA: isCA,
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	if isCA {
		tmpl.SubjectKeyId = make([]byte, 20)
		_, _ = rand.Read(tmpl.SubjectKeyId)
	}
	issuer := *parent
	issuer.PublicKey = signer.Public()
	der, err := x509.CreateCertificate(rand.Reader, tmpl, &issuer, pub, signer)
	require.NoError(t, err)
	return der
}

// HugeRSAKey is an RSA public key of bits bits (exponent 65537) nobody
// holds the private key of: its modulus is a random odd number.
func HugeRSAKey(t testing.TB, bits int) *rsa.PublicKey {
	t.Helper()
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), uint(bits)))
	require.NoError(t, err)
	n.SetBit(n, bits-1, 1).SetBit(n, 0, 1)
	return &rsa.PublicKey{N: n, E: 65537}
}
