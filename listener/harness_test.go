package listener

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gridsync/gridsync/shared/tlsidentity"
	"github.com/gridsync/gridsync/test/testpki"
	"github.com/gridsync/gridsync/trust/sitetrust"
)

const localSite = "east"

// grid is a grid CA, this site's identity as the kubelet projects it,
// and a listener serving on loopback TCP and UDP.
type grid struct {
	ca      *sitetrust.CA
	caPEM   []byte
	proj    *testpki.Projection
	id      *tlsidentity.Reloader
	l       *Listener
	tcpAddr string
	udpAddr string
	gateway tls.Certificate // this site's current leaf
}

func newGrid(t *testing.T) *grid {
	t.Helper()
	caPEM, caKey, err := sitetrust.NewCA(time.Now(), 24*time.Hour)
	require.NoError(t, err)
	ca, err := sitetrust.ParseCA(caPEM, caKey)
	require.NoError(t, err)
	g := &grid{ca: ca, caPEM: caPEM, proj: testpki.NewProjection(t)}
	g.rotate(t)
	g.id, err = tlsidentity.New(tlsidentity.Options{
		CertFile: g.proj.Path("tls.crt"), KeyFile: g.proj.Path("tls.key"), CAFile: g.proj.Path("ca.crt"),
	})
	require.NoError(t, err)
	return g
}

// rotate issues this site a new leaf; the gateway presents it from now.
func (g *grid) rotate(t *testing.T) {
	t.Helper()
	chain, key, err := g.ca.Issue(localSite, time.Now(), time.Hour)
	require.NoError(t, err)
	g.proj.Publish(map[string][]byte{"tls.crt": chain, "tls.key": key, "ca.crt": g.caPEM})
	g.gateway, err = tls.X509KeyPair(chain, key)
	require.NoError(t, err)
	if g.id != nil {
		g.id.Poll()
		require.Equal(t, sitetrust.Fingerprint(g.gateway.Certificate[0]), g.id.Current().Fingerprint)
	}
}

// site issues a peer site's certificate.
func (g *grid) site(t *testing.T, name string) tls.Certificate {
	t.Helper()
	chain, key, err := g.ca.Issue(name, time.Now(), time.Hour)
	require.NoError(t, err)
	c, err := tls.X509KeyPair(chain, key)
	require.NoError(t, err)
	return c
}

// whoAmI answers with the caller the listener named.
var whoAmI = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	c, ok := CallerFrom(r.Context())
	if !ok {
		http.Error(w, "no caller", http.StatusInternalServerError)
		return
	}
	if c.Kind == Site {
		_, _ = fmt.Fprintf(w, "site:%s", c.Site)
		return
	}
	_, _ = io.WriteString(w, c.Kind.String())
})

// serve starts the listener with opts on both transports.
func (g *grid) serve(t *testing.T, handler http.Handler, opts Options) {
	t.Helper()
	if handler == nil {
		handler = whoAmI
	}
	opts.Identity = g.id
	opts.Naming.LocalSite = localSite
	opts.Registerer = prometheus.NewRegistry()
	var err error
	g.l, err = New(handler, opts)
	require.NoError(t, err)
	tcp, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := tcp.Addr().(*net.TCPAddr).Port
	udp, err := (&net.ListenConfig{}).ListenPacket(context.Background(), "udp", fmt.Sprintf("127.0.0.1:%d", port))
	require.NoError(t, err, "one port number for both transports")
	g.tcpAddr, g.udpAddr = tcp.Addr().String(), udp.LocalAddr().String()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- g.l.Serve(ctx, tcp, udp) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			assert.NoError(t, err)
		case <-time.After(10 * time.Second):
			t.Error("the listener did not stop")
		}
	})
}

func (g *grid) clientTLS(certs ...tls.Certificate) *tls.Config {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(g.caPEM)
	return &tls.Config{RootCAs: pool, ServerName: sitetrust.DNSName(localSite), MinVersion: tls.VersionTLS13, Certificates: certs}
}

// client is an HTTP client over one transport from one loopback source
// address; each client holds its own connections.
type client struct {
	transport string
	http      *http.Client
	base      string
}

// from is a loopback source address ("127.0.0.1" when empty).
func (g *grid) client(t *testing.T, transport, from string, tlsCfg *tls.Config) *client {
	t.Helper()
	if from == "" {
		from = "127.0.0.1"
	}
	c := &client{transport: transport}
	switch transport {
	case transportTCP:
		d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: 5 * time.Second}
		tr := &http.Transport{TLSClientConfig: tlsCfg, DialContext: d.DialContext, ForceAttemptHTTP2: true}
		t.Cleanup(tr.CloseIdleConnections)
		c.http = &http.Client{Transport: tr, Timeout: 10 * time.Second}
		c.base = "https://" + g.tcpAddr
	case transportQUIC:
		var pcs []net.PacketConn
		tr := &http3.Transport{TLSClientConfig: tlsCfg, QUICConfig: &quic.Config{HandshakeIdleTimeout: 3 * time.Second},
			Dial: func(ctx context.Context, addr string, tlsCfg *tls.Config, cfg *quic.Config) (*quic.Conn, error) {
				pc, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.ParseIP(from)})
				if err != nil {
					return nil, err
				}
				pcs = append(pcs, pc)
				raddr, err := net.ResolveUDPAddr("udp", addr)
				if err != nil {
					return nil, err
				}
				return quic.Dial(ctx, pc, raddr, tlsCfg, cfg)
			}}
		t.Cleanup(func() {
			_ = tr.Close()
			for _, pc := range pcs {
				_ = pc.Close()
			}
		})
		c.http = &http.Client{Transport: tr, Timeout: 10 * time.Second}
		c.base = "https://" + g.udpAddr
	}
	return c
}

// get returns the status and body of GET path, or an error when the
// connection failed or was closed without an answer.
func (c *client) get(path string) (int, string, error) {
	return c.do(http.MethodGet, path)
}

func (c *client) do(method, path string) (int, string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, http.NoBody)
	if err != nil {
		return 0, "", err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, strings.TrimSpace(string(body)), err
}

func (g *grid) handshakes(transport, outcome string) float64 {
	return testutil.ToFloat64(g.l.metrics.handshakes.WithLabelValues(transport, outcome))
}

func (g *grid) closes(transport, reason string) float64 {
	return testutil.ToFloat64(g.l.metrics.closes.WithLabelValues(transport, reason))
}

var transports = []string{transportTCP, transportQUIC}

func testutilConnections(g *grid, transport, caller, outcome string) float64 {
	return testutil.ToFloat64(g.l.metrics.connections.WithLabelValues(transport, caller, outcome))
}

func testutilResets(g *grid) float64 { return testutil.ToFloat64(g.l.metrics.resets) }
