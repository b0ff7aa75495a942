package sitetrust

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"net"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gridsync/gridsync/api/v1alpha1"
	"github.com/gridsync/gridsync/test/testgateway"
)

// pki is a grid CA and this site's identity, for the probe tests.
type pki struct {
	ca     *CA
	roots  *x509.CertPool
	client tls.Certificate
}

func newPKI(t *testing.T) *pki {
	t.Helper()
	ca := newTestCA(t, time.Now())
	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert)
	return &pki{ca: ca, roots: roots, client: siteCert(t, ca, "east", time.Now(), time.Hour)}
}

func siteCert(t *testing.T, ca *CA, site string, now time.Time, life time.Duration) tls.Certificate {
	t.Helper()
	chain, key, err := ca.Issue(site, now, life)
	require.NoError(t, err)
	pair, err := tls.X509KeyPair(chain, key)
	require.NoError(t, err)
	return pair
}

// custom signs an arbitrary template with the CA: certificates the agent
// never issues (a wrong name, no SVID profile).
func custom(t *testing.T, ca *CA, tmpl *x509.Certificate) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl.SerialNumber, _ = newSerial()
	if tmpl.NotAfter.IsZero() {
		tmpl.NotBefore, tmpl.NotAfter = time.Now().Add(-time.Minute), time.Now().Add(time.Hour)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, key.Public(), ca.key)
	require.NoError(t, err)
	return tls.Certificate{Certificate: [][]byte{der, ca.Cert.Raw}, PrivateKey: key}
}

func pin(c tls.Certificate) string { return Fingerprint(c.Certificate[0]) }

// gateway is a Go TLS server standing in for a remote site's gateway:
// it requires a client certificate from clientCAs.
func gateway(t *testing.T, cert tls.Certificate, clientCAs *x509.CertPool, maxVersion uint16) string {
	t.Helper()
	g, err := testgateway.Start("127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(g.Close)
	g.LimitVersion(maxVersion)
	g.Present(cert, clientCAs)
	return g.Addr
}

// rawServer accepts TCP and answers with what, then holds the connection.
func rawServer(t *testing.T, what []byte) string {
	t.Helper()
	l, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer func() { _ = c.Close() }()
				if what != nil {
					_, _ = c.Write(what)
				}
				_ = c.SetDeadline(time.Now().Add(5 * time.Second))
				var b [512]byte
				for {
					if _, err := c.Read(b[:]); err != nil {
						return
					}
				}
			}()
		}
	}()
	return l.Addr().String()
}

func (p *pki) target(addr string, pins ...string) Target {
	return Target{Address: addr, ServerName: "west.grid.internal", Roots: p.roots, Client: p.client, Pins: pins, Site: "west", Timeout: 2 * time.Second}
}

