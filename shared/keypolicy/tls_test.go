package keypolicy_test

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
	"errors"
	"math/big"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gridsync/gridsync/shared/keypolicy"
)

var serial atomic.Int64

// cert is a certificate and the key of its subject (nil for an invented
// key nobody holds).
type cert struct {
	*x509.Certificate
	key crypto.Signer
}

// names are a leaf's SANs.
type names struct {
	dns []string
	ips []net.IP
}

// certOpts shape a certificate: a CA, a leaf for names, for client
// authentication only, or valid until notAfter.
type certOpts struct {
	ca         bool
	names      names
	clientOnly bool
	notAfter   time.Time
}

// issue makes a certificate for pub (a new P-256 key when nil), signed by
// parent (self-signed when nil).
func issue(t *testing.T, cn string, pub crypto.PublicKey, parent *cert, o certOpts) *cert {
	t.Helper()
	var key crypto.Signer
	if pub == nil {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		require.NoError(t, err)
		key, pub = k, k.Public()
	}
	if o.notAfter.IsZero() {
		o.notAfter = time.Now().Add(time.Hour)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial.Add(1)), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: o.notAfter,
		BasicConstraintsValid: true, IsCA: o.ca,
	}
	if o.ca {
		tmpl.KeyUsage = x509.KeyUsageCertSign
		tmpl.SubjectKeyId = make([]byte, 20)
		_, _ = rand.Read(tmpl.SubjectKeyId)
	} else {
		tmpl.DNSNames, tmpl.IPAddresses = o.names.dns, o.names.ips
		tmpl.KeyUsage = x509.KeyUsageDigitalSignature
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		if o.clientOnly {
			tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
		}
	}
	parentCert, signer := tmpl, key
	if parent != nil {
		parentCert, signer = parent.Certificate, parent.key
	}
	if signer == nil {
		// The parent's key is invented: the certificate names it as its
		// issuer and is signed by another key, as anyone can make one.
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		require.NoError(t, err)
		p := *parentCert
		p.PublicKey = k.Public()
		parentCert, signer = &p, k
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parentCert, pub, signer)
	require.NoError(t, err)
	c, err := x509.ParseCertificate(der)
	require.NoError(t, err)
	return &cert{c, key}
}

// inventedRSA is an RSA public key of bits bits nobody holds: a random
// odd modulus of that length, as keypolicy's and crypto/tls's checks of
// size see a real one.
func inventedRSA(t *testing.T, bits int) *rsa.PublicKey {
	t.Helper()
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), uint(bits)))
	require.NoError(t, err)
	n.SetBit(n, bits-1, 1).SetBit(n, 0, 1)
	return &rsa.PublicKey{N: n, E: 65537}
}

// serve answers TLS handshakes on 127.0.0.1 with chain (the leaf first,
// whose key signs) and returns the port. Each handshake's outcome is
// dropped; sessions are resumed.
func serve(t *testing.T, leaf *cert, chain ...*cert) string {
	t.Helper()
	pair := tls.Certificate{PrivateKey: leaf.key, Certificate: [][]byte{leaf.Raw}}
	for _, c := range chain {
		pair.Certificate = append(pair.Certificate, c.Raw)
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12})
	require.NoError(t, err)
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				_ = c.SetDeadline(time.Now().Add(5 * time.Second))
				if c.(*tls.Conn).HandshakeContext(context.Background()) == nil {
					// A byte after the session tickets: a client that
					// reads it has them. Then wait for the client to
					// close.
					_, _ = c.Write([]byte{1})
					_, _ = c.Read(make([]byte, 1))
				}
				_ = c.Close()
			}()
		}
	}()
	_, port, err := net.SplitHostPort(ln.Addr().String())
	require.NoError(t, err)
	return port
}

var netDialer = &net.Dialer{Timeout: 5 * time.Second}

// dialPolicy connects to host:port as the prober does.
func dialPolicy(host, port string, cfg *tls.Config) (*tls.Conn, error) {
	return keypolicy.DialTLS(context.Background(), netDialer.DialContext, "tcp", net.JoinHostPort(host, port), cfg, 5*time.Second)
}

