// Package rollout measures rollout evidence at fleet scale and the signals
// listener under a flood: the real gridsync-agent binary, with its chart's
// RBAC on a real kube-apiserver, takes delivery reports from 1,000
// simulated sidecars, each from its own loopback address over its own QUIC
// connection with its own ServiceAccount token, and folds them into its
// GridNetwork's status. Run it with `make bench`; it prints
//
//	rollout pods=1000 converged_ms=<> agent_cpu_ms_per_report=<> agent_rss_mib=<> quic_handshakes_per_s=<> tls_handshakes_per_s=<> idle_agent_cpu_ms_per_s=<> udp_datagrams_per_report=<>
//	rollout-https pods=1000 converged_ms=<> agent_cpu_ms_per_report=<>
//	rollout-flood gateway_signals_p50_ms=<> gateway_signals_p99_ms=<> flood_attempts=<> flood_refused=<> gateway_requests=<>
//
// converged_ms runs from the last of 1,000 reports of a new revision,
// sent at once (a line each on the sidecar's report stream, as the
// reporter sends them), being handed to its connection to the status
// saying 1000/1000 on it.
// agent_cpu_ms_per_report is the agent's CPU over that round (reports,
// aggregation and status writes) divided by 1,000; the tokens were reviewed
// in an earlier round, as a running fleet's are. udp_datagrams_per_report
// counts the machine's UDP datagrams (both ends) over that round.
// rollout-https is the same round over HTTPS (the reporter's fallback), on
// connections already up. The handshake rates are
// 1,000 fresh QUIC, then TLS over TCP, handshakes 64 at a time from 1,000
// addresses. The flood runs one source address opening TCP and QUIC
// connections as fast as it can while the co-located gateway reads
// /v1/site/signals every 10 ms on its connection.
package rollout

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gridsync/gridsync/api/v1alpha1"
	"github.com/gridsync/gridsync/controller/rbac"
	deliveryreport "github.com/gridsync/gridsync/delivery/report"
	"github.com/gridsync/gridsync/test/controlplane"
	"github.com/gridsync/gridsync/test/framework"
	"github.com/gridsync/gridsync/test/measure"
	"github.com/gridsync/gridsync/test/testbin"
	"github.com/gridsync/gridsync/test/testpki"
	"github.com/gridsync/gridsync/test/testproc"
	"github.com/gridsync/gridsync/trust/sitetrust"
)

const (
	network = "rollout"
	site    = "east"
)

// The sizes measured, and the smoke run's.
var (
	pods     = measure.Size(1000, 4)
	gateways = measure.Size(10, 2)
)

var cp *controlplane.ControlPlane

func TestMain(m *testing.M) {
	framework.BenchMain(m, framework.ControlPlanes(&cp), framework.Binaries(testbin.Agent))
}

func BenchmarkRollout(b *testing.B) {
	for b.Loop() {
		runBench(b)
	}
}

// sidecar is one simulated gateway pod: its address, its token, its QUIC
// connection (through its own HTTP/3 transport).
type sidecar struct {
	pod, gateway string
	token        string
	client       *http.Client
	stream       *io.PipeWriter
	done         chan error
}

// open starts the sidecar's report stream.
func (s *sidecar) open(ctx context.Context, url string) {
	pr, pw := io.Pipe()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, pr)
	req.Header.Set("Content-Type", deliveryreport.StreamContentType)
	req.Header.Set("Authorization", "Bearer "+s.token)
	s.stream, s.done = pw, make(chan error, 1)
	go func() {
		resp, err := s.client.Do(req)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode != http.StatusAccepted {
				err = statusError(resp.StatusCode)
			}
		}
		_ = pr.CloseWithError(err)
		s.done <- err
	}()
}

// statusError is the agent's refusal of a stream.
type statusError int

func (e statusError) Error() string { return fmt.Sprintf("status %d", int(e)) }

