package signalcollect

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/gridsync/gridsync/api/v1alpha1"
	"github.com/gridsync/gridsync/controller/internal/base"
	"github.com/gridsync/gridsync/controller/internal/trustmaterial"
	"github.com/gridsync/gridsync/controller/probe"
	"github.com/gridsync/gridsync/listener"
	"github.com/gridsync/gridsync/shared/h3fallback"
	"github.com/gridsync/gridsync/shared/tlsidentity"
	"github.com/gridsync/gridsync/signals"
	"github.com/gridsync/gridsync/test/testpki"
	"github.com/gridsync/gridsync/test/testproc"
	"github.com/gridsync/gridsync/trust/sitetrust"
)

const (
	pollingSite = "site-a"
	polledSite  = "site-b"
)

var loopback = probe.Destinations{AllowCIDRs: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}

// pollTest is a grid CA, this site's trust material as the network names
// it, and a Poller that reads it.
type pollTest struct {
	logs    *testproc.Buffer
	ca      *sitetrust.CA
	caPEM   []byte
	network *v1alpha1.GridNetwork
	env     *base.Env
	poller  *Poller
}

func newPollTest(t *testing.T, destinations probe.Destinations) *pollTest {
	t.Helper()
	now := time.Now()
	caPEM, caKey, err := sitetrust.NewCA(now.Add(-time.Minute), 24*time.Hour)
	require.NoError(t, err)
	ca, err := sitetrust.ParseCA(caPEM, caKey)
	require.NoError(t, err)
	chain, key, err := ca.Issue(pollingSite, now, time.Hour)
	require.NoError(t, err)
	api := fake.NewClientBuilder().WithObjects(
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "grid-ca", Namespace: "gridsync"}, Data: map[string][]byte{"ca.crt": caPEM}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "site-cert", Namespace: "gridsync"}, Data: map[string][]byte{"tls.crt": chain, "tls.key": key}},
	).Build()
	network := &v1alpha1.GridNetwork{ObjectMeta: metav1.ObjectMeta{Name: "net"}, Spec: v1alpha1.GridNetworkSpec{
		TLS: &v1alpha1.GridTLS{
			CASecretRef:   &v1alpha1.NamespacedName{Name: "grid-ca", Namespace: "gridsync"},
			SiteSecretRef: &v1alpha1.NamespacedName{Name: "site-cert", Namespace: "gridsync"},
		},
		SignalTransport: &v1alpha1.SignalTransport{Mode: v1alpha1.SignalTransportPoll},
	}}
	logs := &testproc.Buffer{}
	env := &base.Env{Client: api, API: api, Opts: base.Config{
		Registerer: prometheus.NewRegistry(), Logger: slog.New(slog.NewJSONHandler(logs, nil)), Now: time.Now,
		ProbeDestinations: destinations, Signals: signals.NewStore(nil), SignalsInterval: 5 * time.Second,
	}}
	return &pollTest{logs: logs, ca: ca, caPEM: caPEM, network: network, env: env, poller: NewPoller(env, trustmaterial.New(api))}
}

// logged is how many log lines hold every one of parts.
func (pt *pollTest) logged(parts ...string) int {
	n := 0
	for line := range strings.Lines(pt.logs.String()) {
		if !slices.ContainsFunc(parts, func(p string) bool { return !strings.Contains(line, p) }) {
			n++
		}
	}
	return n
}

// peer is a polled site, as the polling site knows it: its GridSite,
// which pins the leaf its listener presents.
type peer struct {
	gs *v1alpha1.GridSite
}

// serve runs the package listener as a polled site's agent runs it,
// serving that site's signals to the polling site only; tcp and udp may
// each be nil (that transport not served).
func (pt *pollTest) serve(t *testing.T, tcp net.Listener, udp net.PacketConn) *peer {
	t.Helper()
	return pt.serveAs(t, polledSite, tcp, udp)
}

