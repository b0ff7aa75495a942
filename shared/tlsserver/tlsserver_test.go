package tlsserver_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quic-go/quic-go/http3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gridsync/gridsync/shared/tlsidentity"
	"github.com/gridsync/gridsync/shared/tlsserver"
	"github.com/gridsync/gridsync/test/testpki"
)

type world struct {
	root *testpki.Issuer
	proj *testpki.Projection
	id   *tlsidentity.Reloader
}

func newWorld(t *testing.T) *world {
	w := &world{root: testpki.NewRoot(t, "root"), proj: testpki.NewProjection(t)}
	w.rotate(t, "server-1")
	var err error
	w.id, err = tlsidentity.New(tlsidentity.Options{
		CertFile: w.proj.Path("tls.crt"), KeyFile: w.proj.Path("tls.key"), CAFile: w.proj.Path("ca.crt"), RequireServerAuth: true,
	})
	require.NoError(t, err)
	return w
}

// rotate projects a new server leaf; the reloader activates it on Poll.
func (w *world) rotate(t *testing.T, name string) {
	cert, key := w.root.Leaf(t, name, testpki.Opts{})
	w.proj.Publish(map[string][]byte{"tls.crt": cert, "tls.key": key, "ca.crt": w.root.PEM})
	if w.id != nil {
		w.id.Poll()
		require.Equal(t, name, w.id.Current().Certificate.Leaf.Subject.CommonName)
	}
}

func (w *world) clientTLS(t *testing.T, clientCert ...tls.Certificate) *tls.Config {
	pool := x509.NewCertPool()
	pool.AddCert(w.root.Cert)
	return &tls.Config{RootCAs: pool, ServerName: "localhost", MinVersion: tls.VersionTLS13, Certificates: clientCert,
		ClientSessionCache: tls.NewLRUClientSessionCache(8)}
}

var hello = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "hello") })

func serveHTTPS(t *testing.T, opts tlsserver.Options) string {
	ln, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- tlsserver.ServeHTTPS(ctx, ln, hello, opts) }()
	t.Cleanup(func() {
		cancel()
		assert.NoError(t, <-done, "clean shutdown")
	})
	return "https://" + ln.Addr().String()
}

func serveHTTP3(t *testing.T, opts tlsserver.Options) string {
	conn, err := (&net.ListenConfig{}).ListenPacket(context.Background(), "udp", "127.0.0.1:0")
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- tlsserver.ServeHTTP3(ctx, conn, hello, opts) }()
	t.Cleanup(func() {
		cancel()
		assert.NoError(t, <-done, "clean shutdown")
		_ = conn.Close()
	})
	return "https://" + conn.LocalAddr().String()
}

// get returns the server certificate's name and whether the session was
// resumed.
func get(t *testing.T, client *http.Client, url string) (string, bool) {
	t.Helper()
	req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, url, http.NoBody)
	require.NoError(t, err)
	resp, err := client.Do(req)
	require.NoError(t, err)
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, "hello", string(body))
	require.Contains(t, []string{"h2", "h3"}, resp.TLS.NegotiatedProtocol)
	return resp.TLS.PeerCertificates[0].Subject.CommonName, resp.TLS.DidResume
}

func TestHTTPSSwapsTheIdentityForNewHandshakesOnly(t *testing.T) {
	w := newWorld(t)
	url := serveHTTPS(t, tlsserver.Options{Identity: w.id})
	kept := &http.Client{Transport: &http.Transport{TLSClientConfig: w.clientTLS(t), ForceAttemptHTTP2: true}}
	name, _ := get(t, kept, url)
	assert.Equal(t, "server-1", name)

	w.rotate(t, "server-2")
	name, _ = get(t, kept, url)
	assert.Equal(t, "server-1", name, "the established connection keeps its identity")
	fresh := &http.Client{Transport: &http.Transport{TLSClientConfig: w.clientTLS(t), ForceAttemptHTTP2: true}}
	name, _ = get(t, fresh, url)
	assert.Equal(t, "server-2", name, "a new handshake gets the new identity")
}

