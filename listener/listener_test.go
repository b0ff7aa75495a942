package listener

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sync"
	"syscall"
	"testing"
	"time"

	"crypto/tls"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gridsync/gridsync/trust/sitetrust"
)

// Real clients with real certificates, over both transports: the
// co-located gateway and a peer site are named, everyone else is closed.
func TestCallersAreNamedFromTheirCertificates(t *testing.T) {
	g := newGrid(t)
	g.serve(t, nil, Options{})
	otherPEM, otherKey, err := sitetrust.NewCA(time.Now(), time.Hour)
	require.NoError(t, err)
	other, err := sitetrust.ParseCA(otherPEM, otherKey)
	require.NoError(t, err)
	foreignChain, foreignKey, err := other.Issue("west", time.Now(), time.Hour)
	require.NoError(t, err)
	foreign, err := tls.X509KeyPair(foreignChain, foreignKey)
	require.NoError(t, err)
	expiredChain, expiredKey, err := g.ca.Issue("west", time.Now().Add(-48*time.Hour), time.Hour)
	require.NoError(t, err)
	expired, err := tls.X509KeyPair(expiredChain, expiredKey)
	require.NoError(t, err)

	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			_, body, err := g.client(t, tr, "", g.clientTLS(g.gateway)).get("/v1/site/signals")
			require.NoError(t, err)
			assert.Equal(t, "gateway", body, "this site's current leaf is the co-located gateway")

			_, body, err = g.client(t, tr, "", g.clientTLS(g.site(t, "west"))).get("/v1/site/signals")
			require.NoError(t, err)
			assert.Equal(t, "site:west", body, "a peer is named by its organization")

			for name, cfg := range map[string]*tls.Config{
				"without a certificate":        g.clientTLS(),
				"a reissued leaf of this site": g.clientTLS(g.site(t, localSite)),
				"another CA":                   g.clientTLS(foreign),
				"an expired leaf":              g.clientTLS(expired),
			} {
				_, _, err := g.client(t, tr, "", cfg).get("/v1/site/signals")
				assert.Error(t, err, "%s gets no answer", name)
			}
		})
	}
	assert.Positive(t, testutilConnections(g, transportTCP, "anonymous", refusedUnnamed))
	assert.Positive(t, testutilConnections(g, transportQUIC, "site", refusedReissued))
}

// In SPIFFE mode the SPIFFE ID names the site, not the organization.
func TestSPIFFEModeNamesPeersByTheirSPIFFEID(t *testing.T) {
	g := newGrid(t)
	g.serve(t, nil, Options{Naming: Naming{SPIFFE: true}})
	_, body, err := g.client(t, transportQUIC, "", g.clientTLS(g.site(t, "west"))).get("/v1/site/signals")
	require.NoError(t, err)
	assert.Equal(t, "site:west", body)
}

// Sidecars report without a client certificate: with their path open,
// an anonymous caller reaches that path and nothing else.
func TestAnonymousCallersReachOnlyTheirPaths(t *testing.T) {
	g := newGrid(t)
	g.serve(t, nil, Options{AnonymousPaths: []string{"/v1/site/deliveries"}})
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			c := g.client(t, tr, "", g.clientTLS())
			status, body, err := c.do(http.MethodPost, "/v1/site/deliveries")
			require.NoError(t, err)
			assert.Equal(t, http.StatusOK, status)
			assert.Equal(t, "anonymous", body)
			_, _, err = g.client(t, tr, "", g.clientTLS()).get("/v1/site/signals")
			assert.Error(t, err, "a named-only route closes the connection without an answer")
			assert.Positive(t, g.closes(tr, "anonymous_route"))
		})
	}
}