func (pt *pollTest) serveAs(t *testing.T, site string, tcp net.Listener, udp net.PacketConn) *peer {
	t.Helper()
	chain, key, err := pt.ca.Issue(site, time.Now(), time.Hour)
	require.NoError(t, err)
	proj := testpki.NewProjection(t)
	proj.Publish(map[string][]byte{"tls.crt": chain, "tls.key": key, "ca.crt": pt.caPEM})
	id, err := tlsidentity.New(tlsidentity.Options{CertFile: proj.Path("tls.crt"), KeyFile: proj.Path("tls.key"), CAFile: proj.Path("ca.crt")})
	require.NoError(t, err)
	leaf, err := tls.X509KeyPair(chain, key)
	require.NoError(t, err)

	store := signals.NewStore(nil)
	store.Set(site, "llm", signals.PartHealth, []signals.Sample{{Metric: signals.MetricReady, Value: 1, At: time.Now()}}, time.Now().Add(time.Hour))
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if c, ok := listener.CallerFrom(r.Context()); !ok || c.Kind != listener.Site || c.Site != pollingSite {
			http.Error(w, "not the polling site", http.StatusForbidden)
			return
		}
		w.Header().Set("Date", time.Now().UTC().Format(http.TimeFormat))
		_, _, _ = signals.Render(w, store.Rows(func(string, string) bool { return true }), nil, time.Now())
	})
	l, err := listener.New(handler, listener.Options{Identity: id, Naming: listener.Naming{LocalSite: site}, Registerer: prometheus.NewRegistry()})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- l.Serve(ctx, tcp, udp) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			assert.NoError(t, err)
		case <-time.After(10 * time.Second):
			t.Error("the listener did not stop")
		}
	})
	return &peer{gs: &v1alpha1.GridSite{
		ObjectMeta: metav1.ObjectMeta{Name: "net-" + site},
		Spec: v1alpha1.GridSiteSpec{GridNetworkRef: "net",
			Trust: &v1alpha1.SiteTrust{CanonicalFingerprints: []string{sitetrust.Fingerprint(leaf.Certificate[0])}}},
	}}
}

// poll is one poll of the peer at port, from a round's socket; it
// returns how long it took.
func (pt *pollTest) poll(t *testing.T, udp *quicSocket, p *peer, port int) time.Duration {
	t.Helper()
	pt.env.Opts.SignalsPeerPort = port
	start := time.Now()
	pt.poller.poll(t.Context(), udp, pt.network, p.gs, "127.0.0.1")
	return time.Since(start)
}

func (pt *pollTest) polled(outcome string) float64 {
	return testutil.ToFloat64(pt.poller.polls.WithLabelValues(outcome))
}

func (pt *pollTest) attempts(transport, outcome string) float64 {
	return testutil.ToFloat64(pt.poller.transports.WithLabelValues(transport, outcome))
}

// held says whether the peer's signals reached this site's store.
func (pt *pollTest) held() bool {
	return len(pt.env.Opts.Signals.Rows(func(site, _ string) bool { return site == polledSite })) > 0
}

func listenTCP(t *testing.T) net.Listener {
	t.Helper()
	ln, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = ln.Close() })
	return ln
}

func listenUDP(t *testing.T, port int) net.PacketConn {
	t.Helper()
	pc, err := (&net.ListenConfig{}).ListenPacket(context.Background(), "udp", fmt.Sprintf("127.0.0.1:%d", port))
	require.NoError(t, err)
	t.Cleanup(func() { _ = pc.Close() })
	return pc
}

func portOf(a net.Addr) int {
	ap, _ := netip.ParseAddrPort(a.String())
	return int(ap.Port())
}

// udpSink reads and discards what reaches a UDP socket, as a path that
// drops UDP would, counting the datagrams.
func udpSink(t *testing.T, pc net.PacketConn) *atomic.Int32 {
	t.Helper()
	var n atomic.Int32
	go func() {
		buf := make([]byte, 2048)
		for {
			if _, _, err := pc.ReadFrom(buf); err != nil {
				return
			}
			n.Add(1)
		}
	}()
	return &n
}

// serveDroppingUDP serves the peer over HTTPS alone, its port's UDP read
// and discarded (a path that drops UDP); it returns the port and the
// count of datagrams dropped.
func (pt *pollTest) serveDroppingUDP(t *testing.T) (*peer, int, *atomic.Int32) {
	t.Helper()
	tcp := listenTCP(t)
	port := portOf(tcp.Addr())
	dropped := udpSink(t, listenUDP(t, port))
	return pt.serve(t, tcp, nil), port, dropped
}

// newRound is a round's UDP socket, closed when the test ends.
func newRound(t *testing.T) *quicSocket {
	t.Helper()
	round := &quicSocket{}
	t.Cleanup(round.close)
	return round
}

// A peer serving its signals over HTTP/3 alone is polled over HTTP/3:
// the poll no longer needs TCP.
func TestAPeerServingOnlyHTTP3IsPolled(t *testing.T) {
	pt := newPollTest(t, loopback)
	udp := listenUDP(t, 0)
	p := pt.serve(t, nil, udp)
	round := newRound(t)

	pt.poll(t, round, p, portOf(udp.LocalAddr()))
	require.Equal(t, 1.0, pt.polled("ok"), "the poll succeeded")
	assert.True(t, pt.held(), "the peer's signals are held")
	assert.Equal(t, 1.0, pt.attempts(h3fallback.H3, attemptAnswered))
	assert.Zero(t, pt.attempts(h3fallback.HTTPS, attemptAnswered)+pt.attempts(h3fallback.HTTPS, attemptFailed),
		"HTTPS was not tried: the handshake came within QUIC's head start")
}

