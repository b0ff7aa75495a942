package testpki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"encoding/pem"
	"math/big"
	"testing"

	"github.com/stretchr/testify/require"
)

// OversizedRSACSR is a PEM certificate request carrying an RSA public
// key of bits bits (a random odd modulus, e = 65537) and a signature of
// the modulus's length: making a real key of 44,800 bits takes minutes,
// and checking the signature costs what it would with a real one, which
// is what an attack with such a key spends of the checker.
func OversizedRSACSR(t testing.TB, bits int) []byte {
	t.Helper()
	// A real request for its structure; its key and signature are swapped.
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{Subject: pkix.Name{CommonName: "big"}}, key)
	require.NoError(t, err)
	var outer struct {
		TBS       asn1.RawValue
		Algorithm pkix.AlgorithmIdentifier
		Signature asn1.BitString
	}
	_, err = asn1.Unmarshal(der, &outer)
	require.NoError(t, err)
	var tbs struct {
		Version    int
		Subject    asn1.RawValue
		PublicKey  asn1.RawValue
		Attributes asn1.RawValue `asn1:"tag:0"`
	}
	_, err = asn1.Unmarshal(outer.TBS.FullBytes, &tbs)
	require.NoError(t, err)

	n, err := rand.Prime(rand.Reader, 64) // odd, and the top bit set below
	require.NoError(t, err)
	modulus := new(big.Int).Lsh(big.NewInt(1), uint(bits-1))
	modulus.Add(modulus, n)
	pub, err := asn1.Marshal(struct{ N, E *big.Int }{modulus, big.NewInt(65537)})
	require.NoError(t, err)
	rsaOID := asn1.ObjectIdentifier{1, 2, 840, 113549, 1, 1, 1}
	spki, err := asn1.Marshal(struct {
		Algorithm pkix.AlgorithmIdentifier
		Key       asn1.BitString
	}{pkix.AlgorithmIdentifier{Algorithm: rsaOID, Parameters: asn1.NullRawValue}, asn1.BitString{Bytes: pub, BitLength: 8 * len(pub)}})
	require.NoError(t, err)
	tbs.PublicKey = asn1.RawValue{FullBytes: spki}
	tbsDER, err := asn1.Marshal(tbs)
	require.NoError(t, err)

	sig := make([]byte, (bits+7)/8)
	_, err = rand.Read(sig[1:]) // below the modulus: the leading byte stays zero
	require.NoError(t, err)
	sha256WithRSA := asn1.ObjectIdentifier{1, 2, 840, 113549, 1, 1, 11}
	csr, err := asn1.Marshal(struct {
		TBS       asn1.RawValue
		Algorithm pkix.AlgorithmIdentifier
		Signature asn1.BitString
	}{asn1.RawValue{FullBytes: tbsDER}, pkix.AlgorithmIdentifier{Algorithm: sha256WithRSA, Parameters: asn1.NullRawValue}, asn1.BitString{Bytes: sig, BitLength: 8 * len(sig)}})
	require.NoError(t, err)
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: csr})
}
