package attack

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gridsync/gridsync/api/v1alpha1"
	"github.com/gridsync/gridsync/controller/rbac"
	deliveryreport "github.com/gridsync/gridsync/delivery/report"
	"github.com/gridsync/gridsync/test/controlplane"
	"github.com/gridsync/gridsync/test/framework"
	"github.com/gridsync/gridsync/test/measure"
	"github.com/gridsync/gridsync/test/testpki"
	"github.com/gridsync/gridsync/test/testproc"
	"github.com/gridsync/gridsync/trust/enrol"
	"github.com/gridsync/gridsync/trust/sitetrust"
)

const listenerSite = "east"

// signalsAgent is a gridsync-agent process serving its signals listener
// with this site's identity, for gateway "edge" of namespace gwNS in
// network "net-<n>".
type signalsAgent struct {
	*testproc.Proc
	t       *testing.T
	health  string
	signals string
	agentNS string
	gwNS    string
	network string
	admin   client.Client
	roots   *x509.CertPool
	leaf    tls.Certificate // this site's, as the co-located gateway presents it
	pki     *testpki.Site
}

// startSignalsAgent starts the agent with this site's identity and
// opts (what runs it, loopback, its other flags).
func startSignalsAgent(t *testing.T, opts framework.AgentOptions) *signalsAgent {
	t.Helper()
	ctx := context.Background()
	site := framework.NewSite(t, cp, framework.SiteOptions{Prefix: "attack", Name: listenerSite})
	s := &signalsAgent{t: t, agentNS: site.AgentNS, gwNS: site.Namespace(), network: fmt.Sprintf("net-%d", site.ID), admin: site.Admin}
	require.NoError(t, cp.Grant(ctx, s.agentNS, controlplane.AgentServiceAccount, "gridsync-agent-tokenreview-"+s.agentNS, "", rbac.TokenReviewRules()))

	pki := testpki.NewSite(t, listenerSite)
	s.leaf, s.roots, s.pki = pki.Leaf, pki.Roots, pki
	gn := &v1alpha1.GridNetwork{ObjectMeta: metav1.ObjectMeta{Name: s.network}, Spec: v1alpha1.GridNetworkSpec{
		ConsumerGateways: []v1alpha1.ConsumerGateway{{Name: "edge", Namespace: s.gwNS, SiteName: listenerSite}}}}
	require.NoError(t, s.admin.Create(ctx, gn))
	t.Cleanup(func() { _ = s.admin.Delete(context.Background(), gn) })

	// No timings: the agent leads alone and its listener is what is
	// attacked, at the agent's defaults.
	s.signals = testproc.FreeAddr(t)
	opts.Args = append(append([]string{"--leader-elect=false", "--log-level", "warn", "--signals-addr", s.signals}, pki.AgentArgs()...), opts.Args...)
	agent := site.StartAgent(t, opts)
	s.Proc, s.health = agent.Proc, agent.Health
	require.Eventually(t, func() bool {
		c, err := (&net.Dialer{Timeout: time.Second}).DialContext(context.Background(), "tcp", s.signals)
		if err == nil {
			c.Close()
		}
		return err == nil
	}, 30*time.Second, 50*time.Millisecond, "the signals listener never listened")
	// The gateway is known to the reports once the network is reconciled.
	tok := s.podToken("edge-warm-up")
	c := s.client(net.IPv4(127, 0, 0, 1))
	require.Eventually(t, func() bool { return s.report(c, tok, "edge-warm-up") == http.StatusAccepted }, 30*time.Second, 100*time.Millisecond,
		"the agent never took a report for gateway edge")
	return s
}

func (s *signalsAgent) rss() float64 {
	v, _ := measure.RSSMiB(s.agentPID())
	return v
}

// agentPID is the agent's process: prlimit execs it, so the same one.
func (s *signalsAgent) agentPID() int { return s.Cmd.Process.Pid }

// metric sums the agent's /metrics samples of series whose line holds
// every one of match.
func (s *signalsAgent) metric(series string, match ...string) float64 {
	_, body := testproc.Get(s.t, "http://"+s.health+"/metrics")
	sum := 0.0
	for _, line := range strings.Split(body, "\n") {
		if !strings.HasPrefix(line, series+" ") && !strings.HasPrefix(line, series+"{") {
			continue
		}
		ok := true
		for _, m := range match {
			ok = ok && strings.Contains(line, m)
		}
		if ok {
			f := strings.Fields(line)
			var v float64
			_, _ = fmt.Sscan(f[len(f)-1], &v)
			sum += v
		}
	}
	return sum
}