// A flood of handshakes from one source address is cut off before any
// cryptographic work, while the co-located gateway, from another address,
// keeps getting answers on fresh connections.
func TestAHandshakeFloodFromOneAddressIsCutOffWhileTheGatewayIsAnswered(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			g := newGrid(t)
			perAddress := Bucket{Rate: 5, Burst: 10}
			g.serve(t, nil, Options{Handshakes: &HandshakeLimits{PerAddress: perAddress}})
			flooded := g.flood(t, tr, []string{"127.0.0.2"}, 60)
			assert.Positive(t, flooded.refused, "the flood is refused once the bucket is empty")
			// The bucket refills while the flood lasts (longer on a busy
			// machine): the burst plus what refilled meanwhile, no more.
			refilled := int(perAddress.Rate * flooded.elapsed.Seconds())
			assert.LessOrEqual(t, flooded.answered, perAddress.Burst+refilled+1,
				"the burst and the refills during %s pass", flooded.elapsed)
			assert.Positive(t, g.handshakes(tr, limitedAddress))
			assert.Zero(t, flooded.gatewayFailures, "the gateway kept getting answers: %v", flooded.gatewayErr)
		})
	}
}

// Many addresses of one block, each under its own budget, are held to
// the block's: here IPv4 /24s stand in for IPv6 /64s (loopback has no
// global IPv6), the grouping itself is unit-tested in limiter_test.go.
func TestAFloodFromManyAddressesOfOneBlockIsCutOff(t *testing.T) {
	g := newGrid(t)
	g.serve(t, nil, Options{Handshakes: &HandshakeLimits{
		PerAddress: Bucket{Rate: 5, Burst: 10}, PerPrefix64: Bucket{Rate: 5, Burst: 20}, IPv4PrefixBits: 24,
	}})
	var block []string
	for i := 10; i < 40; i++ {
		block = append(block, fmt.Sprintf("127.0.7.%d", i))
	}
	flooded := g.flood(t, transportTCP, block, 60)
	assert.Greater(t, flooded.refused, 30, "the block's budget holds although each address has budget left")
	assert.Positive(t, g.handshakes(transportTCP, limitedPrefix64))
	assert.Zero(t, g.handshakes(transportTCP, limitedAddress), "no single address ran out")
	assert.Zero(t, flooded.gatewayFailures, "the gateway, in another block, kept getting answers: %v", flooded.gatewayErr)
}

type floodResult struct {
	answered, refused int
	gatewayFailures   int
	gatewayErr        error
	elapsed           time.Duration // from the first attempt to the last answer
}

// flood opens n fresh connections from the given addresses (round robin)
// as fast as they go, while the gateway asks on fresh connections from
// 127.0.0.1.
func (g *grid) flood(t *testing.T, tr string, from []string, n int) floodResult {
	t.Helper()
	var res floodResult
	var mu sync.Mutex
	stop := make(chan struct{})
	gatewayDone := make(chan struct{})
	// The gateway holds its connection, as a gateway polling its agent
	// does; a dropped one would cost it a handshake.
	gateway := g.client(t, tr, "", g.clientTLS(g.gateway))
	gatewayAnswers := 0
	go func() {
		defer close(gatewayDone)
		for {
			select {
			case <-stop:
				return
			default:
			}
			_, body, err := gateway.get("/v1/site/signals")
			mu.Lock()
			if err != nil || body != "gateway" {
				res.gatewayFailures++
				res.gatewayErr = err
			} else {
				gatewayAnswers++
			}
			mu.Unlock()
			time.Sleep(5 * time.Millisecond)
		}
	}()
	west := g.site(t, "west")
	var wg sync.WaitGroup
	start := time.Now()
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _, err := g.client(t, tr, from[i%len(from)], g.clientTLS(west)).get("/v1/site/signals")
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				res.refused++
			} else {
				res.answered++
			}
		}()
	}
	wg.Wait()
	res.elapsed = time.Since(start)
	close(stop)
	<-gatewayDone
	require.Positive(t, gatewayAnswers, "the gateway asked during the flood")
	return res
}

