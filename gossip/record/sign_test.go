package record

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

// testCA is a grid CA made in the test, so that leaves of any shape can
// be issued: the agent's own CA only issues the site profile.
type testCA struct {
	cert  *x509.Certificate
	key   *ecdsa.PrivateKey
	roots *x509.CertPool
}

func newTestCA(t *testing.T) *testCA {
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
	return &testCA{cert: cert, key: key, roots: roots}
}

// leafSpec shapes a leaf; the zero value is site's certificate as the
// grid issues it, valid for a day around now.
type leafSpec struct {
	org, spiffe         string
	notBefore, notAfter time.Time
}

func (ca *testCA) leaf(t *testing.T, site string, spec leafSpec) *tls.Certificate {
	t.Helper()
	if spec.org == "" {
		spec.org = site
	}
	if spec.spiffe == "" {
		spec.spiffe = "spiffe://grid.internal/site/" + site
	}
	if spec.notBefore.IsZero() {
		spec.notBefore, spec.notAfter = time.Now().Add(-time.Hour), time.Now().Add(12*time.Hour)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	id, err := url.Parse(spec.spiffe)
	require.NoError(t, err)
	serial, err := rand.Int(rand.Reader, big.NewInt(math.MaxInt64))
	require.NoError(t, err)
	tmpl := &x509.Certificate{SerialNumber: serial, Subject: pkix.Name{CommonName: site, Organization: []string{spec.org}},
		NotBefore: spec.notBefore, NotAfter: spec.notAfter, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		DNSNames: []string{site + ".grid.internal"}, URIs: []*url.URL{id}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, key.Public(), ca.key)
	require.NoError(t, err)
	// As a site Secret's tls.crt holds it: the leaf, then the CA.
	return &tls.Certificate{Certificate: [][]byte{der, ca.cert.Raw}, PrivateKey: key}
}

// trust is how a network with this grid CA checks records.
func (ca *testCA) trust() *NetworkTrust {
	return &NetworkTrust{Roots: ca.roots, RootIDs: RootIDsOf([]*x509.Certificate{ca.cert}), Chains: NewChainCache()}
}

// signedBy is rec signed with c, as a site holding c would sign it.
func signedBy(t *testing.T, c *tls.Certificate, rec Record) Record {
	t.Helper()
	s, err := NewSigner(c)
	require.NoError(t, err)
	require.NoError(t, s.Sign(&rec))
	return rec
}

// The rules a record of another site is held to, one by one, on the
// check alone.
func TestCheckHoldsEveryRecordToItsSignature(t *testing.T) {
	ca := newTestCA(t)
	other := newTestCA(t)
	now := time.Now()
	ttl := 10 * time.Minute
	closed := ca.trust()
	rec := func() Record {
		return Record{Network: "prod", Site: "site-c", Kind: KindProviders, Version: uint64(now.UnixNano()), Grid: "g1",
			Providers: providers("pc")}
	}
	good := signedBy(t, ca.leaf(t, "site-c", leafSpec{}), rec())
	tampered := good
	tampered.Providers = providers("pc", "gpt-evil")
	future := rec()
	future.Version = math.MaxUint64
	old := rec()
	old.Version = uint64(now.Add(-ttl - time.Second).UnixNano())
	for name, c := range map[string]struct {
		trust *NetworkTrust
		rec   Record
		want  string
	}{
		"signed by the site's certificate":           {closed, good, ""},
		"the earlier SPIFFE form":                    {closed, signedBy(t, ca.leaf(t, "site-c", leafSpec{spiffe: "spiffe://grid.internal/site-c"}), rec()), ""},
		"a network this site takes no part in":       {nil, good, RejectUnknownNetwork},
		"an open network takes an unsigned record":   {&NetworkTrust{Open: true}, rec(), ""},
		"the grid CA did not load":                   {&NetworkTrust{Chains: NewChainCache()}, good, RejectNoRoots},
		"unsigned":                                   {closed, rec(), RejectUnsigned},
		"a body changed after signing":               {closed, tampered, RejectBadSignature},
		"another site's certificate":                 {closed, signedBy(t, ca.leaf(t, "site-x", leafSpec{}), rec()), RejectWrongSite},
		"an organization naming another site":        {closed, signedBy(t, ca.leaf(t, "site-c", leafSpec{org: "site-x"}), rec()), RejectWrongSite},
		"a SPIFFE ID naming another site":            {closed, signedBy(t, ca.leaf(t, "site-c", leafSpec{spiffe: "spiffe://grid.internal/site/site-x"}), rec()), RejectWrongSite},
		"a SPIFFE ID of another trust domain":        {closed, signedBy(t, ca.leaf(t, "site-c", leafSpec{spiffe: "spiffe://evil.example/site/site-c"}), rec()), RejectWrongSite},
		"another CA's certificate for the site":      {closed, signedBy(t, other.leaf(t, "site-c", leafSpec{}), rec()), RejectUntrusted},
		"an expired certificate":                     {closed, signedBy(t, ca.leaf(t, "site-c", leafSpec{notBefore: now.Add(-2 * time.Hour), notAfter: now.Add(-time.Minute)}), rec()), RejectUntrusted},
		"a certificate not valid yet":                {closed, signedBy(t, ca.leaf(t, "site-c", leafSpec{notBefore: now.Add(time.Hour), notAfter: now.Add(2 * time.Hour)}), rec()), RejectUntrusted},
		"versioned at the end of time":               {closed, signedBy(t, ca.leaf(t, "site-c", leafSpec{}), future), RejectFromFuture},
		"versioned at the end of time, open network": {&NetworkTrust{Open: true}, future, RejectFromFuture},
		"written longer ago than the tombstones":     {closed, signedBy(t, ca.leaf(t, "site-c", leafSpec{}), old), RejectTooOld},
	} {
		t.Run(name, func(t *testing.T) {
			require.Equal(t, c.want, Check(c.trust, &c.rec, "g1", now, ttl))
		})
	}
	require.Equal(t, RejectOtherGrid, Check(closed, &good, "g2", now, ttl), "signed for another grid")
	require.Empty(t, Check(closed, &good, "", now, ttl), "a site with no grid ID yet takes it")

	// A signature covers every field: change any and it fails.
	for field, change := range map[string]func(r *Record){
		"network": func(r *Record) { r.Network = "prod2" },
		"kind":    func(r *Record) { r.Kind = KindSignals },
		"version": func(r *Record) { r.Version++ },
		"deleted": func(r *Record) { r.Deleted = true },
		"grid":    func(r *Record) { r.Grid = "g1x" },
		"address": func(r *Record) { r.GatewayAddress = "127.9.9.9:443" },
	} {
		r := good
		change(&r)
		trust := closed
		if field == "network" {
			trust = ca.trust()
		}
		got := Check(trust, &r, "", now, ttl)
		require.Equal(t, RejectBadSignature, got, field)
	}
}