// dialStandard connects to host:port with crypto/tls's own verification.
func dialStandard(host, port string, cfg *tls.Config) (*tls.Conn, error) {
	c, err := (&tls.Dialer{NetDialer: netDialer, Config: cfg.Clone()}).DialContext(context.Background(), "tcp", net.JoinHostPort(host, port))
	if err != nil {
		return nil, err
	}
	return c.(*tls.Conn), nil
}

func closeConn(c *tls.Conn, err error) error {
	if err == nil {
		_ = c.Close()
	}
	return err
}

var (
	loopbackIP = net.IPv4(127, 0, 0, 1)
	both       = names{dns: []string{"localhost"}, ips: []net.IP{loopbackIP}}
	dnsOnly    = names{dns: []string{"localhost"}}
	ipOnly     = names{ips: []net.IP{loopbackIP}}
	otherName  = names{dns: []string{"provider.internal"}}
)

// The name checked is the one crypto/tls checks: the configured
// ServerName, else the host dialled, an IP address against the IP SANs
// (a client sends no SNI to an IP address, so nothing in the connection's
// state names it). Every case is decided as crypto/tls's own verification
// decides it.
func TestTheNameCheckedIsTheOneDialledOrConfigured(t *testing.T) {
	ca := issue(t, "provider-ca", nil, nil, certOpts{ca: true})
	roots := x509.NewCertPool()
	roots.AddCert(ca.Certificate)
	ports := map[string]string{}
	for name, n := range map[string]names{"both": both, "dns-only": dnsOnly, "ip-only": ipOnly, "other-name": otherName} {
		ports[name] = serve(t, issue(t, "provider", nil, ca, certOpts{names: n}))
	}
	for _, tc := range []struct {
		leaf, host, serverName string
		ok                     bool
	}{
		{"both", "127.0.0.1", "", true},
		{"both", "localhost", "", true},
		{"dns-only", "localhost", "", true},
		{"dns-only", "127.0.0.1", "", false}, // no SNI is sent: the IP address is what is checked
		{"dns-only", "127.0.0.1", "localhost", true},
		{"ip-only", "127.0.0.1", "", true},
		{"ip-only", "localhost", "", false},
		{"ip-only", "localhost", "127.0.0.1", true},
		{"other-name", "127.0.0.1", "", false},
		{"other-name", "localhost", "", false},
		{"other-name", "127.0.0.1", "provider.internal", true},
		{"other-name", "localhost", "provider.internal", true},
		{"both", "127.0.0.1", "provider.internal", false}, // the configured name, not the host
	} {
		t.Run(tc.leaf+"/"+tc.host+"/"+tc.serverName, func(t *testing.T) {
			cfg := &tls.Config{RootCAs: roots, ServerName: tc.serverName, MinVersion: tls.VersionTLS12}
			err := closeConn(dialPolicy(tc.host, ports[tc.leaf], cfg))
			standard := closeConn(dialStandard(tc.host, ports[tc.leaf], cfg))
			if tc.ok {
				require.NoError(t, err)
				require.NoError(t, standard)
				return
			}
			var hostname x509.HostnameError
			require.ErrorAs(t, err, &hostname)
			var verr *tls.CertificateVerificationError
			require.ErrorAs(t, err, &verr, "reported as crypto/tls reports it")
			require.ErrorAs(t, standard, &hostname)
		})
	}
}