// client is an HTTPS client from a loopback source address, presenting
// certs.
func (s *signalsAgent) client(from net.IP, certs ...tls.Certificate) *http.Client {
	cfg := &tls.Config{RootCAs: s.roots, ServerName: sitetrust.DNSName(listenerSite), MinVersion: tls.VersionTLS13, Certificates: certs}
	return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg, ForceAttemptHTTP2: true,
		DialContext: (&net.Dialer{LocalAddr: &net.TCPAddr{IP: from}, Timeout: 5 * time.Second}).DialContext}}
}

// signalsOK is whether the co-located gateway (this site's leaf) gets its
// signals, within a second.
func (s *signalsAgent) signalsOK() bool {
	c := s.client(net.IPv4(127, 0, 3, 1), s.leaf)
	c.Timeout = time.Second
	req, _ := http.NewRequestWithContext(context.Background(), http.MethodGet, "https://"+s.signals+"/v1/site/signals", http.NoBody)
	resp, err := c.Do(req)
	if err != nil {
		return false
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// report posts one report with token and returns the status code.
func (s *signalsAgent) report(c *http.Client, token, pod string) int {
	rev := strings.Repeat("a", 64)
	body, _ := json.Marshal(deliveryreport.Report{Namespace: s.gwNS, Gateway: "edge", Pod: pod, Revision: rev, ContentDigest: rev, State: deliveryreport.StateReady})
	req, _ := http.NewRequestWithContext(context.Background(), http.MethodPost, "https://"+s.signals+deliveryreport.Path, bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		return 0
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return resp.StatusCode
}

func (s *signalsAgent) podToken(pod string) string {
	tok, err := cp.PodToken(context.Background(), s.gwNS, "gateway", pod, "gridsync-agent")
	require.NoError(s.t, err)
	return tok
}

// A pod's token reports for the pod it is bound to only (the first round:
// a token of a ServiceAccount running no gateway pod turned DELIVERED 0/3
// into 50/50 with invented names).
func TestReportForgery(t *testing.T) {
	s := startSignalsAgent(t, framework.AgentOptions{})
	c := s.client(net.IPv4(127, 0, 0, 1))
	tok := s.podToken("edge-real-0")
	honest := s.report(c, tok, "edge-real-0")
	forged := 0
	for i := range 50 {
		if s.report(c, tok, fmt.Sprintf("edge-invented-%d", i)) == http.StatusAccepted {
			forged++
		}
	}
	unbound, err := cp.ServiceAccountToken(context.Background(), s.gwNS, "no-pod", "gridsync-agent")
	require.NoError(t, err)
	unboundAccepted := 0
	if s.report(c, unbound, "edge-real-1") == http.StatusAccepted {
		unboundAccepted++
	}
	report(t, "report_forgery", honest == http.StatusAccepted && forged == 0 && unboundAccepted == 0,
		figure{"honest_status", honest}, figure{"forged_sent", 50}, figure{"forged_accepted", forged}, figure{"unbound_accepted", unboundAccepted})
}

// Random tokens on one connection cost no TokenReview, and an honest
// report is answered meanwhile (the first round: 1,501 TokenReviews at the
// client's QPS, and an honest report waited 2 s).
func TestTokenReviewFlood(t *testing.T) {
	s := startSignalsAgent(t, framework.AgentOptions{})
	honestTok := s.podToken("edge-real-0")
	honestClient := s.client(net.IPv4(127, 0, 1, 1))
	require.Equal(t, http.StatusAccepted, s.report(honestClient, honestTok, "edge-real-0"))
	reviewsBefore := s.metric("rest_client_requests_total", `method="POST"`)
	flooder := s.client(net.IPv4(127, 0, 0, 9))
	n := size(1500, 300)
	stop := make(chan struct{})
	var floodDone sync.WaitGroup
	floodDone.Add(1)
	go func() {
		defer floodDone.Done()
		for i := range n {
			select {
			case <-stop:
				return
			default:
			}
			s.report(flooder, fmt.Sprintf("random-token-%d", i), "edge-real-0")
		}
	}()
	var latencies []time.Duration
	okCount := 0
	for range 10 {
		start := time.Now()
		if s.report(honestClient, honestTok, "edge-real-0") == http.StatusAccepted {
			okCount++
		}
		latencies = append(latencies, time.Since(start))
		time.Sleep(50 * time.Millisecond)
	}
	floodDone.Wait()
	close(stop)
	posts := s.metric("rest_client_requests_total", `method="POST"`) - reviewsBefore
	sort.Slice(latencies, func(i, j int) bool { return latencies[i] < latencies[j] })
	worst := latencies[len(latencies)-1]
	report(t, "token_review_flood", okCount == 10 && worst < time.Second && posts <= 10,
		figure{"bad_tokens", n}, figure{"api_posts_during_flood", int(posts)}, figure{"honest_reports_ok", fmt.Sprintf("%d/10", okCount)},
		figure{"honest_report_max_ms", worst.Milliseconds()})
}

// Connections without a client certificate, from 130 addresses of one
// block, each holding a report stream with a valid pod token whose body
// never comes (the first round: 4,160 filled every anonymous slot in 9 s,
// honest sidecars refused, the agent at 259 MiB with 12,420 goroutines).
func TestAnonymousSlots(t *testing.T) {
	s := startSignalsAgent(t, framework.AgentOptions{})
	before := footprintOf(t, s.Cmd.Process.Pid, "http://"+s.health+"/metrics")
	tok := s.podToken("edge-real-0")
	perAddr := size(32, 8)
	cfg := &tls.Config{RootCAs: s.roots, ServerName: sitetrust.DNSName(listenerSite), MinVersion: tls.VersionTLS13, NextProtos: []string{"http/1.1"}}
	var peak atomic.Uint64
	done := make(chan struct{})
	go func() {
		for {
			if v := uint64(s.rss() * 1024); v > peak.Load() {
				peak.Store(v)
			}
			select {
			case <-done:
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	var mu sync.Mutex
	var held []net.Conn
	t.Cleanup(func() {
		for _, c := range held {
			c.Close()
		}
	})
	var wg sync.WaitGroup
	sem := make(chan struct{}, 64)
	for i := range 130 {
		for range perAddr {
			wg.Add(1)
			sem <- struct{}{}
			go func() {
				defer func() { <-sem; wg.Done() }()
				d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, byte(2+i))}, Timeout: 3 * time.Second}
				c, err := (&tls.Dialer{NetDialer: d, Config: cfg}).DialContext(context.Background(), "tcp", s.signals)
				if err != nil {
					return
				}
				_, _ = fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Type: %s\r\nContent-Length: 1000000\r\n\r\n",
					deliveryreport.Path, tok, deliveryreport.StreamContentType)
				mu.Lock()
				held = append(held, c)
				mu.Unlock()
			}()
		}
	}
	wg.Wait()
	time.Sleep(time.Second)
	goroutines := s.metric("go_goroutines")
	honest := 0
	for i := range 20 {
		pod := fmt.Sprintf("edge-honest-%d", i)
		if s.report(s.client(net.IPv4(127, 0, 1, byte(1+i))), s.podToken(pod), pod) == http.StatusAccepted {
			honest++
		}
	}
	// The co-located gateway reads its signals meanwhile.
	gatewayOK := s.signalsOK()
	close(done)
	mu.Lock()
	for _, c := range held {
		c.Close()
	}
	held = nil
	mu.Unlock()
	fp, settled := settles(t, s.Cmd.Process.Pid, "http://"+s.health+"/metrics", before)
	rss := float64(peak.Load()) / 1024
	report(t, "anonymous_slots", honest == 20 && gatewayOK && rss < chartMemoryLimitMiB && s.Running() && settled,
		figure{"connections", 130 * perAddr}, figure{"addresses", 130}, figure{"honest_reports_ok", fmt.Sprintf("%d/20", honest)},
		figure{"gateway_ok", gatewayOK}, figure{"agent_rss_peak_mib", rss}, figure{"agent_goroutines_during", int(goroutines)}, figure{"limit_mib", chartMemoryLimitMiB},
		figure{"goroutines", fmt.Sprintf("%d->%d", before.goroutines, fp.goroutines)}, figure{"fds", fmt.Sprintf("%d->%d", before.fds, fp.fds)})
}

// Half-open connections from 30 addresses, more than the agent's
// descriptor limit (the first round, under ulimit -n 1024: accept4's
// EMFILE ended the listener and the agent exited). The in-flight caps
// hold them below the limit, so that an honest report is served
// meanwhile; accept running out anyway is the listener's unit test.
func TestAcceptOutOfDescriptors(t *testing.T) {
	const nofile = 1024
	s := startSignalsAgent(t, framework.AgentOptions{Wrap: []string{"prlimit", fmt.Sprintf("--nofile=%d:%d", nofile, nofile), "--"}})
	pid := s.agentPID()
	before := footprintOf(t, pid, "http://"+s.health+"/metrics")
	halfOpen := size(1140, 1140)
	var held []net.Conn
	t.Cleanup(func() {
		for _, c := range held {
			c.Close()
		}
	})
	for i := range halfOpen {
		// Thirty addresses of thirty blocks: the block caps alone do not
		// hold them.
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, byte(30+i%30), 0, 1)}, Timeout: time.Second}
		if c, err := d.DialContext(context.Background(), "tcp", s.signals); err == nil {
			held = append(held, c)
		}
	}
	time.Sleep(2 * time.Second)
	tok := s.podToken("edge-real-0")
	during := s.report(s.client(net.IPv4(127, 0, 1, 7)), tok, "edge-real-0")
	for _, c := range held {
		c.Close()
	}
	held = nil
	var after int
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		if after = s.report(s.client(net.IPv4(127, 0, 1, 8)), tok, "edge-real-0"); after == http.StatusAccepted {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	acceptErrors := s.metric("gridsync_signals_accept_errors_total")
	refused := s.metric("gridsync_signals_handshakes_total", "inflight_")
	fp, settled := settles(t, pid, "http://"+s.health+"/metrics", before)
	report(t, "accept_out_of_descriptors", s.Running() && during == http.StatusAccepted && after == http.StatusAccepted && settled,
		figure{"goroutines", fmt.Sprintf("%d->%d", before.goroutines, fp.goroutines)}, figure{"fds", fmt.Sprintf("%d->%d", before.fds, fp.fds)},
		figure{"half_open", halfOpen}, figure{"addresses", 30}, figure{"nofile", nofile}, figure{"refused_in_flight", int(refused)},
		figure{"accept_errors", int(acceptErrors)}, figure{"report_during", during}, figure{"report_after", after}, figure{"agent_running", s.Running()})
}