// A site past its cap gets 503 while another site does not.
func TestASitePastItsCapGets503WhileAnotherSiteDoesNot(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			g := newGrid(t)
			g.serve(t, nil, Options{Connections: &ConnectionCaps{Max: 64, ReservedForGateway: 8, PerSite: 2}})
			west := g.site(t, "west")
			for range 2 {
				status, _, err := g.client(t, tr, "", g.clientTLS(west)).get("/v1/site/signals")
				require.NoError(t, err)
				require.Equal(t, http.StatusOK, status)
			}
			status, _, err := g.client(t, tr, "", g.clientTLS(west)).get("/v1/site/signals")
			require.NoError(t, err)
			assert.Equal(t, http.StatusServiceUnavailable, status, "west's third connection")
			status, body, err := g.client(t, tr, "", g.clientTLS(g.site(t, "north"))).get("/v1/site/signals")
			require.NoError(t, err)
			assert.Equal(t, http.StatusOK, status)
			assert.Equal(t, "site:north", body)
		})
	}
}

// Peers together never take the last slots: they stay for the gateway.
func TestPeersCannotTakeTheGatewaysReservedSlots(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			g := newGrid(t)
			g.serve(t, nil, Options{Connections: &ConnectionCaps{Max: 5, ReservedForGateway: 3, PerSite: 10}})
			for _, site := range []string{"west", "north"} {
				status, _, err := g.client(t, tr, "", g.clientTLS(g.site(t, site))).get("/v1/site/signals")
				require.NoError(t, err)
				require.Equal(t, http.StatusOK, status, site)
			}
			status, _, err := g.client(t, tr, "", g.clientTLS(g.site(t, "south"))).get("/v1/site/signals")
			require.NoError(t, err)
			assert.Equal(t, http.StatusServiceUnavailable, status, "a third peer would take a reserved slot")
			for i := range 3 {
				status, body, err := g.client(t, tr, "", g.clientTLS(g.gateway)).get("/v1/site/signals")
				require.NoError(t, err)
				assert.Equal(t, http.StatusOK, status, "gateway connection %d", i)
				assert.Equal(t, "gateway", body)
			}
		})
	}
}

// A caller that stops reading is closed by the write deadline.
func TestAStalledReaderIsClosedByTheWriteDeadline(t *testing.T) {
	huge := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		chunk := make([]byte, 64<<10)
		for range 1024 { // 64 MiB: far past any socket buffer or flow-control window
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
	})
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			g := newGrid(t)
			g.serve(t, huge, Options{WriteTimeout: 300 * time.Millisecond})
			c := g.client(t, tr, "", g.clientTLS(g.site(t, "west")))
			req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, c.base+"/v1/site/signals", http.NoBody)
			require.NoError(t, err)
			resp, err := c.http.Do(req)
			require.NoError(t, err)
			defer func() { _ = resp.Body.Close() }()
			// Read nothing more.
			require.Eventually(t, func() bool { return g.closes(tr, "write_stalled") > 0 },
				10*time.Second, 20*time.Millisecond, "the stalled connection is closed")
			_, err = bufio.NewReader(resp.Body).Discard(128 << 20)
			assert.Error(t, err, "the body was cut off")
		})
	}
}

// A connection is closed at its maximum age; the client reconnects.
func TestAConnectionIsClosedAtItsMaximumAge(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			g := newGrid(t)
			g.serve(t, nil, Options{MaxAge: 300 * time.Millisecond})
			c := g.client(t, tr, "", g.clientTLS(g.site(t, "west")))
			_, _, err := c.get("/v1/site/signals")
			require.NoError(t, err)
			require.Eventually(t, func() bool { return g.closes(tr, "max_age") > 0 }, 5*time.Second, 20*time.Millisecond)
			require.Eventually(t, func() bool {
				_, body, err := c.get("/v1/site/signals")
				return err == nil && body == "site:west"
			}, 5*time.Second, 50*time.Millisecond, "the client reconnects")
			assert.GreaterOrEqual(t, g.handshakes(tr, "completed"), 2.0, "on a new connection")
		})
	}
}