// Beyond the name, the chain is verified as crypto/tls verifies it: to
// the configured roots only, for server authentication, at the
// configured time.
func TestTheChainIsVerifiedAsCryptoTLSVerifiesIt(t *testing.T) {
	ca := issue(t, "provider-ca", nil, nil, certOpts{ca: true})
	other := issue(t, "other-ca", nil, nil, certOpts{ca: true})
	roots := x509.NewCertPool()
	roots.AddCert(ca.Certificate)
	inter := issue(t, "intermediate", nil, ca, certOpts{ca: true})

	good := serve(t, issue(t, "provider", nil, inter, certOpts{names: both}), inter)
	for _, tc := range []struct {
		name string
		port string
		cfg  *tls.Config
		ok   bool
	}{
		{"an intermediate sent along", good, &tls.Config{RootCAs: roots}, true},
		{"another CA's roots", good, &tls.Config{RootCAs: func() *x509.CertPool {
			p := x509.NewCertPool()
			p.AddCert(other.Certificate)
			return p
		}()}, false},
		{"the system's roots", good, &tls.Config{}, false},
		{"later than the leaf", good, &tls.Config{RootCAs: roots, Time: func() time.Time { return time.Now().Add(2 * time.Hour) }}, false},
		{"the intermediate not sent", serve(t, issue(t, "provider", nil, inter, certOpts{names: both})), &tls.Config{RootCAs: roots}, false},
		{"a client-only leaf", serve(t, issue(t, "provider", nil, ca, certOpts{names: both, clientOnly: true})), &tls.Config{RootCAs: roots}, false},
		{"an expired leaf", serve(t, issue(t, "provider", nil, ca, certOpts{names: both, notAfter: time.Now().Add(-time.Minute)})), &tls.Config{RootCAs: roots}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.MinVersion = tls.VersionTLS12
			err := closeConn(dialPolicy("127.0.0.1", tc.port, tc.cfg))
			standard := closeConn(dialStandard("127.0.0.1", tc.port, tc.cfg))
			if tc.ok {
				require.NoError(t, err)
				require.NoError(t, standard)
				return
			}
			var verr *tls.CertificateVerificationError
			require.ErrorAs(t, err, &verr)
			require.NotErrorIs(t, err, keypolicy.ErrKeyRefused)
			require.ErrorAs(t, standard, &verr)
			assert.Equal(t, errors.Unwrap(standard).Error(), errors.Unwrap(err).Error(), "the same verdict")
		})
	}
}

// Keys are judged before any signature: chains that crypto/tls's own
// verification takes, or spends signatures on, are refused for their
// length or a key, with an error that says a key was refused.
func TestKeysAndLengthAreJudgedBeforeAnySignature(t *testing.T) {
	ca := issue(t, "provider-ca", nil, nil, certOpts{ca: true})
	roots := x509.NewCertPool()
	roots.AddCert(ca.Certificate)
	cfg := &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}

	// An intermediate with an 8,192-bit RSA key, the largest crypto/tls
	// takes (keypolicy: 4,096), signed by the CA: crypto/tls checks the
	// leaf's signature with it (and finds it wrong: nobody holds the
	// key); keypolicy refuses the key first.
	big := issue(t, "big-intermediate", inventedRSA(t, 8192), ca, certOpts{ca: true})
	port := serve(t, issue(t, "provider", nil, big, certOpts{names: both}), big)
	err := closeConn(dialPolicy("127.0.0.1", port, cfg))
	require.ErrorIs(t, err, keypolicy.ErrKeyRefused)
	assert.Contains(t, err.Error(), "RSA key of 8192 bits")
	var verr *tls.CertificateVerificationError
	require.ErrorAs(t, err, &verr)
	standard := closeConn(dialStandard("127.0.0.1", port, cfg))
	require.Error(t, standard)
	require.NotErrorIs(t, standard, keypolicy.ErrKeyRefused, "crypto/tls checked the signature instead")

	// A valid chain through an intermediate with a P-521 key: crypto/tls
	// takes it, keypolicy does not.
	p521, err := ecdsa.GenerateKey(elliptic.P521(), rand.Reader)
	require.NoError(t, err)
	weak := issue(t, "p521-intermediate", p521.Public(), ca, certOpts{ca: true})
	weak.key = p521
	port = serve(t, issue(t, "provider", nil, weak, certOpts{names: both}), weak)
	require.ErrorIs(t, closeConn(dialPolicy("127.0.0.1", port, cfg)), keypolicy.ErrKeyRefused)
	require.NoError(t, closeConn(dialStandard("127.0.0.1", port, cfg)))

	// A valid chain of five certificates: one more than MaxChain.
	parent := ca
	var chain []*cert
	for range keypolicy.MaxChain {
		parent = issue(t, "intermediate", nil, parent, certOpts{ca: true})
		chain = append([]*cert{parent}, chain...)
	}
	port = serve(t, issue(t, "provider", nil, parent, certOpts{names: both}), chain...)
	err = closeConn(dialPolicy("127.0.0.1", port, cfg))
	require.ErrorIs(t, err, keypolicy.ErrKeyRefused)
	assert.Contains(t, err.Error(), "chain of 5 certificates")
	require.NoError(t, closeConn(dialStandard("127.0.0.1", port, cfg)))
	// Four pass.
	port = serve(t, issue(t, "provider", nil, chain[1], certOpts{names: both}), chain[1:]...)
	require.NoError(t, closeConn(dialPolicy("127.0.0.1", port, cfg)))

	// A key larger than 8,192 bits is refused by crypto/tls itself as it
	// parses the chain, before the check is called.
	huge := issue(t, "huge-intermediate", inventedRSA(t, 59200), ca, certOpts{ca: true})
	port = serve(t, issue(t, "provider", nil, huge, certOpts{names: both}), huge)
	err = closeConn(dialPolicy("127.0.0.1", port, cfg))
	require.ErrorContains(t, err, "RSA key larger than 8192 bits")
}