// A peer serving HTTPS alone (no UDP socket on its port) is polled over
// HTTPS within the poll's bound.
func TestAPeerServingOnlyHTTPSIsPolled(t *testing.T) {
	pt := newPollTest(t, loopback)
	tcp := listenTCP(t)
	p := pt.serve(t, tcp, nil)
	round := newRound(t)

	took := pt.poll(t, round, p, portOf(tcp.Addr()))
	require.Equal(t, 1.0, pt.polled("ok"), "the poll succeeded")
	assert.True(t, pt.held())
	assert.Less(t, took, pollTimeout)
	assert.Equal(t, 1.0, pt.attempts(h3fallback.HTTPS, attemptAnswered))
	assert.Zero(t, pt.attempts(h3fallback.H3, attemptAnswered))
}

// A peer whose UDP is dropped on the way is polled over HTTPS in the same
// poll, after QUIC's head start and within the poll's bound; the next
// polls go straight to HTTPS, sending no QUIC, until the fallback runs
// out; then QUIC is tried again.
func TestAPeerWhoseUDPIsDroppedIsPolledOverHTTPSAndThenOverHTTPSAlone(t *testing.T) {
	pt := newPollTest(t, loopback)
	p, port, dropped := pt.serveDroppingUDP(t)
	round := newRound(t)
	const backoff = 3 * time.Second
	pt.poller.fallback.For = backoff // quicBackoff's minutes, shortened

	took := pt.poll(t, round, p, port)
	require.Equal(t, 1.0, pt.polled("ok"), "the first poll succeeded")
	assert.True(t, pt.held())
	assert.GreaterOrEqual(t, took, quicHeadStart, "QUIC had its head start")
	assert.Less(t, took, pollTimeout, "within the poll's bound")
	assert.Positive(t, dropped.Load(), "QUIC was tried first")
	assert.Equal(t, 1.0, pt.attempts(h3fallback.HTTPS, attemptAnswered))
	assert.Equal(t, 1.0, pt.attempts(h3fallback.H3, attemptAbandoned), "QUIC was still waiting for its handshake")
	assert.Equal(t, 1, pt.logged(`"msg":"signals_poll_transport"`, `"transport":"https"`), "the change of transport is logged")

	sent := dropped.Load()
	fallbackStarted := time.Now()
	for i := range 2 {
		took = pt.poll(t, round, p, port)
		require.Equal(t, float64(2+i), pt.polled("ok"))
		assert.Less(t, took, quicHeadStart/2, "no second QUIC wait")
	}
	assert.Equal(t, 3.0, pt.attempts(h3fallback.HTTPS, attemptAnswered))
	assert.Equal(t, 1.0, pt.attempts(h3fallback.H3, attemptAbandoned), "QUIC was not tried")
	time.Sleep(50 * time.Millisecond) // a late datagram of the first poll
	assert.Equal(t, sent, dropped.Load(), "no QUIC was sent during the fallback")

	time.Sleep(time.Until(fallbackStarted.Add(backoff)))
	took = pt.poll(t, round, p, port)
	require.Equal(t, 4.0, pt.polled("ok"))
	assert.Greater(t, dropped.Load(), sent, "QUIC is tried again once the fallback ran out")
	assert.GreaterOrEqual(t, took, quicHeadStart)
	assert.Equal(t, 2.0, pt.attempts(h3fallback.H3, attemptAbandoned))
	assert.Equal(t, 1, pt.logged(`"msg":"signals_poll_transport"`), "no new log line: the peer stays on HTTPS")
}

// A peer whose UDP comes through again is polled over HTTP/3 once its
// fallback has run out, and the change is logged.
func TestAPeerWhoseUDPComesBackIsPolledOverHTTP3AfterTheFallback(t *testing.T) {
	pt := newPollTest(t, loopback)
	tcp := listenTCP(t)
	port := portOf(tcp.Addr())
	sink := listenUDP(t, port)
	udpSink(t, sink)
	p := pt.serve(t, tcp, nil)
	round := newRound(t)
	pt.poller.fallback.For = time.Second

	pt.poll(t, round, p, port)
	require.Equal(t, 1.0, pt.attempts(h3fallback.HTTPS, attemptAnswered), "UDP dropped: over HTTPS")
	fallbackStarted := time.Now()

	// The path carries UDP again: the site's listener serves QUIC on
	// the port.
	require.NoError(t, sink.Close())
	again := pt.serve(t, nil, listenUDP(t, port))
	time.Sleep(time.Until(fallbackStarted.Add(time.Second)))
	pt.poll(t, round, again, port)
	require.Equal(t, 2.0, pt.polled("ok"))
	assert.Equal(t, 1.0, pt.attempts(h3fallback.H3, attemptAnswered), "over HTTP/3 again")
	assert.Equal(t, 1, pt.logged(`"msg":"signals_poll_transport"`, `"transport":"h3"`), "the change back is logged")
}