// Every reason of the reference, each from a real handshake.
func TestProbeReasons(t *testing.T) {
	p := newPKI(t)
	now := time.Now()
	good := siteCert(t, p.ca, "west", now, time.Hour)
	other := newTestCA(t, now)
	foreign := siteCert(t, other, "west", now, time.Hour)
	wrongSAN := siteCert(t, p.ca, "north", now, time.Hour)
	expired := siteCert(t, p.ca, "west", now.Add(-48*time.Hour), 24*time.Hour)
	notYet := siteCert(t, p.ca, "west", now.Add(24*time.Hour), 24*time.Hour)
	reissued := siteCert(t, p.ca, "west", now, time.Hour)
	otherRoots := x509.NewCertPool()
	otherRoots.AddCert(other.Cert)
	refused := rawServer(t, nil)
	closedAddr := func() string {
		l, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", "127.0.0.1:0")
		require.NoError(t, err)
		a := l.Addr().String()
		_ = l.Close()
		return a
	}()

	cases := []struct {
		name   string
		target Target
		kind   Kind
		reason string
	}{
		{"verified", p.target(gateway(t, good, p.roots, 0), pin(good)), Verified, ReasonTLSVerified},
		{"verified over TLS 1.2", p.target(gateway(t, good, p.roots, tls.VersionTLS12), pin(good)), Verified, ReasonTLSVerified},
		{"another CA", p.target(gateway(t, foreign, p.roots, 0), pin(foreign)), TrustFailure, ReasonUntrustedIssuer},
		{"the wrong SAN", p.target(gateway(t, wrongSAN, p.roots, 0), pin(wrongSAN)), TrustFailure, ReasonIdentityMismatch},
		{"expired", p.target(gateway(t, expired, p.roots, 0), pin(expired)), TrustFailure, ReasonCertificateExpired},
		{"not yet valid", p.target(gateway(t, notYet, p.roots, 0), pin(notYet)), TrustFailure, ReasonCertificateNotYetValid},
		{"a reissued leaf outside the pins", p.target(gateway(t, reissued, p.roots, 0), pin(good)), TrustFailure, ReasonPinMismatch},
		{"our certificate refused (TLS 1.3)", p.target(gateway(t, good, otherRoots, 0), pin(good)), TrustFailure, ReasonTLSProtocolError},
		{"our certificate refused (TLS 1.2)", p.target(gateway(t, good, otherRoots, tls.VersionTLS12), pin(good)), TrustFailure, ReasonTLSProtocolError},
		{"never answers TLS", func() Target {
			tg := p.target(refused, pin(good))
			tg.Timeout = 300 * time.Millisecond
			return tg
		}(), TrustFailure, ReasonHandshakeTimeout},
		{"answers garbage", p.target(rawServer(t, []byte("HTTP/1.1 400 Bad Request\r\n\r\n")), pin(good)), TrustFailure, ReasonTLSProtocolError},
		{"nothing listens", p.target(closedAddr, pin(good)), ConnectionFailure, ReasonConnectionFailed},
		{"not host:port", p.target("127.0.0.1", pin(good)), ConnectionFailure, ReasonConnectionFailed},
	}
	// What a site's status may say when the address was learnt from
	// gossip: a closed, silent, plain-HTTP or other-CA port reads alike.
	alike := map[string]bool{"another CA": true, "never answers TLS": true, "answers garbage": true, "nothing listens": true}
	var opaque []Outcome
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			o := Probe(context.Background(), c.target)
			assert.Equal(t, c.reason, o.Reason, o.Message)
			assert.Equal(t, c.kind, o.Kind, o.Message)
			assert.NotEmpty(t, o.Message)
			assert.NotContains(t, o.Message, "HTTP/1.1", "never what the server sent")
			told := o.Opaque(c.target.Address)
			assert.NotContains(t, told.Message, c.target.Address, "no address in what a learnt address's status says")
			if alike[c.name] {
				opaque = append(opaque, told)
			} else {
				assert.Equal(t, c.reason, told.Reason, "a grid gateway's own failure keeps its reason")
			}
		})
	}
	require.Len(t, opaque, len(alike))
	for _, o := range opaque[1:] {
		assert.Equal(t, opaque[0], o, "one reason for every port that is not a grid gateway")
	}
}

// A gateway whose chain carries an intermediate with an 8,192-bit RSA key
// (and a good leaf) is refused on the key, before any signature made with
// it is checked (crypto/tls itself refuses RSA keys above 8,192 bits);
// the status names no peer material.
func TestProbeRefusesUnacceptedKeys(t *testing.T) {
	p := newPKI(t)
	good := siteCert(t, p.ca, "west", time.Now(), time.Hour)
	// A modulus nobody holds the factors of; the grid CA itself signs
	// the certificate, so only its key is wrong.
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 8192))
	require.NoError(t, err)
	n.SetBit(n, 8191, 1).SetBit(n, 0, 1)
	serial, err := newSerial()
	require.NoError(t, err)
	tmpl := &x509.Certificate{SerialNumber: serial, Subject: pkix.Name{CommonName: "invented-intermediate"}, IsCA: true, BasicConstraintsValid: true,
		NotBefore: time.Now().Add(-time.Minute), NotAfter: time.Now().Add(time.Hour), KeyUsage: x509.KeyUsageCertSign}
	huge, err := x509.CreateCertificate(rand.Reader, tmpl, p.ca.Cert, &rsa.PublicKey{N: n, E: 65537}, p.ca.key)
	require.NoError(t, err)
	withHuge := tls.Certificate{Certificate: [][]byte{good.Certificate[0], huge}, PrivateKey: good.PrivateKey}
	o := Probe(context.Background(), p.target(gateway(t, withHuge, p.roots, 0), pin(good)))
	assert.Equal(t, TrustFailure, o.Kind, o.Message)
	assert.Equal(t, ReasonUntrustedIssuer, o.Reason, o.Message)
	assert.Contains(t, o.Message, "a key of a kind or size gridsync does not accept")
	assert.NotContains(t, o.Message, "invented-intermediate")
}

// A site probe dials under the destination rule it is given: a denied
// address is never connected to, and the status says why.
func TestProbeKeepsTheDestinationRule(t *testing.T) {
	p := newPKI(t)
	good := siteCert(t, p.ca, "west", time.Now(), time.Hour)
	addr := gateway(t, good, p.roots, 0)
	tg := p.target(addr, pin(good))
	var dialled bool
	tg.Dial = func(ctx context.Context, network, a string) (net.Conn, error) {
		dialled = true
		return nil, deniedForTest{}
	}
	o := Probe(context.Background(), tg)
	assert.True(t, dialled)
	assert.Equal(t, ReasonConnectionFailed, o.Reason)
	assert.Contains(t, o.Message, "not allowed")
}

type deniedForTest struct{}

func (deniedForTest) Error() string           { return "denied" }
func (deniedForTest) DestinationDenied() bool { return true }

