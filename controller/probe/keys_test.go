package probe_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gridsync/gridsync/controller/probe"
	"github.com/gridsync/gridsync/shared/keypolicy"
	"github.com/gridsync/gridsync/test/testpki"
	"github.com/gridsync/gridsync/trust/endpointtls"
)

// providerEndpoint is a provider's HTTPS endpoint on 127.0.0.1 presenting
// chain (DER, the leaf first) with the leaf's key; it counts requests and
// the HTTP version of the last. With clientCAs, it requires a client
// certificate of them.
type providerEndpoint struct {
	*httptest.Server
	requests atomic.Int64
	proto    atomic.Int64
}

func startEndpoint(t *testing.T, chain [][]byte, key any, http2 bool, clientCAs *x509.CertPool) *providerEndpoint {
	t.Helper()
	e := &providerEndpoint{}
	e.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		e.requests.Add(1)
		e.proto.Store(int64(r.ProtoMajor))
		_, _ = w.Write([]byte("q 1\n"))
	}))
	e.EnableHTTP2 = http2
	// Refused handshakes are what the tests make.
	e.Config.ErrorLog = log.New(io.Discard, "", 0)
	e.TLS = &tls.Config{Certificates: []tls.Certificate{{Certificate: chain, PrivateKey: key}}, MinVersion: tls.VersionTLS12}
	if clientCAs != nil {
		e.TLS.ClientAuth, e.TLS.ClientCAs = tls.RequireAndVerifyClientCert, clientCAs
	}
	e.StartTLS()
	t.Cleanup(e.Close)
	return e
}

// startLeafEndpoint serves a leaf of ca for o.Names (localhost and
// 127.0.0.1 when empty).
func startLeafEndpoint(t *testing.T, ca *testpki.Issuer, o testpki.Opts, http2 bool, clientCAs *x509.CertPool) *providerEndpoint {
	t.Helper()
	certPEM, keyPEM := ca.Leaf(t, "provider", o)
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	require.NoError(t, err)
	return startEndpoint(t, pair.Certificate, pair.PrivateKey, http2, clientCAs)
}

// url is the endpoint's /metrics URL with host.
func (e *providerEndpoint) url(host string) string {
	return "https://" + host + ":" + e.URL[strings.LastIndex(e.URL, ":")+1:] + "/metrics"
}

