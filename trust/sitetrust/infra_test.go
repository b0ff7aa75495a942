package sitetrust

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// infraCert is an infrastructure certificate of the test's grid CA.
func infraCert(t *testing.T, ca *CA, names ...string) (tls.Certificate, *x509.Certificate) {
	t.Helper()
	chain, key, err := ca.IssueInfrastructure(names, time.Now(), 0)
	require.NoError(t, err)
	pair, err := tls.X509KeyPair(chain, key)
	require.NoError(t, err)
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	require.NoError(t, err)
	return pair, leaf
}

// An infrastructure certificate, as the reference issues it for a
// database or a serving listener: no organization and no SPIFFE SAN, the
// leaf profile otherwise, valid under the grid CA for both ends of a
// connection.
func TestAnInfrastructureCertificateNamesNoSite(t *testing.T) {
	ca := newTestCA(t, time.Now())
	_, leaf := infraCert(t, ca, "db.data.svc.cluster.local", "db.example.com")

	assert.Empty(t, leaf.Subject.Organization, "no organization")
	assert.Empty(t, leaf.URIs, "no SPIFFE SAN, no URI SAN at all")
	assert.Equal(t, "db.data.svc.cluster.local", leaf.Subject.CommonName)
	assert.Equal(t, []string{"db.data.svc.cluster.local", "db.example.com"}, leaf.DNSNames)
	assert.True(t, NamesNoSite(leaf))
	assert.Empty(t, SPIFFESite(leaf))
	assert.Error(t, CheckSVID(leaf, "db"), "no site's SVID")
	critical, found := extension(leaf, oidBasicConstraints)
	assert.True(t, found && critical && !leaf.IsCA, "critical CA:FALSE")
	critical, found = extension(leaf, oidKeyUsage)
	assert.True(t, found && critical && leaf.KeyUsage == x509.KeyUsageDigitalSignature, "critical digital signature only")
	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert)
	for _, usage := range []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth} {
		_, err := leaf.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{usage}})
		assert.NoError(t, err, "valid under the grid CA for %v", usage)
	}
	assert.WithinDuration(t, time.Now().Add(DefaultInfrastructureLifetime), leaf.NotAfter, time.Minute)

	// The site certificates beside it name their site on both axes.
	site, err := ParseCertificates(must(ca.Issue("west", time.Now(), time.Hour)))
	require.NoError(t, err)
	assert.False(t, NamesNoSite(site[0]))
}

func must(chain, _ []byte, err error) []byte {
	if err != nil {
		panic(err)
	}
	return chain
}

// The names it may carry: at least one, DNS names only, and none in the
// sites' domain, which a probe checks a site's gateway by.
func TestAnInfrastructureCertificateRefusesSiteNames(t *testing.T) {
	ca := newTestCA(t, time.Now())
	for _, names := range [][]string{
		nil,
		{"west.grid.internal"},
		{"db.example.com", "grid.internal"},
		{"*.example.com"},
		{"DB.example.com"},
	} {
		_, _, err := ca.IssueInfrastructure(names, time.Now(), 0)
		assert.Error(t, err, "%q", names)
	}
	_, _, err := ca.IssueInfrastructure([]string{"west.grid.internal"}, time.Now(), 0)
	assert.ErrorContains(t, err, "in the sites' domain grid.internal")
}

// A negative lifetime is refused, never taken for the default.
func TestAnInfrastructureCertificateRefusesANegativeLifetime(t *testing.T) {
	ca := newTestCA(t, time.Now())
	_, _, err := ca.IssueInfrastructure([]string{"db.example.com"}, time.Now(), -time.Hour)
	assert.ErrorContains(t, err, "negative")
}

// Presented by a gateway, an infrastructure certificate matches no site
// in either mode: pinned, its pin and its name do not make it a site's
// gateway; SPIFFE, it is no site's SVID.
func TestAProbeRefusesAnInfrastructureCertificate(t *testing.T) {
	p := newPKI(t)
	infra, _ := infraCert(t, p.ca, "listener.example.com")
	addr := gateway(t, infra, p.roots, 0)

	pinned := p.target(addr, pin(infra))
	pinned.ServerName = "listener.example.com"
	o := Probe(context.Background(), pinned)
	assert.Equal(t, TrustFailure, o.Kind)
	assert.Equal(t, ReasonIdentityMismatch, o.Reason, o.Message)
	assert.Contains(t, o.Message, "names no site")

	spiffe := p.target(addr)
	spiffe.ServerName, spiffe.SPIFFE = "listener.example.com", true
	o = Probe(context.Background(), spiffe)
	assert.Equal(t, ReasonIdentityMismatch, o.Reason, o.Message)

	// The same gateway with a site certificate, pinned, verifies: what
	// refused the infrastructure certificate is that it names no site.
	west := siteCert(t, p.ca, "west", time.Now(), time.Hour)
	o = Probe(context.Background(), p.target(gateway(t, west, p.roots, 0), pin(west)))
	assert.Equal(t, ReasonTLSVerified, o.Reason, o.Message)
}
