// Package testpki makes certificates for tests (roots, intermediates,
// leaves with chosen validity and usage) and projects them the way the
// kubelet projects a Secret volume, ..data swap included.
package testpki

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

var serial atomic.Int64

// Issuer is a CA: a root or an intermediate.
type Issuer struct {
	Cert *x509.Certificate
	Key  crypto.Signer
	PEM  []byte
	root bool
}

// Validity and usage of a certificate; zero times mean an hour ago and a
// day from now.
type Opts struct {
	NotBefore, NotAfter time.Time
	ClientOnly          bool // no server-auth usage
	RSABits             int  // an RSA key of this size instead of P-256
	// Curve, when set, is the ECDSA curve instead of P-256 (a P-521 key is
	// one gridsync refuses, made in a millisecond).
	Curve elliptic.Curve
	// Names, when set, are a leaf's only DNS names (no IP address):
	// a certificate for another name than the one dialled.
	Names []string
}

// NewRoot makes a self-signed root CA.
func NewRoot(t testing.TB, name string) *Issuer {
	t.Helper()
	i := issue(t, nil, name, true, Opts{})
	i.root = true
	return i
}

// NewRootWith makes a self-signed root CA with chosen validity.
func NewRootWith(t testing.TB, name string, o Opts) *Issuer {
	t.Helper()
	i := issue(t, nil, name, true, o)
	i.root = true
	return i
}

// Intermediate makes a CA signed by i.
func (i *Issuer) Intermediate(t testing.TB, name string, o Opts) *Issuer {
	t.Helper()
	return issue(t, i, name, true, o)
}

// Leaf makes a certificate for localhost and 127.0.0.1 (or o.Names) signed by i and
// returns it PEM-encoded, followed by i when i is an intermediate, with
// its PEM-encoded key.
func (i *Issuer) Leaf(t testing.TB, name string, o Opts) (certPEM, keyPEM []byte) {
	t.Helper()
	l := issue(t, i, name, false, o)
	certPEM = l.PEM
	if !i.root {
		certPEM = append(append([]byte(nil), certPEM...), i.PEM...)
	}
	if ec, ok := l.Key.(*ecdsa.PrivateKey); ok {
		der, err := x509.MarshalECPrivateKey(ec)
		require.NoError(t, err)
		return certPEM, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der})
	}
	der, err := x509.MarshalPKCS8PrivateKey(l.Key)
	require.NoError(t, err)
	return certPEM, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})
}

func issue(t testing.TB, parent *Issuer, name string, ca bool, o Opts) *Issuer {
	t.Helper()
	i, err := issueCert(parent, name, ca, o)
	require.NoError(t, err)
	return i
}

// LoopbackServer makes a root CA and a serving certificate of it for
// localhost and 127.0.0.1, valid a day, for a server that is not a
// test's own (one the demo starts): the CA's certificate, the server's
// and its key, PEM-encoded.
func LoopbackServer(name string) (caPEM, certPEM, keyPEM []byte, err error) {
	ca, err := issueCert(nil, name+" CA", true, Opts{})
	if err != nil {
		return nil, nil, nil, err
	}
	leaf, err := issueCert(ca, name, false, Opts{})
	if err != nil {
		return nil, nil, nil, err
	}
	der, err := x509.MarshalPKCS8PrivateKey(leaf.Key)
	if err != nil {
		return nil, nil, nil, err
	}
	return ca.PEM, leaf.PEM, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

func issueCert(parent *Issuer, name string, ca bool, o Opts) (*Issuer, error) {
	var key crypto.Signer
	var err error
	if o.RSABits > 0 {
		key, err = rsa.GenerateKey(rand.Reader, o.RSABits) //nolint:gosec // weak keys are what some tests need
	} else {
		curve := o.Curve
		if curve == nil {
			curve = elliptic.P256()
		}
		key, err = ecdsa.GenerateKey(curve, rand.Reader)
	}
	if err != nil {
		return nil, err
	}
	now := time.Now()
	if o.NotBefore.IsZero() {
		o.NotBefore = now.Add(-time.Hour)
	}
	if o.NotAfter.IsZero() {
		o.NotAfter = now.Add(24 * time.Hour)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial.Add(1)),
		Subject:      pkix.Name{CommonName: name},
		NotBefore:    o.NotBefore,
		NotAfter:     o.NotAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
	}
	if ca {
		tmpl.IsCA, tmpl.BasicConstraintsValid = true, true
		tmpl.KeyUsage |= x509.KeyUsageCertSign
	} else {
		tmpl.DNSNames = []string{"localhost"}
		tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1)}
		if len(o.Names) > 0 {
			tmpl.DNSNames, tmpl.IPAddresses = o.Names, nil
		}
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		if o.ClientOnly {
			tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
		}
	}
	parentCert, parentKey := tmpl, key
	if parent != nil {
		parentCert, parentKey = parent.Cert, parent.Key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parentCert, key.Public(), parentKey)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &Issuer{Cert: cert, Key: key, PEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}, nil
}

// Projection reproduces the kubelet's atomic writer for a Secret volume:
// each generation is a hidden timestamped folder, ..data points at the
// current one and is replaced by renaming ..data_tmp over it, and the
// visible names are symlinks through ..data.
type Projection struct {
	t   testing.TB
	Dir string
	seq int
}

// NewProjection projects into a new temporary folder.
func NewProjection(t testing.TB) *Projection {
	return &Projection{t: t, Dir: t.TempDir()}
}

// Path is a visible name in the projection.
func (p *Projection) Path(name string) string { return filepath.Join(p.Dir, name) }

// Publish projects files as the next generation.
func (p *Projection) Publish(files map[string][]byte) {
	p.t.Helper()
	p.seq++
	gen := fmt.Sprintf("..%s.%09d", time.Now().UTC().Format("2006_01_02_15_04_05"), p.seq)
	genDir := filepath.Join(p.Dir, gen)
	require.NoError(p.t, os.Mkdir(genDir, 0o755))
	for name, data := range files {
		require.NoError(p.t, os.WriteFile(filepath.Join(genDir, name), data, 0o600))
	}
	tmp := filepath.Join(p.Dir, "..data_tmp")
	require.NoError(p.t, os.Symlink(gen, tmp))
	old, _ := os.Readlink(filepath.Join(p.Dir, "..data"))
	require.NoError(p.t, os.Rename(tmp, filepath.Join(p.Dir, "..data")))
	for name := range files {
		link := filepath.Join(p.Dir, name)
		if _, err := os.Lstat(link); os.IsNotExist(err) {
			require.NoError(p.t, os.Symlink(filepath.Join("..data", name), link))
		}
	}
	if old != "" {
		require.NoError(p.t, os.RemoveAll(filepath.Join(p.Dir, old)))
	}
}
