package testpki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"math"
	"math/big"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// GridCA is a grid CA made in a test, so that site certificates of any
// shape can be issued: the agent's own CA (trust/sitetrust) only issues
// the site profile, and the tests of what checks a site's certificate need
// the wrong organization, the wrong SPIFFE ID and the wrong dates too.
type GridCA struct {
	Cert  *x509.Certificate
	Key   *ecdsa.PrivateKey
	Roots *x509.CertPool
}

// NewGridCA makes a grid CA valid from an hour ago for a day.
func NewGridCA(t testing.TB) *GridCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test grid CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	require.NoError(t, err)
	cert, err := x509.ParseCertificate(der)
	require.NoError(t, err)
	roots := x509.NewCertPool()
	roots.AddCert(cert)
	return &GridCA{Cert: cert, Key: key, Roots: roots}
}

// SiteLeafOpts shapes a site's certificate; the zero value is the
// certificate the grid issues a site, valid from an hour ago for twelve
// hours.
type SiteLeafOpts struct {
	// Organization names the site the certificate speaks for; empty is
	// the site itself.
	Organization string
	// SPIFFE is the certificate's URI SAN; empty is the site's own
	// (spiffe://grid.internal/site/<site>).
	SPIFFE              string
	NotBefore, NotAfter time.Time
}

// SiteLeaf issues site a certificate and returns it as a site Secret's
// tls.crt and tls.key hold it: the leaf, then the CA, with its key.
func (ca *GridCA) SiteLeaf(t testing.TB, site string, o SiteLeafOpts) *tls.Certificate {
	t.Helper()
	if o.Organization == "" {
		o.Organization = site
	}
	if o.SPIFFE == "" {
		o.SPIFFE = "spiffe://grid.internal/site/" + site
	}
	if o.NotBefore.IsZero() {
		o.NotBefore, o.NotAfter = time.Now().Add(-time.Hour), time.Now().Add(12*time.Hour)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	id, err := url.Parse(o.SPIFFE)
	require.NoError(t, err)
	serial, err := rand.Int(rand.Reader, big.NewInt(math.MaxInt64))
	require.NoError(t, err)
	tmpl := &x509.Certificate{SerialNumber: serial, Subject: pkix.Name{CommonName: site, Organization: []string{o.Organization}},
		NotBefore: o.NotBefore, NotAfter: o.NotAfter, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		DNSNames: []string{site + ".grid.internal"}, URIs: []*url.URL{id}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, key.Public(), ca.Key)
	require.NoError(t, err)
	return &tls.Certificate{Certificate: [][]byte{der, ca.Cert.Raw}, PrivateKey: key}
}
