package tlsidentity_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
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

// issuer is a CA (root or intermediate) for tests.
type issuer struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

type certOpts struct {
	notBefore, notAfter time.Time
	noServerAuth        bool
}

func newRoot(t *testing.T, name string) *issuer {
	t.Helper()
	return issue(t, nil, name, true, certOpts{})
}

func (i *issuer) intermediate(t *testing.T, name string, o certOpts) *issuer {
	t.Helper()
	return issue(t, i, name, true, o)
}

// leaf returns PEM certificate (leaf, then the issuer if it is an
// intermediate) and PEM key.
func (i *issuer) leaf(t *testing.T, name string, o certOpts) (certPEM, keyPEM []byte) {
	t.Helper()
	l := issue(t, i, name, false, o)
	certPEM = l.pem
	if i.cert.Subject.CommonName != i.cert.Issuer.CommonName {
		certPEM = append(append([]byte(nil), certPEM...), i.pem...)
	}
	der, err := x509.MarshalECPrivateKey(l.key)
	require.NoError(t, err)
	return certPEM, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der})
}

func issue(t *testing.T, parent *issuer, name string, ca bool, o certOpts) *issuer {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	now := time.Now()
	if o.notBefore.IsZero() {
		o.notBefore = now.Add(-time.Hour)
	}
	if o.notAfter.IsZero() {
		o.notAfter = now.Add(24 * time.Hour)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial.Add(1)),
		Subject:      pkix.Name{CommonName: name},
		NotBefore:    o.notBefore,
		NotAfter:     o.notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
	}
	if ca {
		tmpl.IsCA, tmpl.BasicConstraintsValid = true, true
		tmpl.KeyUsage |= x509.KeyUsageCertSign
	} else {
		tmpl.DNSNames = []string{"localhost"}
		tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1)}
		if !o.noServerAuth {
			tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		} else {
			tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
		}
	}
	parentCert, parentKey := tmpl, key
	if parent != nil {
		parentCert, parentKey = parent.cert, parent.key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parentCert, &key.PublicKey, parentKey)
	require.NoError(t, err)
	cert, err := x509.ParseCertificate(der)
	require.NoError(t, err)
	return &issuer{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// projection reproduces the kubelet's atomic writer for a Secret volume:
// each generation is a timestamped folder, ..data points at the current
// one and is replaced by renaming ..data_tmp over it, and the visible
// names are symlinks through ..data.
type projection struct {
	t   *testing.T
	dir string
	seq int
}

func newProjection(t *testing.T) *projection {
	return &projection{t: t, dir: t.TempDir()}
}

func (p *projection) path(name string) string { return filepath.Join(p.dir, name) }

func (p *projection) publish(files map[string][]byte) {
	p.t.Helper()
	p.seq++
	gen := fmt.Sprintf("..%s.%09d", time.Now().UTC().Format("2006_01_02_15_04_05"), p.seq)
	genDir := filepath.Join(p.dir, gen)
	require.NoError(p.t, os.Mkdir(genDir, 0o755))
	for name, data := range files {
		require.NoError(p.t, os.WriteFile(filepath.Join(genDir, name), data, 0o600))
	}
	tmp := filepath.Join(p.dir, "..data_tmp")
	require.NoError(p.t, os.Symlink(gen, tmp))
	old, _ := os.Readlink(filepath.Join(p.dir, "..data"))
	require.NoError(p.t, os.Rename(tmp, filepath.Join(p.dir, "..data")))
	for name := range files {
		link := filepath.Join(p.dir, name)
		if _, err := os.Lstat(link); os.IsNotExist(err) {
			require.NoError(p.t, os.Symlink(filepath.Join("..data", name), link))
		}
	}
	if old != "" {
		require.NoError(p.t, os.RemoveAll(filepath.Join(p.dir, old)))
	}
}
