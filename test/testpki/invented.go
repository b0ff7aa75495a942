package testpki

import (
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"math/big"
	"net"
	"sync"
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

// rsaSigner makes the RSA signatures that InventedRSASigned replaces.
var rsaSigner = sync.OnceValues(func() (*rsa.PrivateKey, error) { return rsa.GenerateKey(rand.Reader, 2048) })

// InventedRSASigned is a certificate for pub that names parent as its
// issuer, with an RSA signature of bits bits that nobody made, as if by a
// key of parent's name of that size: a verifier that tries parent's name
// with such a key spends on the signature what it would on a real one,
// and finds it wrong. A leaf (isCA false) is for server authentication
// of localhost and 127.0.0.1, so that a verifier gets as far as its
// signature.
func InventedRSASigned(t testing.TB, cn string, pub any, parent *x509.Certificate, isCA bool, bits int) []byte {
	t.Helper()
	signer, err := rsaSigner()
	require.NoError(t, err)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial.Add(1)), Subject: pkix.Name{CommonName: cn, Organization: []string{cn}},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), BasicConstraintsValid: true, IsCA: isCA,
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign}
	if !isCA {
		tmpl.DNSNames, tmpl.IPAddresses = []string{"localhost"}, []net.IP{net.IPv4(127, 0, 0, 1)}
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
	}
	issuer := *parent
	issuer.PublicKey = signer.Public()
	der, err := x509.CreateCertificate(rand.Reader, tmpl, &issuer, pub, signer)
	require.NoError(t, err)
	var outer struct {
		TBS       asn1.RawValue
		Algorithm pkix.AlgorithmIdentifier
		Signature asn1.BitString
	}
	_, err = asn1.Unmarshal(der, &outer)
	require.NoError(t, err)
	sig := make([]byte, (bits+7)/8)
	_, err = rand.Read(sig[1:]) // below any modulus of bits bits: the leading byte stays zero
	require.NoError(t, err)
	outer.Signature = asn1.BitString{Bytes: sig, BitLength: 8 * len(sig)}
	der, err = asn1.Marshal(outer)
	require.NoError(t, err)
	return der
}