// VerifyServerChain checks no signature of a chain whose keys it refuses:
// an invented intermediate of 59,200 bits is refused by its size, and no
// roots are even looked at.
func TestVerifyServerChainRefusesBeforeAnySignature(t *testing.T) {
	ca := issue(t, "provider-ca", nil, nil, certOpts{ca: true})
	leaf := issue(t, "provider", nil, ca, certOpts{names: both})
	huge := &x509.Certificate{PublicKey: inventedRSA(t, 59200)}
	err := keypolicy.VerifyServerChain([]*x509.Certificate{leaf.Certificate, huge}, x509.NewCertPool(), "localhost", time.Now())
	require.ErrorIs(t, err, keypolicy.ErrKeyRefused)
	require.Error(t, keypolicy.VerifyServerChain(nil, nil, "localhost", time.Now()))
	roots := x509.NewCertPool()
	roots.AddCert(ca.Certificate)
	require.NoError(t, keypolicy.VerifyServerChain([]*x509.Certificate{leaf.Certificate}, roots, "127.0.0.1", time.Now()))
}

// A resumed connection is verified too, and sessions are resumed as
// before: the session cache is the configuration's, its key the name
// checked.
func TestResumedConnectionsAreVerified(t *testing.T) {
	ca := issue(t, "provider-ca", nil, nil, certOpts{ca: true})
	roots := x509.NewCertPool()
	roots.AddCert(ca.Certificate)
	port := serve(t, issue(t, "provider", nil, ca, certOpts{names: dnsOnly}))
	var verified atomic.Int64
	cfg := &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12, ClientSessionCache: tls.NewLRUClientSessionCache(4),
		VerifyConnection: func(tls.ConnectionState) error { verified.Add(1); return nil }}
	resumed := 0
	for range 3 {
		c, err := dialPolicy("localhost", port, cfg)
		require.NoError(t, err)
		if c.ConnectionState().DidResume {
			resumed++
		}
		// Read the session ticket a TLS 1.3 server sends after the
		// handshake (the byte after it), then close.
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, err = c.Read(make([]byte, 1))
		require.NoError(t, err)
		_ = c.Close()
	}
	assert.Equal(t, 2, resumed, "the second and third connections resume")
	assert.Equal(t, int64(3), verified.Load(), "every connection, resumed or not, passed the check (the configuration's own runs after it)")

	// The session cached for localhost is not offered to 127.0.0.1 (the
	// cache key is the name checked), and the leaf has no IP SAN.
	require.Error(t, closeConn(dialPolicy("127.0.0.1", port, cfg)))
	// The configuration given is not changed.
	assert.False(t, cfg.InsecureSkipVerify)
	assert.Empty(t, cfg.ServerName)
}
