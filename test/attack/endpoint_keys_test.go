package attack

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gridsync/gridsync/controller/probe"
	"github.com/gridsync/gridsync/test/measure"
	"github.com/gridsync/gridsync/test/testpki"
	"github.com/gridsync/gridsync/trust/endpointtls"
)

// A provider's endpoint is whatever its writer names, and the agent dials
// it for health checks and metrics scrapes. It presents a leaf for
// 127.0.0.1 and invented intermediates of one name with 8,192-bit RSA
// keys (the largest crypto/tls takes: it refuses a 59,200-bit one itself
// as it parses the chain), the leaf's signature made as if by one of
// them: crypto/tls's own verification tries the leaf's signature with
// each (crypto/x509 stops at 100 signatures), some 2 ms each, on every
// dial. Two such chains: three intermediates (a chain of four, as long as
// keypolicy takes) and 99. The agent's prober dials them as it dials a
// provider with spec.tls (its transport, the provider's CA as material)
// and one without (its own roots), and refuses both by their keys and
// length before any signature: a dial of the four costs at most twice a
// normal one (a full handshake with an ECDSA chain); one of the hundred,
// whose receiving and parsing crypto/tls does before any check can see
// the chain, at most half what crypto/tls's own verification of it costs.
// The endpoints run in this process: their side of each handshake is
// counted with the prober's.
func TestEndpointBigKeys(t *testing.T) {
	ca := testpki.NewRoot(t, "provider-ca")
	quiet := log.New(io.Discard, "", 0)
	var attackRequests atomic.Int64

	// A normal endpoint: a full handshake each dial (no session ticket,
	// no connection kept).
	certPEM, keyPEM := ca.Leaf(t, "provider", testpki.Opts{})
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	require.NoError(t, err)
	normal := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Connection", "close")
		_, _ = w.Write([]byte("q 1\n"))
	}))
	normal.TLS = &tls.Config{Certificates: []tls.Certificate{pair}, SessionTicketsDisabled: true, MinVersion: tls.VersionTLS12}
	normal.Config.ErrorLog = quiet
	normal.StartTLS()
	t.Cleanup(normal.Close)

	leafKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	serveChain := func(n int) *httptest.Server {
		chain := bigKeyChain(t, ca, &leafKey.PublicKey, n)
		s := httptest.NewUnstartedServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { attackRequests.Add(1) }))
		s.TLS = &tls.Config{Certificates: []tls.Certificate{{Certificate: chain, PrivateKey: leafKey}}, MinVersion: tls.VersionTLS12}
		s.Config.ErrorLog = quiet
		s.StartTLS()
		t.Cleanup(s.Close)
		return s
	}
	keys, many := serveChain(3), serveChain(99)

	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert)
	p := probe.New(probe.Options{RootCAs: roots, Destinations: probe.Destinations{AllowCIDRs: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}})
	endpoint := func(key string) *probe.Endpoint {
		return &probe.Endpoint{Key: key, TLS: func(context.Context) (*endpointtls.Raw, error) { return &endpointtls.Raw{CA: ca.PEM}, nil }}
	}
	// fetch scrapes url as the agent does, with the provider's CA as
	// material (e) or the prober's own roots (nil); it says whether the
	// scrape failed as a TLS failure.
	fetch := func(url string, e *probe.Endpoint) bool {
		_, err := p.Fetch(context.Background(), url+"/metrics", probe.MaxTimeout, 1<<10, e)
		return err != nil && err.Error() == probe.OutcomeTLSError
	}
	// standard dials url with the same material and crypto/tls's own
	// verification (a transport without the check, as before it).
	m, err := (&endpointtls.Raw{CA: ca.PEM}).Parse()
	require.NoError(t, err)
	standardClient := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: m.ClientConfig(), DisableKeepAlives: true}}
	standard := func(url string) bool {
		req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, url+"/metrics", http.NoBody)
		require.NoError(t, err)
		resp, err := standardClient.Do(req)
		if err == nil {
			_ = resp.Body.Close()
		}
		return err != nil && probe.OutcomeOf(err) == probe.OutcomeTLSError
	}

	dials, standardDials := size(50, 10), size(10, 3)
	// perDial is this process's CPU per dial, in milliseconds, of count
	// dials (the endpoint's side included: the same handshake, and the
	// chain sent), after one to warm (the client made, the chain parsed
	// once), and how many failed as TLS failures.
	perDial := func(count int, dial func() bool) (ms float64, tlsFailures int) {
		_ = dial()
		before := measure.MustCPU(t, os.Getpid())
		for range count {
			if dial() {
				tlsFailures++
			}
		}
		return measure.Millis(measure.MustCPU(t, os.Getpid())-before) / float64(count), tlsFailures
	}
	normalMs, normalFailed := perDial(dials, func() bool { return fetch(normal.URL, endpoint("Metrics/normal")) })
	require.Zero(t, normalFailed)
	keysMs, keysRefused := perDial(dials, func() bool { return fetch(keys.URL, endpoint("Metrics/keys")) })
	manyMs, manyRefused := perDial(dials, func() bool { return fetch(many.URL, endpoint("Metrics/many")) })
	// The prober's own client (a health check without spec.tls) too.
	defaultMs, defaultRefused := perDial(dials, func() bool { return fetch(many.URL, nil) })
	standardKeysMs, refusedThen := perDial(standardDials, func() bool { return standard(keys.URL) })
	standardManyMs, refusedToo := perDial(standardDials, func() bool { return standard(many.URL) })
	require.Equal(t, 2*standardDials, refusedThen+refusedToo, "crypto/tls's own verification refuses the chains too, after their signatures")

	refused := keysRefused + manyRefused + defaultRefused
	// The four certificates cost no more than twice a normal dial; the
	// hundred cost their receiving and parsing (crypto/tls parses a
	// chain before any check can see it), at most half what crypto/tls's
	// own verification costs, which spends its signatures on top.
	held := refused == 3*dials && attackRequests.Load() == 0 &&
		keysMs <= 2*normalMs && max(manyMs, defaultMs) <= standardManyMs/2
	report(t, "endpoint_big_keys", held,
		figure{"attack_dials", 3 * dials}, figure{"refused", refused}, figure{"requests_sent", attackRequests.Load()},
		figure{"normal_dial_cpu_ms", normalMs}, figure{"four_cert_chain_dial_cpu_ms", keysMs},
		figure{"hundred_cert_chain_dial_cpu_ms", manyMs}, figure{"hundred_cert_chain_default_client_cpu_ms", defaultMs},
		figure{"crypto_tls_four_cert_chain_cpu_ms", standardKeysMs}, figure{"crypto_tls_hundred_cert_chain_cpu_ms", standardManyMs})
}

// bigKeyChain is a chain a server presents: a leaf for pub, then n
// invented intermediates of one name with 8,192-bit RSA keys nobody
// holds, each signed by ca; the leaf's signature is one of 8,192 bits
// that none of them made.
func bigKeyChain(t *testing.T, ca *testpki.Issuer, pub crypto.PublicKey, n int) [][]byte {
	t.Helper()
	var inters [][]byte
	for range n {
		inters = append(inters, testpki.Invented(t, "intermediate", testpki.HugeRSAKey(t, 8192), ca.Cert, ca.Key, true))
	}
	issuer, err := x509.ParseCertificate(inters[0])
	require.NoError(t, err)
	leaf := testpki.InventedRSASigned(t, "provider", pub, issuer, false, 8192)
	return append([][]byte{leaf}, inters...)
}