// keyProber dials loopback, IPv4 and IPv6 (localhost may resolve to
// both), and trusts ca with its own roots.
func keyProber(ca *testpki.Issuer) *probe.Prober {
	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert)
	return probe.New(probe.Options{RootCAs: roots, Destinations: probe.Destinations{AllowCIDRs: []netip.Prefix{
		netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")}}})
}

// withMaterial is an Endpoint whose material is ca and serverName.
func withMaterial(key string, ca *testpki.Issuer, serverName string) *probe.Endpoint {
	return &probe.Endpoint{Key: key, TLS: func(context.Context) (*endpointtls.Raw, error) {
		return &endpointtls.Raw{CA: ca.PEM, ServerName: serverName}, nil
	}}
}

// A provider endpoint's certificate is checked for the host dialled, or
// the material's serverName: by the endpoint's material and by the
// prober's own roots, a certificate for another name is refused, dialled
// by IP address (no SNI is sent) as by DNS name.
func TestEndpointNamesAreCheckedForTheHostDialled(t *testing.T) {
	ca := testpki.NewRoot(t, "provider-ca")
	p := keyProber(ca)
	both := startLeafEndpoint(t, ca, testpki.Opts{}, false, nil)
	dnsOnly := startLeafEndpoint(t, ca, testpki.Opts{Names: []string{"localhost"}}, false, nil)
	other := startLeafEndpoint(t, ca, testpki.Opts{Names: []string{"provider.internal"}}, false, nil)
	for _, tc := range []struct {
		name       string
		endpoint   *providerEndpoint
		host       string
		serverName string
		ok         bool
	}{
		{"both/ip", both, "127.0.0.1", "", true},
		{"both/dns", both, "localhost", "", true},
		{"dns-only/ip", dnsOnly, "127.0.0.1", "", false},
		{"dns-only/dns", dnsOnly, "localhost", "", true},
		{"dns-only/ip/serverName", dnsOnly, "127.0.0.1", "localhost", true},
		{"other/ip", other, "127.0.0.1", "", false},
		{"other/dns", other, "localhost", "", false},
		{"other/ip/serverName", other, "127.0.0.1", "provider.internal", true},
		{"other/dns/serverName", other, "localhost", "provider.internal", true},
		{"both/ip/another serverName", both, "127.0.0.1", "provider.internal", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := tc.endpoint.requests.Load()
			clients := []*probe.Endpoint{withMaterial("Metrics/"+tc.name, ca, tc.serverName)}
			if tc.serverName == "" {
				clients = append(clients, nil) // the prober's own roots
			}
			for _, e := range clients {
				_, err := p.Fetch(t.Context(), tc.endpoint.url(tc.host), probe.MaxTimeout, 1<<10, e)
				if tc.ok {
					require.NoError(t, err)
					continue
				}
				require.EqualError(t, err, probe.OutcomeTLSError)
			}
			if !tc.ok {
				assert.Equal(t, before, tc.endpoint.requests.Load(), "nothing was sent")
			}
		})
	}
}

// Chains crypto/tls's own verification takes, or spends signatures on,
// are refused by their keys or length before any signature: an
// intermediate with an 8,192-bit RSA key (no one holds it: crypto/tls
// would check the leaf's signature with it), one with a P-521 key, five
// certificates. Nothing is sent to such an endpoint.
func TestEndpointChainsAreJudgedByTheirKeys(t *testing.T) {
	ca := testpki.NewRoot(t, "provider-ca")
	p := keyProber(ca)
	leafKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)

	bigDER := testpki.Invented(t, "big-intermediate", testpki.HugeRSAKey(t, 8192), ca.Cert, ca.Key, true)
	big, err := x509.ParseCertificate(bigDER)
	require.NoError(t, err)
	bigLeaf := testpki.Invented(t, "provider", &leafKey.PublicKey, big, leafKey, false)

	p521 := ca.Intermediate(t, "p521-intermediate", testpki.Opts{Curve: elliptic.P521()})
	// Intermediates under the CA, each the next's issuer; long is them
	// as a server sends them, the leaf's issuer first.
	inters := []*testpki.Issuer{ca}
	var long [][]byte
	for range keypolicy.MaxChain {
		next := inters[len(inters)-1].Intermediate(t, "intermediate", testpki.Opts{})
		inters = append(inters, next)
		long = append([][]byte{next.Cert.Raw}, long...)
	}
	chainOf := func(i *testpki.Issuer, inters [][]byte) ([][]byte, any) {
		certPEM, keyPEM := i.Leaf(t, "provider", testpki.Opts{})
		pair, err := tls.X509KeyPair(certPEM, keyPEM)
		require.NoError(t, err)
		return append([][]byte{pair.Certificate[0]}, inters...), pair.PrivateKey
	}
	p521Chain, p521Key := chainOf(p521, [][]byte{p521.Cert.Raw})
	longChain, longKey := chainOf(inters[keypolicy.MaxChain], long)
	fourChain, fourKey := chainOf(inters[keypolicy.MaxChain-1], long[1:])

	for _, tc := range []struct {
		name  string
		chain [][]byte
		key   any
		ok    bool
	}{
		{"8192-bit RSA intermediate", [][]byte{bigLeaf, bigDER}, leafKey, false},
		{"P-521 intermediate", p521Chain, p521Key, false},
		{"five certificates", longChain, longKey, false},
		{"four certificates", fourChain, fourKey, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := startEndpoint(t, tc.chain, tc.key, false, nil)
			for _, e := range []*probe.Endpoint{withMaterial("Metrics/"+tc.name, ca, ""), nil} {
				_, err := p.Fetch(t.Context(), srv.url("127.0.0.1"), probe.MaxTimeout, 1<<10, e)
				if tc.ok {
					require.NoError(t, err)
					continue
				}
				require.EqualError(t, err, probe.OutcomeTLSError)
			}
			if !tc.ok {
				assert.Zero(t, srv.requests.Load(), "nothing was sent")
			}
		})
	}

	// The P-521 and long chains are valid: crypto/tls's own verification
	// takes them.
	for _, chain := range [][][]byte{p521Chain, longChain} {
		leaf, err := x509.ParseCertificate(chain[0])
		require.NoError(t, err)
		opts := x509.VerifyOptions{Roots: x509.NewCertPool(), Intermediates: x509.NewCertPool(), DNSName: "127.0.0.1"}
		opts.Roots.AddCert(ca.Cert)
		for _, der := range chain[1:] {
			c, err := x509.ParseCertificate(der)
			require.NoError(t, err)
			opts.Intermediates.AddCert(c)
		}
		_, err = leaf.Verify(opts)
		require.NoError(t, err)
	}
}

// The prober's own client still offers HTTP/2, an Endpoint's client
// HTTP/1.1 only, and an Endpoint's material still presents its client
// certificate.
func TestEndpointProtocolsAndClientCertificatesAreKept(t *testing.T) {
	ca := testpki.NewRoot(t, "provider-ca")
	p := keyProber(ca)
	srv := startLeafEndpoint(t, ca, testpki.Opts{}, true, nil)
	_, err := p.Fetch(t.Context(), srv.url("127.0.0.1"), probe.MaxTimeout, 1<<10, nil)
	require.NoError(t, err)
	assert.EqualValues(t, 2, srv.proto.Load())
	_, err = p.Fetch(t.Context(), srv.url("127.0.0.1"), probe.MaxTimeout, 1<<10, withMaterial("Metrics/h1", ca, ""))
	require.NoError(t, err)
	assert.EqualValues(t, 1, srv.proto.Load())

	clients := testpki.NewRoot(t, "client-ca")
	certPEM, keyPEM := clients.Leaf(t, "agent", testpki.Opts{ClientOnly: true})
	pool := x509.NewCertPool()
	pool.AddCert(clients.Cert)
	mtls := startLeafEndpoint(t, ca, testpki.Opts{}, false, pool)
	e := &probe.Endpoint{Key: "Metrics/mtls", TLS: func(context.Context) (*endpointtls.Raw, error) {
		return &endpointtls.Raw{CA: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.Cert.Raw}), Cert: certPEM, Key: keyPEM}, nil
	}}
	_, err = p.Fetch(t.Context(), mtls.url("127.0.0.1"), probe.MaxTimeout, 1<<10, e)
	require.NoError(t, err)
	_, err = p.Fetch(t.Context(), mtls.url("127.0.0.1"), probe.MaxTimeout, 1<<10, withMaterial("Metrics/no-cert", ca, ""))
	require.Error(t, err, "without the certificate, refused")
}
