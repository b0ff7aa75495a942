package sitetrust

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"encoding/pem"
	"math/big"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gridsync/gridsync/shared/keypolicy"
)

func newTestCA(t *testing.T, now time.Time) *CA {
	t.Helper()
	certPEM, keyPEM, err := NewCA(now, CALifetime)
	require.NoError(t, err)
	ca, err := ParseCA(certPEM, keyPEM)
	require.NoError(t, err)
	return ca
}

func extension(c *x509.Certificate, oid asn1.ObjectIdentifier) (critical, found bool) {
	for _, e := range c.Extensions {
		if e.Id.Equal(oid) {
			return e.Critical, true
		}
	}
	return false, false
}

// The issued certificate has exactly the reference's X.509-SVID leaf
// profile, checked field by field on the parsed certificate.
func TestIssuedSiteCertificateHasTheSVIDProfile(t *testing.T) {
	now := time.Now()
	ca := newTestCA(t, now)
	chain, key, err := ca.Issue("west-edge", now, 24*time.Hour)
	require.NoError(t, err)

	certs, err := ParseCertificates(chain)
	require.NoError(t, err)
	require.Len(t, certs, 2, "tls.crt is the leaf then the chain")
	leaf := certs[0]
	assert.Equal(t, ca.Cert.Raw, certs[1].Raw, "the chain is the grid CA")

	crit, ok := extension(leaf, oidBasicConstraints)
	assert.True(t, ok && crit, "basic constraints present and critical")
	assert.True(t, leaf.BasicConstraintsValid)
	assert.False(t, leaf.IsCA)
	crit, ok = extension(leaf, oidKeyUsage)
	assert.True(t, ok && crit, "key usage present and critical")
	assert.Equal(t, x509.KeyUsageDigitalSignature, leaf.KeyUsage, "digital signature only")
	assert.ElementsMatch(t, []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}, leaf.ExtKeyUsage)
	assert.Equal(t, []string{"west-edge"}, leaf.Subject.Organization, "exactly one organization, the site name")
	require.Len(t, leaf.URIs, 1, "one SPIFFE URI SAN")
	assert.Equal(t, "spiffe://grid.internal/site/west-edge", leaf.URIs[0].String())
	assert.Equal(t, "west-edge", SPIFFESite(leaf))
	assert.Equal(t, []string{"west-edge.grid.internal"}, leaf.DNSNames)
	assert.Empty(t, leaf.IPAddresses)
	assert.Empty(t, leaf.EmailAddresses)
	assert.NoError(t, CheckSVID(leaf, "west-edge"))
	assert.Error(t, CheckSVID(leaf, "east"), "the profile is the site's own")

	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert)
	_, err = leaf.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
	require.NoError(t, err, "chains to the grid CA for client authentication")
	_, err = leaf.Verify(x509.VerifyOptions{Roots: roots, DNSName: "west-edge.grid.internal"})
	require.NoError(t, err, "and for server authentication")

	held, err := ParseHeld(chain, key)
	require.NoError(t, err)
	assert.Equal(t, leaf.Raw, held.Leaf.Raw)
	b, _ := pem.Decode(key)
	assert.Equal(t, "PRIVATE KEY", b.Type)

	assert.Equal(t, "", ReissueReason(held, ca.Cert, "west-edge", now), "a fresh certificate is kept")
}

func TestSiteNamesAreLowercaseDNSLabels(t *testing.T) {
	ca := newTestCA(t, time.Now())
	for _, bad := range []string{"", "West", "a.b", "a_b", "-a", strings.Repeat("a", 64), "a/b"} {
		_, _, err := ca.Issue(bad, time.Now(), time.Hour)
		assert.Error(t, err, "%q", bad)
	}
}

// Renewal at two thirds of the lifetime, and a certificate that is not
// the CA's, not the site's or not in the profile is reissued.
func TestReissueReasons(t *testing.T) {
	now := time.Now()
	ca := newTestCA(t, now)
	chain, key, err := ca.Issue("east", now, 90*time.Second)
	require.NoError(t, err)
	held, err := ParseHeld(chain, key)
	require.NoError(t, err)
	renew := RenewAt(held.Leaf)
	life := held.Leaf.NotAfter.Sub(held.Leaf.NotBefore)
	assert.Equal(t, held.Leaf.NotBefore.Add(life*2/3), renew)
	assert.True(t, renew.After(now), "a short lifetime is not backdated past its renewal point")

	assert.Empty(t, ReissueReason(held, ca.Cert, "east", renew.Add(-time.Second)))
	assert.Contains(t, ReissueReason(held, ca.Cert, "east", renew), "two thirds")
	assert.Contains(t, ReissueReason(held, ca.Cert, "west", now), "profile")
	other := newTestCA(t, now)
	assert.Contains(t, ReissueReason(held, other.Cert, "east", now), "not valid under the grid CA")
	assert.Contains(t, ReissueReason(held, ca.Cert, "east", held.Leaf.NotAfter.Add(time.Second)), "not valid")
}