// A provider's metrics endpoint answers a quoted UTF-8 label name holding
// an escaped newline (the first round: the gateway read a forged queue
// depth of 1e9 for another provider, first in the feed).
func TestSignalsLabelForgery(t *testing.T) {
	s := startSignalsAgent(t, framework.AgentOptions{Loopback: true, Args: []string{"--signals-interval", "300ms"}})
	const queue = "vllm:num_requests_waiting"
	body := "# TYPE " + queue + " gauge\n" +
		queue + "{\"x\\\"} 0\\n" + queue + "{grid_provider=\\\"victim\\\",grid_site=\\\"east\\\"} 1e9\\nz{a\"=\"v\"} 3\n" +
		queue + "{model=\"m\"} 2\n"
	ln, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", "127.0.0.1:0")
	require.NoError(t, err)
	metrics := &http.Server{ReadHeaderTimeout: time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, body)
	})}
	go func() { _ = metrics.Serve(ln) }()
	t.Cleanup(func() { _ = metrics.Close() })
	for _, name := range []string{"source", "victim"} {
		p := &v1alpha1.InferenceProvider{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%s", s.network, name)}, Spec: v1alpha1.InferenceProviderSpec{
			GridNetworkRef: s.network, ProviderKind: "vllm", BackendKind: "openai_compatible", Endpoint: "https://" + name + ".invalid",
			Models: []v1alpha1.Model{{Name: "m1"}}}}
		if name == "source" {
			p.Spec.MetricsConfig = &v1alpha1.MetricsConfig{MetricsEndpoint: "http://" + ln.Addr().String(),
				SignalNames: v1alpha1.MetricSignalNames{QueueDepth: queue}}
		}
		require.NoError(t, s.admin.Create(context.Background(), p))
		t.Cleanup(func() { _ = s.admin.Delete(context.Background(), p) })
	}
	gateway := s.client(net.IPv4(127, 0, 0, 1), s.leaf)
	url := "https://" + s.signals + "/v1/site/signals"
	var feed string
	require.Eventually(t, func() bool {
		req, _ := http.NewRequestWithContext(context.Background(), http.MethodGet, url, http.NoBody)
		resp, err := gateway.Do(req)
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		feed = string(b)
		return strings.Contains(feed, queue+"{")
	}, 30*time.Second, 100*time.Millisecond, "the source's load never reached the feed")
	forged := 0
	for _, line := range strings.Split(feed, "\n") {
		if strings.HasPrefix(line, queue) && (strings.Contains(line, "victim") || strings.Contains(line, "1e+09")) {
			forged++
		}
	}
	dropped := s.metric("gridsync_signals_samples_dropped_total")
	report(t, "signals_label_forgery", forged == 0 && dropped > 0,
		figure{"forged_lines", forged}, figure{"samples_dropped", int(dropped)})
}