// The caps start over when the TLS material reloads: a site at its cap
// and an address out of handshakes are both let in after a rotation.
func TestCapsStartOverAfterAnIdentityRotation(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			g := newGrid(t)
			g.serve(t, nil, Options{
				Connections: &ConnectionCaps{Max: 64, ReservedForGateway: 8, PerSite: 1},
				Handshakes:  &HandshakeLimits{PerAddress: Bucket{Rate: 0.01, Burst: 3}},
			})
			west := g.site(t, "west")
			status, _, err := g.client(t, tr, "127.0.0.3", g.clientTLS(west)).get("/v1/site/signals")
			require.NoError(t, err)
			require.Equal(t, http.StatusOK, status)
			status, _, err = g.client(t, tr, "127.0.0.3", g.clientTLS(west)).get("/v1/site/signals")
			require.NoError(t, err)
			require.Equal(t, http.StatusServiceUnavailable, status, "at its cap")
			_, _, err = g.client(t, tr, "127.0.0.3", g.clientTLS(west)).get("/v1/site/signals")
			require.NoError(t, err) // the third handshake of the burst
			_, _, err = g.client(t, tr, "127.0.0.3", g.clientTLS(west)).get("/v1/site/signals")
			require.Error(t, err, "out of handshakes")

			g.rotate(t)
			// The reload is noticed at the next handshake, from an address
			// with budget left; from then on both caps have started over.
			_, body, err := g.client(t, tr, "", g.clientTLS(g.gateway)).get("/v1/site/signals")
			require.NoError(t, err)
			require.Equal(t, "gateway", body, "the new leaf is the gateway")
			status, body, err = g.client(t, tr, "127.0.0.3", g.clientTLS(west)).get("/v1/site/signals")
			require.NoError(t, err, "the address has handshakes again")
			assert.Equal(t, http.StatusOK, status, "and west has a place again")
			assert.Equal(t, "site:west", body)
			assert.Equal(t, 1.0, testutilResets(g))
		})
	}
}

// The write deadline runs from each write, not from the request's start:
// a request that lasts longer than it (a report stream) still gets its
// answer.
func TestALongRequestStillGetsItsAnswer(t *testing.T) {
	slow := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		time.Sleep(600 * time.Millisecond) // reading a long body, say
		w.WriteHeader(http.StatusAccepted)
	})
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			g := newGrid(t)
			g.serve(t, slow, Options{WriteTimeout: 200 * time.Millisecond})
			status, _, err := g.client(t, tr, "", g.clientTLS(g.site(t, "west"))).get("/v1/site/signals")
			require.NoError(t, err)
			assert.Equal(t, http.StatusAccepted, status)
			assert.Zero(t, g.closes(tr, "write_stalled"))
		})
	}
}

// holdingHandler reads a request's whole body, as the report stream does,
// then answers 202.
var holdingHandler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	w.WriteHeader(http.StatusAccepted)
})

// holdStream opens a TLS connection without a client certificate from
// src and sends a report request whose body never comes.
func (g *grid) holdStream(src string) (net.Conn, error) {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 5 * time.Second}
	tlsCfg := g.clientTLS()
	tlsCfg.NextProtos = []string{"http/1.1"}
	c, err := (&tls.Dialer{NetDialer: d, Config: tlsCfg}).DialContext(context.Background(), "tcp", g.tcpAddr)
	if err != nil {
		return nil, err
	}
	_, err = io.WriteString(c, "POST /v1/site/deliveries HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-ndjson\r\nContent-Length: 100000\r\n\r\n")
	if err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// Callers without a certificate, from 130 addresses of one block, each