// A certificate issued with no lifetime asked for lives the CA's
// SiteLifetime, a day when the CA has none; one asked for wins. A day's
// certificate is renewed with a third of it, 8 h, left.
func TestTheLifetimeOfACertificateWithNoneAskedFor(t *testing.T) {
	now := time.Now()
	ca := newTestCA(t, now)
	life := func(ca *CA, asked time.Duration) (time.Duration, time.Duration) {
		chain, err := ca.IssueFor("east", ca.Cert.PublicKey, now, asked)
		require.NoError(t, err)
		certs, err := ParseCertificates(chain)
		require.NoError(t, err)
		return certs[0].NotAfter.Sub(now), certs[0].NotAfter.Sub(RenewAt(certs[0]))
	}
	got, left := life(ca, 0)
	assert.Equal(t, 24*time.Hour, got.Round(time.Minute))
	assert.Equal(t, 8*time.Hour, left.Round(time.Minute), "a third of the day left (and of the minute it is backdated)")
	pinned := *ca
	pinned.SiteLifetime = PinnedSiteLifetime
	got, _ = life(&pinned, 0)
	assert.Equal(t, 90*24*time.Hour, got.Round(time.Minute))
	got, _ = life(&pinned, time.Hour)
	assert.Equal(t, time.Hour, got.Round(time.Minute), "the lifetime asked for wins")
}

func TestParseRefusesWhatIsNotACertificateOrCA(t *testing.T) {
	now := time.Now()
	ca := newTestCA(t, now)
	chain, key, err := ca.Issue("east", now, time.Hour)
	require.NoError(t, err)

	_, err = ParseCertificates(key)
	require.Error(t, err)
	assert.NotContains(t, err.Error(), string(key[30:60]), "a key is never quoted")
	_, err = ParseCertificates([]byte("not pem"))
	assert.Error(t, err)
	_, err = ParseCertificates([]byte(strings.Repeat("x", MaxPEMBytes+1)))
	assert.ErrorContains(t, err, "over the limit")

	_, err = ParseCA(chain, key)
	assert.ErrorContains(t, err, "not a CA", "a leaf cannot issue")
	caPEM, _, err := NewCA(now, time.Hour)
	require.NoError(t, err)
	_, err = ParseCA(caPEM, key)
	assert.ErrorContains(t, err, "does not belong")

	_, err = ParseHeld(chain, nil)
	assert.Error(t, err)
	_, otherKey, err := ca.Issue("east", now, time.Hour)
	require.NoError(t, err)
	_, err = ParseHeld(chain, otherKey)
	assert.ErrorContains(t, err, "do not make a pair")
}

func TestFingerprintIsLowercaseHexOfTheDER(t *testing.T) {
	fp := Fingerprint([]byte("x"))
	assert.Equal(t, "2d711642b726b04401627ca9fbac32f5c8530fb1903cc4db02258717921a4881", fp)
}

// A site certificate or grid CA whose key gridsync does not accept (here
// RSA of 1,024 bits) is refused where it is read, naming the key's kind
// and size, before any signature made with it is checked.
func TestHeldIdentityAndCAKeysOfAnAcceptedKind(t *testing.T) {
	now := time.Now()
	ca := newTestCA(t, now)
	weak, err := rsa.GenerateKey(rand.Reader, 1024)
	require.NoError(t, err)
	keyDER, err := x509.MarshalPKCS8PrivateKey(weak)
	require.NoError(t, err)
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})

	chain, err := ca.IssueFor("site-a", weak.Public(), now, time.Hour)
	require.NoError(t, err)
	_, err = ParseHeld(chain, keyPEM)
	require.ErrorIs(t, err, keypolicy.ErrKeyRefused)
	assert.Contains(t, err.Error(), "RSA key of 1024 bits")

	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "weak CA"}, NotBefore: now, NotAfter: now.Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, weak.Public(), weak)
	require.NoError(t, err)
	_, err = ParseCA(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), keyPEM)
	require.ErrorIs(t, err, keypolicy.ErrKeyRefused)
	assert.NotContains(t, err.Error(), "PRIVATE KEY")
}