// Callers without a certificate flood the enrolment path with tokens of
// the right shape that were never issued (a guess at a token costs
// nothing to send). Each answer must cost the agent no read of the API
// server beyond one of its token Secret per quarter second, whatever is
// sent (counted by the agent itself: its reconciles read the API server
// meanwhile); the co-located gateway keeps getting its signals.
func TestEnrolTokenFlood(t *testing.T) {
	s := startSignalsAgent(t, framework.AgentOptions{})
	// The issuer's grant (the chart's trust.enrollment.issuer), and one
	// real token in the Secret: the guesses are checked against it.
	require.NoError(t, cp.Grant(context.Background(), s.agentNS, controlplane.AgentServiceAccount, "gridsync-agent-enrollment", s.agentNS,
		rbac.EnrollmentTokenRules(enrol.DefaultTokenSecret)))
	tokens := &enrol.Tokens{API: s.admin, Namespace: s.agentNS}
	_, err := tokens.Add(context.Background(), s.network, "site-real", time.Hour, time.Now())
	require.NoError(t, err)
	_, csr, err := enrol.NewKey()
	require.NoError(t, err)
	n := size(2000, 300)
	readsBefore := s.metric("grid_site_enrollment_token_reads_total")
	start := time.Now()
	var refused, busy atomic.Int64
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			c := s.client(net.IPv4(127, 0, 4, byte(w+1)))
			for i := w; i < n; i += 8 {
				var raw [32]byte
				_, _ = rand.Read(raw[:])
				body, _ := json.Marshal(enrol.Request{Network: s.network, Site: fmt.Sprintf("guess-%d", i),
					Token: "gst_" + base64.RawURLEncoding.EncodeToString(raw[:]), CSR: string(csr)})
				req, _ := http.NewRequestWithContext(context.Background(), http.MethodPost, "https://"+s.signals+enrol.EnrollPath, bytes.NewReader(body))
				resp, err := c.Do(req)
				if err != nil {
					continue
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				_ = resp.Body.Close()
				switch resp.StatusCode {
				case http.StatusForbidden:
					refused.Add(1)
				case http.StatusTooManyRequests:
					busy.Add(1)
				}
			}
		})
	}
	signals := s.signalsOK()
	wg.Wait()
	took := time.Since(start)
	reads := s.metric("grid_site_enrollment_token_reads_total") - readsBefore
	// One read of the token Secret per quarter second at most (the first
	// guess's, then one each time the set read is older): never a read
	// per guess.
	allowed := float64(took/(250*time.Millisecond)) + 1
	counted := s.metric("grid_site_enrollments_total", `result="token_refused"`)

	report(t, "enrol_token_flood", reads <= allowed && refused.Load() > 0 && signals && counted >= float64(refused.Load()),
		figure{"guesses", n}, figure{"refused", refused.Load()}, figure{"busy", busy.Load()}, figure{"token_reads", int(reads)}, figure{"token_reads_allowed", int(allowed)},
		figure{"took_ms", took.Milliseconds()}, figure{"gateway_signals_ok", signals})
}