// A peer that was down (nothing on its port, neither transport answering)
// starts no fallback: back, it is polled over HTTP/3 at once, not over
// HTTPS alone for the fallback's minutes.
func TestAPeerThatWasDownIsPolledOverHTTP3WhenItIsBack(t *testing.T) {
	pt := newPollTest(t, loopback)
	// The peer's GridSite (its listener serving elsewhere); at the port
	// polled, TCP refused and UDP unanswered.
	p := pt.serve(t, listenTCP(t), nil)
	tcp := listenTCP(t)
	port := portOf(tcp.Addr())
	require.NoError(t, tcp.Close())
	down := udpSink(t, listenUDP(t, port))
	round := newRound(t)

	pt.poll(t, round, p, port)
	require.Equal(t, 0.0, pt.polled("ok"), "the peer was down")
	require.Positive(t, down.Load(), "QUIC was tried")
	assert.Equal(t, h3fallback.H3, pt.poller.fallback.First(polledSite, time.Now()), "no fallback for a peer that answered nothing")
	assert.Zero(t, pt.logged(`"msg":"signals_poll_transport"`), "no change of transport")
}

// The polls of one round share its UDP socket: a peer whose port has no
// UDP socket (its host answers with ICMP) does not end the QUIC of the
// others, and the socket is closed with the round.
func TestTheRoundsPollsShareOneUDPSocket(t *testing.T) {
	pt := newPollTest(t, loopback)
	// One port number, as the agent polls every peer at one: the peer
	// serving HTTP/3 alone at 127.0.0.1, the one serving HTTPS alone at
	// 127.0.0.2.
	udp := listenUDP(t, 0)
	port := portOf(udp.LocalAddr())
	tcp, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", fmt.Sprintf("127.0.0.2:%d", port))
	require.NoError(t, err)
	t.Cleanup(func() { _ = tcp.Close() })
	h3Only, httpsOnly := pt.serveAs(t, "site-h3", nil, udp), pt.serveAs(t, "site-https", tcp, nil)
	pt.env.Opts.SignalsPeerPort = port
	round := &quicSocket{}

	var wg sync.WaitGroup
	for range 3 {
		wg.Go(func() { pt.poller.poll(t.Context(), round, pt.network, h3Only.gs, "127.0.0.1") })
		wg.Go(func() { pt.poller.poll(t.Context(), round, pt.network, httpsOnly.gs, "127.0.0.2") })
	}
	wg.Wait()
	assert.Equal(t, 6.0, pt.polled("ok"))
	for _, site := range []string{"site-h3", "site-https"} {
		assert.NotEmpty(t, pt.env.Opts.Signals.Rows(func(s, _ string) bool { return s == site }), site)
	}
	assert.Equal(t, 3.0, pt.attempts(h3fallback.H3, attemptAnswered))
	assert.Equal(t, 3.0, pt.attempts(h3fallback.HTTPS, attemptAnswered))

	round.mu.Lock()
	tr := round.tr
	round.mu.Unlock()
	require.NotNil(t, tr, "the socket was opened")
	round.close()
	_, err = tr.Conn.WriteTo([]byte{0}, udp.LocalAddr())
	assert.Error(t, err, "the socket is closed with the round")
}

// The QUIC path keeps the destination rule: a peer at an address the rule
// denies gets no datagram, and the poll says destination_denied.
func TestTheQUICPathKeepsTheDestinationRule(t *testing.T) {
	pt := newPollTest(t, probe.Destinations{})
	p, port, sent := pt.serveDroppingUDP(t)
	round := newRound(t)

	took := pt.poll(t, round, p, port)
	assert.Equal(t, 1.0, pt.polled(probe.OutcomeDestinationDenied))
	assert.Less(t, took, quicHeadStart, "refused at once, over both transports")
	assert.Equal(t, 1.0, pt.attempts(h3fallback.H3, attemptFailed))
	assert.Equal(t, 1.0, pt.attempts(h3fallback.HTTPS, attemptFailed))
	time.Sleep(50 * time.Millisecond)
	assert.Zero(t, sent.Load(), "no datagram reached the denied address")
}