// Pin rotation: the current and the next pin are both accepted, the old
// one removed refuses the old leaf, and a third identity is refused.
func TestPinRotation(t *testing.T) {
	p := newPKI(t)
	current := siteCert(t, p.ca, "west", time.Now(), time.Hour)
	next := siteCert(t, p.ca, "west", time.Now(), time.Hour)
	third := siteCert(t, p.ca, "west", time.Now(), time.Hour)
	atCurrent, atNext, atThird := gateway(t, current, p.roots, 0), gateway(t, next, p.roots, 0), gateway(t, third, p.roots, 0)

	both := []string{pin(current), pin(next)}
	assert.Equal(t, ReasonTLSVerified, Probe(context.Background(), p.target(atCurrent, both...)).Reason)
	assert.Equal(t, ReasonTLSVerified, Probe(context.Background(), p.target(atNext, both...)).Reason)
	assert.Equal(t, ReasonPinMismatch, Probe(context.Background(), p.target(atThird, both...)).Reason)
	assert.Equal(t, ReasonPinMismatch, Probe(context.Background(), p.target(atCurrent, pin(next))).Reason, "old pin removed")
	assert.Equal(t, ReasonTLSVerified, Probe(context.Background(), p.target(atNext, pin(next))).Reason)
}

// SPIFFE mode reads no pins and admits any site the grid CA signed, but
// only with the SVID profile of the site probed.
func TestProbeSPIFFEMode(t *testing.T) {
	p := newPKI(t)
	spiffe := func(addr string) Target {
		tg := p.target(addr)
		tg.SPIFFE = true
		return tg
	}
	good := siteCert(t, p.ca, "west", time.Now(), time.Hour)
	assert.Equal(t, ReasonTLSVerified, Probe(context.Background(), spiffe(gateway(t, good, p.roots, 0))).Reason)

	noProfile := custom(t, p.ca, &x509.Certificate{
		Subject: pkix.Name{CommonName: "west"}, DNSNames: []string{"west.grid.internal"},
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	})
	o := Probe(context.Background(), spiffe(gateway(t, noProfile, p.roots, 0)))
	assert.Equal(t, ReasonIdentityMismatch, o.Reason, o.Message)
	assert.Contains(t, o.Message, "SVID")

	// Another site's SVID with this site's DNS name still names the
	// other site.
	impostor := custom(t, p.ca, &x509.Certificate{
		Subject: pkix.Name{CommonName: "north", Organization: []string{"north"}}, DNSNames: []string{"west.grid.internal", "north.grid.internal"},
		URIs:                  siteCertURIs(t, "north"),
		BasicConstraintsValid: true, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	})
	assert.Equal(t, ReasonIdentityMismatch, Probe(context.Background(), spiffe(gateway(t, impostor, p.roots, 0))).Reason)
}

func siteCertURIs(t *testing.T, site string) []*url.URL {
	u, err := url.Parse(SPIFFEID(site))
	require.NoError(t, err)
	return []*url.URL{u}
}

func TestPlaintextProbeNeverPromotes(t *testing.T) {
	o := PlaintextProbe(context.Background(), rawServer(t, nil), time.Second, nil)
	assert.Equal(t, TrustFailure, o.Kind)
	assert.Equal(t, ReasonIdentityVerificationRequired, o.Reason)
	assert.Equal(t, PhaseConnecting, Next(PhaseActive, o))

	l, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	_ = l.Close()
	o = PlaintextProbe(context.Background(), addr, time.Second, nil)
	assert.Equal(t, ReasonConnectionFailed, o.Reason)
}

func TestPhaseTransitions(t *testing.T) {
	ok := Outcome{Kind: Verified}
	trust := Outcome{Kind: TrustFailure}
	conn := Outcome{Kind: ConnectionFailure}
	none := Outcome{Kind: AddressMissing}
	for _, c := range []struct {
		from v1alpha1.SitePhase
		o    Outcome
		to   v1alpha1.SitePhase
	}{
		{PhaseConnecting, ok, PhaseActive},
		{PhaseUnreachable, ok, PhaseActive},
		{PhaseDiscovered, ok, PhaseActive},
		{PhaseActive, trust, PhaseConnecting},
		{PhaseUnreachable, trust, PhaseConnecting},
		{PhaseActive, conn, PhaseUnreachable},
		{PhaseUnreachable, conn, PhaseUnreachable},
		{PhaseConnecting, conn, PhaseConnecting},
		{"", conn, PhaseConnecting},
		{PhaseActive, none, PhaseUnreachable},
		{PhaseConnecting, none, PhaseDiscovered},
		{"", none, PhaseDiscovered},
	} {
		assert.Equal(t, c.to, Next(c.from, c.o), "%s after kind %d", c.from, c.o.Kind)
	}
}