// holding report streams whose body never comes, take only their
// addresses' and their block's share of the anonymous slots: sidecars of
// another block keep reporting over HTTPS and HTTP/3 (the first round:
// 4,160 such connections filled all 4,096 slots in 9 s).
func TestAnonymousFloodTakesOnlyItsShare(t *testing.T) {
	g := newGrid(t)
	caps := DefaultConnectionCaps()
	g.serve(t, holdingHandler, Options{AnonymousPaths: []string{"/v1/site/deliveries"}, Connections: &caps,
		Handshakes: &HandshakeLimits{PerAddress: Bucket{Rate: 1000, Burst: 1000}}})
	var held []net.Conn
	t.Cleanup(func() {
		for _, c := range held {
			c.Close()
		}
	})
	for i := range 130 {
		for range 32 {
			c, err := g.holdStream(fmt.Sprintf("127.0.0.%d", 2+i))
			if err == nil {
				held = append(held, c)
			}
		}
	}
	require.Eventually(t, func() bool {
		return testutil.ToFloat64(g.l.metrics.open.WithLabelValues(transportTCP, Anonymous.String())) <= float64(caps.MaxAnonymousPerPrefix)
	}, 5*time.Second, 20*time.Millisecond)
	openAnon := testutil.ToFloat64(g.l.metrics.open.WithLabelValues(transportTCP, Anonymous.String()))
	refused := testutilConnections(g, transportTCP, Anonymous.String(), refusedAddrFull) + testutilConnections(g, transportTCP, Anonymous.String(), refusedPrefFull)
	t.Logf("flood=%d anonymous_open=%v refused=%v", 130*32, openAnon, refused)
	assert.LessOrEqual(t, openAnon, float64(caps.MaxAnonymousPerPrefix))
	assert.Positive(t, testutilConnections(g, transportTCP, Anonymous.String(), refusedAddrFull))
	assert.Positive(t, testutilConnections(g, transportTCP, Anonymous.String(), refusedPrefFull))

	ok := 0
	for i := range 20 {
		tr := transports[i%2]
		status, _, err := g.client(t, tr, fmt.Sprintf("127.0.1.%d", 1+i), g.clientTLS()).do(http.MethodPost, "/v1/site/deliveries")
		if err == nil && status == http.StatusAccepted {
			ok++
		}
	}
	assert.Equal(t, 20, ok, "honest sidecars of another block report throughout")
}

// An anonymous connection carries two requests at once at most, and one
// that carries none for the idle time is closed: its slot goes back.
func TestAnonymousConnectionsAreSmallAndShortLived(t *testing.T) {
	g := newGrid(t)
	block := make(chan struct{})
	t.Cleanup(func() { close(block) })
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-block:
		case <-r.Context().Done():
		}
	})
	g.serve(t, handler, Options{AnonymousPaths: []string{"/v1/site/deliveries"}, AnonymousIdle: 300 * time.Millisecond})
	c := g.client(t, transportTCP, "", g.clientTLS())
	statuses := make(chan int, 3)
	for range 3 {
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, c.base+"/v1/site/deliveries", http.NoBody)
			resp, err := c.http.Do(req)
			if err != nil {
				statuses <- 0
				return
			}
			resp.Body.Close()
			statuses <- resp.StatusCode
		}()
	}
	var got []int
	for range 3 {
		got = append(got, <-statuses)
	}
	assert.Contains(t, got, http.StatusTooManyRequests, "a third request on one anonymous connection")

	idle, err := g.holdStream("127.0.0.7")
	require.NoError(t, err)
	idle.Close()
	raw, err := (&tls.Dialer{NetDialer: &net.Dialer{Timeout: 2 * time.Second}, Config: g.clientTLS()}).DialContext(context.Background(), "tcp", g.tcpAddr)
	require.NoError(t, err)
	defer raw.Close()
	_ = raw.SetReadDeadline(time.Now().Add(5 * time.Second))
	start := time.Now()
	_, err = raw.Read(make([]byte, 1))
	require.Error(t, err, "closed by the listener")
	assert.Less(t, time.Since(start), 3*time.Second)
	assert.Positive(t, g.closes(transportTCP, "anonymous_idle"))
}