func TestHTTP3SwapsTheIdentityForNewHandshakesOnly(t *testing.T) {
	w := newWorld(t)
	url := serveHTTP3(t, tlsserver.Options{Identity: w.id})
	kept := &http.Client{Transport: &http3.Transport{TLSClientConfig: w.clientTLS(t)}}
	name, _ := get(t, kept, url)
	assert.Equal(t, "server-1", name)

	w.rotate(t, "server-2")
	name, _ = get(t, kept, url)
	assert.Equal(t, "server-1", name, "the established QUIC connection keeps its identity")
	fresh := &http.Client{Transport: &http3.Transport{TLSClientConfig: w.clientTLS(t)}}
	name, _ = get(t, fresh, url)
	assert.Equal(t, "server-2", name, "a new QUIC handshake gets the new identity")
}

// A resumed TLS 1.3 session carries no certificate: after a rotation the
// old ticket must not resume, or the client would keep trusting the old
// identity without seeing the new one.
func TestARotationEndsSessionResumption(t *testing.T) {
	w := newWorld(t)
	url := serveHTTPS(t, tlsserver.Options{Identity: w.id})
	cfg := w.clientTLS(t) // one session cache across connections
	newClient := func() *http.Client {
		return &http.Client{Transport: &http.Transport{TLSClientConfig: cfg, DisableKeepAlives: true, ForceAttemptHTTP2: true}}
	}
	_, resumed := get(t, newClient(), url)
	assert.False(t, resumed)
	require.Eventually(t, func() bool { _, r := get(t, newClient(), url); return r }, 5*time.Second, 10*time.Millisecond,
		"with one identity, sessions resume")

	w.rotate(t, "server-2")
	name, resumed := get(t, newClient(), url)
	assert.False(t, resumed, "a ticket from the old identity must not resume")
	assert.Equal(t, "server-2", name)
}

func TestMutualTLSAuthorisesEveryConnectionResumptionsIncluded(t *testing.T) {
	w := newWorld(t)
	var deny atomic.Bool
	url := serveHTTPS(t, tlsserver.Options{Identity: w.id, MutualTLS: true, Authorize: func(cs tls.ConnectionState) error {
		if len(cs.PeerCertificates) == 0 {
			return errors.New("no client certificate")
		}
		if deny.Load() {
			return errors.New("revoked: " + cs.PeerCertificates[0].Subject.CommonName)
		}
		return nil
	}})
	certPEM, keyPEM := w.root.Leaf(t, "client", testpki.Opts{ClientOnly: true})
	clientCert, err := tls.X509KeyPair(certPEM, keyPEM)
	require.NoError(t, err)

	anonymous := &http.Client{Transport: &http.Transport{TLSClientConfig: w.clientTLS(t), ForceAttemptHTTP2: true}}
	req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, url, http.NoBody)
	require.NoError(t, err)
	if resp, err := anonymous.Do(req); err == nil {
		_ = resp.Body.Close()
		t.Fatal("a client without a certificate must be refused")
	}

	cfg := w.clientTLS(t, clientCert)
	newClient := func() *http.Client {
		return &http.Client{Transport: &http.Transport{TLSClientConfig: cfg, DisableKeepAlives: true, ForceAttemptHTTP2: true}}
	}
	get(t, newClient(), url)
	require.Eventually(t, func() bool { _, r := get(t, newClient(), url); return r }, 5*time.Second, 10*time.Millisecond)

	deny.Store(true)
	req, err = http.NewRequestWithContext(context.Background(), http.MethodGet, url, http.NoBody)
	require.NoError(t, err)
	resp, err := newClient().Do(req)
	if err == nil {
		_ = resp.Body.Close()
	}
	assert.Error(t, err, "a revoked client must not resume its way back in")
}