// ended is why the stream ended, nil while it runs.
func (s *sidecar) ended() error {
	select {
	case err := <-s.done:
		return fmt.Errorf("the stream ended: %w", err)
	default:
		return nil
	}
}

// close ends the stream and returns the agent's answer to it.
func (s *sidecar) close() error {
	if s.stream == nil {
		return nil
	}
	_ = s.stream.Close()
	err := <-s.done
	s.stream = nil
	return err
}

func runBench(b *testing.B) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	s := framework.NewSite(b, cp, framework.SiteOptions{Prefix: "rollout", Name: site})
	gwNS, admin := s.Namespace(), s.Admin
	measure.Must(b, cp.Grant(ctx, s.AgentNS, controlplane.AgentServiceAccount, "gridsync-agent-tokenreview", "", rbac.TokenReviewRules()))

	// This site's identity, as the chart mounts the site Secret.
	identity := testpki.NewSite(b, site)
	gatewayLeaf, roots := identity.Leaf, identity.Roots

	var gws []v1alpha1.ConsumerGateway
	for g := range gateways {
		gws = append(gws, v1alpha1.ConsumerGateway{Name: fmt.Sprintf("edge-%d", g), Namespace: gwNS, SiteName: site})
	}
	measure.Must(b, admin.Create(ctx, &v1alpha1.GridNetwork{ObjectMeta: metav1.ObjectMeta{Name: network}, Spec: v1alpha1.GridNetworkSpec{ConsumerGateways: gws}}))
	provider := &v1alpha1.InferenceProvider{ObjectMeta: metav1.ObjectMeta{Name: "llm"}, Spec: v1alpha1.InferenceProviderSpec{
		GridNetworkRef: network, ProviderKind: "vllm", BackendKind: "openai_compatible", Endpoint: "https://llm.invalid",
		Models: []v1alpha1.Model{{Name: "m1"}}}}
	measure.Must(b, admin.Create(ctx, provider))

	signalsAddr := testproc.FreeAddr(b)
	agent := s.StartAgent(b, framework.AgentOptions{Args: append([]string{"--leader-elect=false", "--log-level", "warn",
		"--signals-addr", signalsAddr, "--report-silent-after", "90s",
		// A thousand pods' first reports are a thousand TokenReviews at
		// once: the review budget is raised so that the warm-up round is
		// not what is measured.
		"--report-review-rate", "1000", "--report-review-burst", "2000"}, identity.AgentArgs()...)})
	pid := agent.Cmd.Process.Pid
	waitListening(b, signalsAddr)
	// The provider Available first: its phase is part of what is
	// rendered.
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
		var p v1alpha1.InferenceProvider
		measure.Must(b, admin.Get(ctx, client.ObjectKeyFromObject(provider), &p))
		if p.Status.Phase == v1alpha1.ProviderAvailable {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("the provider never became Available: %s", p.Status.Phase)
		}
	}
	time.Sleep(time.Second) // the render that follows
	rendered := renderedRevisions(ctx, b, admin, agent.Health, nil)

	// 1,000 pods: a ServiceAccount and a token each, and an address.
	sidecars := make([]*sidecar, pods)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 16)
	for i := range pods {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			name := fmt.Sprintf("edge-pod-%04d", i)
			token, err := cp.PodToken(ctx, gwNS, name, name, "gridsync-agent")
			measure.Must(b, err)
			sidecars[i] = &sidecar{pod: name, gateway: gws[i%gateways].Name, token: token, client: h3Client(roots, sourceAddr(i), nil)}
		}()
	}
	wg.Wait()

	// The handshake rates, from 1,000 addresses, 64 at a time.
	quicRate := handshakeRate(b, func(i int) error { return quicHandshake(ctx, signalsAddr, roots, sourceAddr(i)) })
	tlsRate := handshakeRate(b, func(i int) error { return tlsHandshake(ctx, signalsAddr, roots, sourceAddr(i)) })

	// A first round: every token reviewed, every connection up.
	// Each sidecar keeps one report stream open, as the reporter does,
	// and writes a line per report.
	report := func(s *sidecar, revision string) {
		line, _ := json.Marshal(deliveryreport.Report{Namespace: gwNS, Gateway: s.gateway, Pod: s.pod, Revision: revision,
			ContentDigest: revision, State: deliveryreport.StateReady})
		if s.stream != nil {
			if err := s.ended(); err != nil {
				var refused statusError
				if errors.As(err, &refused) {
					b.Fatalf("%s: %v", s.pod, err) // the agent refused a report of an earlier round
				}
				s.stream = nil // the network ended it: a reporter opens another at once
			}
		}
		// A connection refused at its handshake (a fleet reconnecting at
		// once meets the listener's in-flight caps) is tried again, as a
		// reporter does.
		for attempt := 0; ; attempt++ {
			if s.stream == nil {
				s.open(ctx, "https://"+signalsAddr+deliveryreport.Path)
			}
			_, err := s.stream.Write(append(line, '\n'))
			if err == nil {
				break
			}
			if attempt == 5 {
				b.Fatalf("%s: report: %v (%v)", s.pod, err, s.ended())
			}
			s.stream = nil
			time.Sleep(time.Duration(attempt+1) * 100 * time.Millisecond)
		}
	}
	sendAll := func(revs map[string]string) time.Time {
		var last atomic.Int64
		var wg sync.WaitGroup
		start := make(chan struct{})
		for _, s := range sidecars {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				report(s, revs[s.gateway])
				now := time.Now().UnixNano()
				for {
					prev := last.Load()
					if now <= prev || last.CompareAndSwap(prev, now) {
						break
					}
				}
			}()
		}
		close(start)
		wg.Wait()
		return time.Unix(0, last.Load())
	}
	sendAll(rendered)
	// The first round meets 1,000 new tokens at once: a review the API
	// server could not answer then refuses that pod's stream, as it
	// would a reporter's, which reports again on a new one; so here.
	reopened := map[string]int{}
	for settle := time.Now().Add(time.Minute); !delivered(ctx, b, admin, rendered); time.Sleep(time.Second) {
		for _, s := range sidecars {
			if s.stream == nil {
				continue
			}
			if err := s.ended(); err != nil {
				reopened[err.Error()]++
				s.stream = nil
				report(s, rendered[s.gateway])
			}
		}
		if time.Now().After(settle) {
			_, body := testproc.Get(b, "http://"+agent.Health+"/metrics")
			b.Fatalf("the first round never settled; the agent's counts:\n%s", grepLines(body, "gridsync_delivery_reports_received_total", "gridsync_rollout_reports_total"))
		}
	}

	// The measured round: a new revision everywhere, all pods at once.
	measure.Must(b, admin.Patch(ctx, provider, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"models":[{"name":"m1"},{"name":"m2"}]}}`))))
	next := renderedRevisions(ctx, b, admin, agent.Health, rendered)
	// The agent's CPU at rest with the 1,000 connections open, for scale.
	idleFrom, err := measure.CPUMillis(pid)
	measure.Must(b, err)
	time.Sleep(3 * time.Second)
	idleTo, err := measure.CPUMillis(pid)
	measure.Must(b, err)
	cpuBefore := idleTo
	udpBefore, err := udpDatagrams()
	measure.Must(b, err)
	lastSent := sendAll(next)
	udpAfter, err := udpDatagrams()
	measure.Must(b, err)
	converged := waitDelivered(ctx, b, admin, next)
	cpuAfter, err := measure.CPUMillis(pid)
	measure.Must(b, err)
	rss, err := measure.RSSMiB(pid)
	measure.Must(b, err)
	if len(reopened) > 0 {
		fmt.Printf("rollout first round: streams ended and reopened: %v\n", reopened)
	}
	fmt.Printf("rollout pods=%d converged_ms=%.0f agent_cpu_ms_per_report=%.3f agent_rss_mib=%.1f quic_handshakes_per_s=%.0f tls_handshakes_per_s=%.0f idle_agent_cpu_ms_per_s=%.1f udp_datagrams_per_report=%.1f\n",
		pods, float64(converged.Sub(lastSent).Microseconds())/1000, (cpuAfter-cpuBefore)/float64(pods), rss, quicRate, tlsRate,
		(idleTo-idleFrom)/3, (udpAfter-udpBefore)/float64(pods))

	// The same round over HTTPS (the reporter's fallback), for comparison.
	for i, s := range sidecars {
		measure.Must(b, s.close()) // the agent took the whole stream
		s.client = httpsClient(roots, sourceAddr(i))
	}
	sendAll(next) // connections up, nothing changes
	waitDelivered(ctx, b, admin, next)
	measure.Must(b, admin.Patch(ctx, provider, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"models":[{"name":"m1"},{"name":"m2"},{"name":"m3"}]}}`))))
	third := renderedRevisions(ctx, b, admin, agent.Health, next)
	cpuBefore, err = measure.CPUMillis(pid)
	measure.Must(b, err)
	lastSent = sendAll(third)
	converged = waitDelivered(ctx, b, admin, third)
	cpuAfter, err = measure.CPUMillis(pid)
	measure.Must(b, err)
	fmt.Printf("rollout-https pods=%d converged_ms=%.0f agent_cpu_ms_per_report=%.3f\n",
		pods, float64(converged.Sub(lastSent).Microseconds())/1000, (cpuAfter-cpuBefore)/float64(pods))

	flood(ctx, b, signalsAddr, roots, gatewayLeaf)
	for _, s := range sidecars {
		_ = s.close()
		if t, ok := s.client.Transport.(*http3.Transport); ok {
			_ = t.Close()
		}
	}
	_ = admin.Delete(ctx, provider)
	n := &v1alpha1.GridNetwork{ObjectMeta: metav1.ObjectMeta{Name: network}}
	_ = admin.Patch(ctx, n, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`)))
	_ = admin.Delete(ctx, n)
}

// sourceAddr gives pod i an address of its own in 127.20.0.0/16.
func sourceAddr(i int) net.IP { return net.IPv4(127, 20, byte(i/250), byte(i%250+1)) }

func h3Client(roots *x509.CertPool, from net.IP, certs []tls.Certificate) *http.Client {
	cfg := &tls.Config{RootCAs: roots, ServerName: sitetrust.DNSName(site), MinVersion: tls.VersionTLS13, Certificates: certs}
	tr := &http3.Transport{TLSClientConfig: cfg, QUICConfig: &quic.Config{HandshakeIdleTimeout: 5 * time.Second, MaxIdleTimeout: time.Minute},
		Dial: func(ctx context.Context, addr string, tlsCfg *tls.Config, qcfg *quic.Config) (*quic.Conn, error) {
			pc, err := net.ListenUDP("udp", &net.UDPAddr{IP: from})
			if err != nil {
				return nil, err
			}
			raddr, err := net.ResolveUDPAddr("udp", addr)
			if err != nil {
				return nil, err
			}
			return quic.Dial(ctx, pc, raddr, tlsCfg, qcfg)
		}}
	return &http.Client{Transport: tr, Timeout: 30 * time.Second}
}

func httpsClient(roots *x509.CertPool, from net.IP) *http.Client {
	return &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		TLSClientConfig:   &tls.Config{RootCAs: roots, ServerName: sitetrust.DNSName(site), MinVersion: tls.VersionTLS13},
		DialContext:       (&net.Dialer{LocalAddr: &net.TCPAddr{IP: from}, Timeout: 5 * time.Second}).DialContext,
		ForceAttemptHTTP2: true,
	}}
}

func quicHandshake(ctx context.Context, addr string, roots *x509.CertPool, from net.IP) error {
	pc, err := net.ListenUDP("udp", &net.UDPAddr{IP: from})
	if err != nil {
		return err
	}
	defer func() { _ = pc.Close() }()
	raddr, err := net.ResolveUDPAddr("udp", addr)
	if err != nil {
		return err
	}
	cfg := &tls.Config{RootCAs: roots, ServerName: sitetrust.DNSName(site), MinVersion: tls.VersionTLS13, NextProtos: []string{http3.NextProtoH3}}
	c, err := quic.Dial(ctx, pc, raddr, cfg, &quic.Config{HandshakeIdleTimeout: 5 * time.Second})
	if err != nil {
		return err
	}
	return c.CloseWithError(0, "")
}

func tlsHandshake(ctx context.Context, addr string, roots *x509.CertPool, from net.IP) error {
	d := &tls.Dialer{NetDialer: &net.Dialer{LocalAddr: &net.TCPAddr{IP: from}, Timeout: 5 * time.Second},
		Config: &tls.Config{RootCAs: roots, ServerName: sitetrust.DNSName(site), MinVersion: tls.VersionTLS13}}
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	return c.Close()
}

func handshakeRate(b *testing.B, handshake func(i int) error) float64 {
	var wg sync.WaitGroup
	sem := make(chan struct{}, 64)
	var failed atomic.Int32
	start := time.Now()
	for i := range pods {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			if handshake(i) != nil {
				failed.Add(1)
			}
		}()
	}
	wg.Wait()
	if n := failed.Load(); n > 0 {
		b.Fatalf("%d of %d handshakes failed", n, pods)
	}
	return float64(pods) / time.Since(start).Seconds()
}

func waitListening(b *testing.B, addr string) {
	deadline := time.Now().Add(30 * time.Second)
	for {
		c, err := (&net.Dialer{Timeout: time.Second}).DialContext(context.Background(), "tcp", addr)
		if err == nil {
			_ = c.Close()
			return
		}
		if time.Now().After(deadline) {
			b.Fatalf("the signals listener never listened: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// renderedRevisions waits until every gateway's rendered revision differs
// from before's, and returns them by gateway.
func renderedRevisions(ctx context.Context, b *testing.B, admin client.Client, health string, before map[string]string) map[string]string {
	deadline := time.Now().Add(time.Minute)
	for {
		var n v1alpha1.GridNetwork
		measure.Must(b, admin.Get(ctx, types.NamespacedName{Name: network}, &n))
		out := map[string]string{}
		for _, s := range n.Status.OverlayStatus {
			if s.RenderedRevision != "" && s.RenderedRevision != before[s.GatewayName] {
				out[s.GatewayName] = s.RenderedRevision
			}
		}
		if len(out) == gateways {
			return out
		}
		if time.Now().After(deadline) {
			// What the agent saw, so that a failure says which stage
			// stopped: membership's verdict, the reconciles and how they
			// ended.
			conds, _ := json.Marshal(n.Status.Conditions)
			_, body := testproc.Get(b, "http://"+health+"/metrics")
			b.Fatalf("only %d gateways rendered; the network's conditions: %s\nthe agent's counts:\n%s", len(out), conds,
				grepLines(body, "gridsync_controller_network_reconciles_total", "gridsync_controller_network_stages_total", "gridsync_controller_status_writes_total"))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitDelivered returns when the status first says every pod holds its
// gateway's revision.
// delivered says whether the status says every pod holds its gateway's
// revision.
func delivered(ctx context.Context, b *testing.B, admin client.Client, revs map[string]string) bool {
	var n v1alpha1.GridNetwork
	measure.Must(b, admin.Get(ctx, types.NamespacedName{Name: network}, &n))
	done := n.Status.Delivered == fmt.Sprintf("%d/%d", pods, pods)
	for _, s := range n.Status.OverlayStatus {
		done = done && s.RenderedRevision == revs[s.GatewayName] && s.Delivery != nil && s.Delivery.PodsOnRevision == int32(pods/gateways)
	}
	return done
}

func grepLines(body string, prefixes ...string) string {
	var out []string
	for _, l := range strings.Split(body, "\n") {
		for _, p := range prefixes {
			if strings.HasPrefix(l, p) {
				out = append(out, l)
			}
		}
	}
	return strings.Join(out, "\n")
}

func waitDelivered(ctx context.Context, b *testing.B, admin client.Client, revs map[string]string) time.Time {
	deadline := time.Now().Add(2 * time.Minute)
	var last string
	for {
		var n v1alpha1.GridNetwork
		measure.Must(b, admin.Get(ctx, types.NamespacedName{Name: network}, &n))
		done := n.Status.Delivered == fmt.Sprintf("%d/%d", pods, pods)
		for _, s := range n.Status.OverlayStatus {
			done = done && s.RenderedRevision == revs[s.GatewayName] && s.Delivery != nil && s.Delivery.PodsOnRevision == int32(pods/gateways)
		}
		if done {
			return time.Now()
		}
		detail, _ := json.Marshal(n.Status.OverlayStatus)
		last = n.Status.Delivered + " " + string(detail)
		if time.Now().After(deadline) {
			b.Fatalf("the status never said %d/%d: %s", pods, pods, last)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// flood runs one source address's connections at full speed, over TCP
// and QUIC, while the gateway reads its signals every 10 ms.
func flood(ctx context.Context, b *testing.B, addr string, roots *x509.CertPool, leaf tls.Certificate) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	attacker := net.IPv4(127, 0, 0, 2)
	var attempts, refused atomic.Int64
	var wg sync.WaitGroup
	for w := range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				var err error
				if w%2 == 0 {
					err = tlsHandshake(ctx, addr, roots, attacker)
				} else {
					err = quicHandshake(ctx, addr, roots, attacker)
				}
				attempts.Add(1)
				if err != nil {
					refused.Add(1)
				}
			}
		}()
	}
	gw := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{
		RootCAs: roots, ServerName: sitetrust.DNSName(site), Certificates: []tls.Certificate{leaf}, MinVersion: tls.VersionTLS13}, ForceAttemptHTTP2: true}}
	var latencies []time.Duration
	time.Sleep(500 * time.Millisecond) // the flood at full speed first
	for ctx.Err() == nil {
		start := time.Now()
		req, _ := http.NewRequestWithContext(context.Background(), http.MethodGet, "https://"+addr+"/v1/site/signals", http.NoBody)
		resp, err := gw.Do(req)
		if err != nil {
			b.Fatalf("the gateway got no answer during the flood: %v", err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			b.Fatalf("the gateway got %d during the flood", resp.StatusCode)
		}
		latencies = append(latencies, time.Since(start))
		time.Sleep(10 * time.Millisecond)
	}
	wg.Wait()
	slices.Sort(latencies)
	p := func(q float64) float64 {
		return float64(latencies[int(q*float64(len(latencies)-1))].Microseconds()) / 1000
	}
	fmt.Printf("rollout-flood gateway_signals_p50_ms=%.2f gateway_signals_p99_ms=%.2f flood_attempts=%d flood_refused=%d gateway_requests=%d\n",
		p(0.5), p(0.99), attempts.Load(), refused.Load(), len(latencies))
}

// udpDatagrams is the machine's UDP datagrams sent so far (both ends are
// on loopback: the sidecars' and the agent's).
func udpDatagrams() (float64, error) {
	raw, err := os.ReadFile("/proc/net/snmp")
	if err != nil {
		return 0, err
	}
	var names []string
	for _, l := range strings.Split(string(raw), "\n") {
		fields := strings.Fields(l)
		if len(fields) == 0 || fields[0] != "Udp:" {
			continue
		}
		if names == nil {
			names = fields
			continue
		}
		for i, n := range names {
			if n == "OutDatagrams" && i < len(fields) {
				return strconv.ParseFloat(fields[i], 64)
			}
		}
	}
	return 0, errors.New("no Udp OutDatagrams in /proc/net/snmp")
}
