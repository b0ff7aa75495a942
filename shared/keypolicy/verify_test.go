package keypolicy

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// issue makes a certificate for pub signed by parent's key (self-signed
// when parent is nil).
func issue(t *testing.T, name string, pub crypto.PublicKey, parent *x509.Certificate, parentKey crypto.Signer, ca bool) *x509.Certificate {
	t.Helper()
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		BasicConstraintsValid: true, IsCA: ca,
	}
	if ca {
		tmpl.KeyUsage = x509.KeyUsageCertSign
	} else {
		tmpl.DNSNames = []string{name}
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	}
	if parent == nil {
		parent = tmpl
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, pub, parentKey)
	require.NoError(t, err)
	c, err := x509.ParseCertificate(der)
	require.NoError(t, err)
	return c
}

func key(t *testing.T, curve elliptic.Curve) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(curve, rand.Reader)
	require.NoError(t, err)
	return k
}

// serve answers one TLS handshake on loopback with chain and leafKey and
// returns its address.
func serve(t *testing.T, chain []*x509.Certificate, leafKey crypto.Signer) string {
	t.Helper()
	pair := tls.Certificate{PrivateKey: leafKey}
	for _, c := range chain {
		pair.Certificate = append(pair.Certificate, c.Raw)
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{pair}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_ = c.(*tls.Conn).HandshakeContext(context.Background())
			_ = c.Close()
		}
	}()
	return ln.Addr().String()
}

func dial(addr, serverName string, roots *x509.CertPool) error {
	cfg := ClientConfig(&tls.Config{RootCAs: roots, ServerName: serverName, MinVersion: tls.VersionTLS12})
	c, err := (&tls.Dialer{NetDialer: &net.Dialer{Timeout: 5 * time.Second}, Config: cfg}).DialContext(context.Background(), "tcp", addr)
	if err != nil {
		return err
	}
	return c.Close()
}

func TestClientConfigChecksKeysThenTheChainAndTheName(t *testing.T) {
	caKey := key(t, elliptic.P256())
	ca := issue(t, "grid-ca", &caKey.PublicKey, nil, caKey, true)
	roots := x509.NewCertPool()
	roots.AddCert(ca)

	leafKey := key(t, elliptic.P256())
	leaf := issue(t, "provider.test", &leafKey.PublicKey, ca, caKey, false)
	good := serve(t, []*x509.Certificate{leaf}, leafKey)
	require.NoError(t, dial(good, "provider.test", roots), "a chain of accepted keys to the roots, for the name")
	require.Error(t, dial(good, "other.test", roots), "another name")
	otherKey := key(t, elliptic.P256())
	otherRoots := x509.NewCertPool()
	otherRoots.AddCert(issue(t, "other-ca", &otherKey.PublicKey, nil, otherKey, true))
	require.Error(t, dial(good, "provider.test", otherRoots), "another CA")

	// An intermediate whose key is of a refused kind: refused for its key,
	// though the chain is otherwise valid.
	interKey := key(t, elliptic.P521())
	inter := issue(t, "intermediate", &interKey.PublicKey, ca, caKey, true)
	leaf2Key := key(t, elliptic.P256())
	leaf2 := issue(t, "provider.test", &leaf2Key.PublicKey, inter, interKey, false)
	bad := serve(t, []*x509.Certificate{leaf2, inter}, leaf2Key)
	err := dial(bad, "provider.test", roots)
	require.ErrorIs(t, err, ErrKeyRefused)
}

func TestVerifyServerChainRefusesBeforeAnySignature(t *testing.T) {
	// An invented intermediate with a 59,200-bit modulus: refused by its
	// size; no signature made with it is checked (none could be: it is no
	// real key).
	caKey := key(t, elliptic.P256())
	ca := issue(t, "grid-ca", &caKey.PublicKey, nil, caKey, true)
	leafKey := key(t, elliptic.P256())
	leaf := issue(t, "provider.test", &leafKey.PublicKey, ca, caKey, false)
	huge := &x509.Certificate{PublicKey: &rsa.PublicKey{N: new(big.Int).Lsh(big.NewInt(1), 59199), E: 65537}}
	require.ErrorIs(t, VerifyServerChain([]*x509.Certificate{leaf, huge}, nil, "provider.test"), ErrKeyRefused)
	require.Error(t, VerifyServerChain(nil, nil, "provider.test"))
}