// Half-open connections from many addresses are held to the in-flight
// caps, and running out of file descriptors does not end the listener:
// accept backs off and serving goes on once descriptors are free (the
// first round: accept4's EMFILE stopped the listener and the agent).
func TestOutOfDescriptorsDoesNotEndTheListener(t *testing.T) {
	g := newGrid(t)
	g.serve(t, nil, Options{InFlight: &InFlightLimits{Total: 100, PerAddress: 4, PerPrefix: 24}})
	var conns []net.Conn
	closeAll := func() {
		for _, c := range conns {
			c.Close()
		}
		conns = nil
	}
	t.Cleanup(closeAll)

	// In flight: 4 per address, 24 per /24 (ten addresses each here).
	for i := range 40 {
		for range 6 {
			d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(fmt.Sprintf("127.%d.0.%d", 1+i%4, 1+i))}, Timeout: time.Second}
			if c, err := d.DialContext(context.Background(), "tcp", g.tcpAddr); err == nil {
				conns = append(conns, c)
			}
		}
	}
	require.Eventually(t, func() bool {
		return g.handshakes(transportTCP, inFlightAddress) > 0 && g.handshakes(transportTCP, inFlightPrefix) > 0
	}, 5*time.Second, 20*time.Millisecond)
	closeAll()

	// Out of descriptors: the soft limit just above what is open now.
	var lim syscall.Rlimit
	require.NoError(t, syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim))
	open, err := os.ReadDir("/proc/self/fd")
	require.NoError(t, err)
	low := lim
	low.Cur = uint64(len(open) + 20)
	require.NoError(t, syscall.Setrlimit(syscall.RLIMIT_NOFILE, &low))
	restored := false
	restore := func() {
		if !restored {
			restored = true
			require.NoError(t, syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim))
		}
	}
	t.Cleanup(restore)
	// Every descriptor taken but one, which a client's socket takes: the
	// listener's accept then has none. Descriptors other goroutines free
	// meanwhile are taken too, and the step repeated until accept failed.
	var burnt []*os.File
	defer func() {
		for _, f := range burnt {
			f.Close()
		}
	}()
	failed := func() bool { return testutil.ToFloat64(g.l.metrics.acceptErrors) > 0 }
	for try := 0; try < 50 && !failed(); try++ {
		for {
			f, err := os.Open(os.DevNull)
			if err != nil {
				break
			}
			burnt = append(burnt, f)
		}
		require.NotEmpty(t, burnt)
		burnt[len(burnt)-1].Close()
		burnt = burnt[:len(burnt)-1]
		if c, err := (&net.Dialer{Timeout: time.Second}).DialContext(context.Background(), "tcp", g.tcpAddr); err == nil {
			conns = append(conns, c)
		}
		deadline := time.Now().Add(200 * time.Millisecond)
		for time.Now().Before(deadline) && !failed() {
			time.Sleep(5 * time.Millisecond)
		}
	}
	require.True(t, failed(), "accept ran out of descriptors")
	for _, f := range burnt {
		f.Close()
	}
	burnt = nil
	restore()
	closeAll()

	status, body, err := g.client(t, transportTCP, "127.0.0.5", g.clientTLS(g.gateway)).get("/")
	require.NoError(t, err, "the listener still serves")
	assert.Equal(t, http.StatusOK, status)
	assert.Equal(t, "gateway", body)
}

// An infrastructure certificate of the grid CA (for a database or a
// serving listener: no organization, no SPIFFE SAN) names no site in
// either mode: its caller is anonymous, reaches only the anonymous paths,
// and is closed on a named route like a caller with no certificate.
func TestAnInfrastructureCertificateMatchesNoSite(t *testing.T) {
	for _, spiffe := range []bool{false, true} {
		t.Run(fmt.Sprintf("spiffe=%v", spiffe), func(t *testing.T) {
			g := newGrid(t)
			g.serve(t, nil, Options{AnonymousPaths: []string{"/v1/site/deliveries"}, Naming: Naming{SPIFFE: spiffe}})
			chain, key, err := g.ca.IssueInfrastructure([]string{"db.data.svc.cluster.local"}, time.Now(), time.Hour)
			require.NoError(t, err)
			infra, err := tls.X509KeyPair(chain, key)
			require.NoError(t, err)
			for _, tr := range transports {
				status, body, err := g.client(t, tr, "", g.clientTLS(infra)).do(http.MethodPost, "/v1/site/deliveries")
				require.NoError(t, err)
				assert.Equal(t, http.StatusOK, status)
				assert.Equal(t, "anonymous", body, "%s: the grid CA signed it, but it names no site", tr)
				_, _, err = g.client(t, tr, "", g.clientTLS(infra)).get("/v1/site/signals")
				assert.Error(t, err, "%s: a named-only route closes it without an answer", tr)
				assert.Positive(t, g.closes(tr, "anonymous_route"))
			}
		})
	}
}
