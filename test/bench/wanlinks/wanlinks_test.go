// Package wanlinks measures, over an emulated wide-area link, everything a
// site says to another outside SWIM: the mutual-TLS probe of a gateway,
// the signals poll over HTTPS and over HTTP/3, enrolment and renewal with
// the issuer, and delivery reports.
package wanlinks

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/gridsync/gridsync/api/v1alpha1"
	"github.com/gridsync/gridsync/controller"
	"github.com/gridsync/gridsync/controller/rbac"
	rollout "github.com/gridsync/gridsync/delivery/fold"
	reports "github.com/gridsync/gridsync/delivery/handler"
	deliveryreport "github.com/gridsync/gridsync/delivery/report"
	siglisten "github.com/gridsync/gridsync/listener"
	"github.com/gridsync/gridsync/shared/redial"
	"github.com/gridsync/gridsync/shared/tlsidentity"
	"github.com/gridsync/gridsync/signals"
	signalsapi "github.com/gridsync/gridsync/signals/httpapi"
	"github.com/gridsync/gridsync/test/controlplane"
	"github.com/gridsync/gridsync/test/framework"
	"github.com/gridsync/gridsync/test/measure"
	"github.com/gridsync/gridsync/test/testgateway"
	"github.com/gridsync/gridsync/test/testpki"
	"github.com/gridsync/gridsync/test/testwan"
	"github.com/gridsync/gridsync/trust/enrol"
	"github.com/gridsync/gridsync/trust/sitetrust"
)

var cp *controlplane.ControlPlane

func TestMain(m *testing.M) { framework.BenchMain(m, framework.ControlPlanes(&cp)) }

const (
	// The two sites: the caller (a peer, a new site, a gateway pod's
	// sidecar) and the site whose agent and gateway it reaches.
	caller, callee = 0, 1
	calleeSite     = "site-b"
	callerSite     = "site-a"
	// listenPort and gatewayPort are where the callee's signals listener
	// (TCP and UDP) and gateway listen on its lab address.
	listenPort, gatewayPort = 8444, 8443
)

// BenchmarkWANLinks measures each exchange between two sites over one
// emulated path (test/testwan): RTT_MS apart (jitter a tenth of the
// delay), losing LOSS % of the packets each way. The callee runs the
// agent's controller (in this process, on a real kube-apiserver, as the
// network's issuer) and its signals listener on TCP and QUIC, with the
// handlers the agent mounts there; the caller dials from its own network
// namespace with the product's clients. Each exchange is timed from its
// start to its answer, on a new connection each time where the product
// makes one (the probe, the poll, enrolment), on the reporter's open
// stream for reports (from a pod's change to the agent holding it):
//
//	wan-links rtt_ms=<> loss_pct=<> probe_p99_ms=<> signals_https_p99_ms=<> signals_http3_p99_ms=<> enrol_ms=<p50> report_p99_ms=<> ...
//
// with each exchange's median and the failures beside, and how many polls
// took longer than the agent's bound on one (2 s). WAN_BENCH_RTT_MS
// (100), WAN_BENCH_LOSS (5) and WAN_LINKS_SAMPLES (200) change the run.
func BenchmarkWANLinks(b *testing.B) {
	rtt := time.Duration(measure.EnvInt("WAN_BENCH_RTT_MS", 100)) * time.Millisecond
	for _, loss := range measure.EnvPercentages("WAN_BENCH_LOSS", []float64{5}) {
		b.Run(fmt.Sprintf("rtt=%s/loss=%g", rtt, loss), func(b *testing.B) {
			for b.Loop() {
				runLinks(b, rtt, loss)
			}
		})
	}
}

// exchange is one kind of exchange's timings and failures.
type exchange struct {
	name   string
	took   []float64
	failed int
	first  error
}

func (e *exchange) time(fn func() error) {
	start := time.Now()
	if err := fn(); err != nil {
		e.failed++
		if e.first == nil {
			// When it failed says which bound ended it.
			e.first = fmt.Errorf("after %s: %w", time.Since(start).Round(time.Millisecond), err)
		}
		return
	}
	e.took = append(e.took, measure.Millis(time.Since(start)))
}

func (e *exchange) fields(p string) string {
	return fmt.Sprintf("%s_%s_ms=%.0f %s_p50_ms=%.0f %s_failed=%d", e.name, p, measure.Percentile(e.took, pct(p)), e.name,
		measure.Percentile(e.took, 50), e.name, e.failed)
}

func pct(p string) float64 {
	if p == "p99" {
		return 99
	}
	return 100
}

func runLinks(b *testing.B, rtt time.Duration, lossPct float64) {
	samples := measure.EnvInt("WAN_LINKS_SAMPLES", measure.Size(200, 3))
	enrolments := measure.Size(20, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	lab := testwan.New(b, testwan.Options{Sites: 2, Link: testwan.Link{Delay: rtt / 2, Jitter: rtt / 20, Loss: lossPct / 100}})
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		return lab.Dial(ctx, caller, network, addr)
	}
	pc, err := lab.ListenPacket(caller, net.JoinHostPort(lab.Addr(caller).String(), "0"))
	measure.Must(b, err)
	qt := &quic.Transport{Conn: pc}
	defer func() { _ = qt.Close() }()
	dialQUIC := func(ctx context.Context, addr string, tlsCfg *tls.Config, cfg *quic.Config) (*quic.Conn, error) {
		ua, err := net.ResolveUDPAddr("udp", addr)
		if err != nil {
			return nil, err
		}
		return qt.Dial(ctx, ua, tlsCfg, cfg)
	}

	b.Logf("wan-links: starting the callee's agent")
	s := startCallee(ctx, b, lab)
	listenAddr := net.JoinHostPort(lab.Addr(callee).String(), fmt.Sprint(listenPort))
	peerChain, peerKey, err := s.ca.Issue(callerSite, time.Now(), time.Hour)
	measure.Must(b, err)
	peerPair := pair(b, peerChain, peerKey)

	probe := &exchange{name: "probe"}
	https := &exchange{name: "signals_https"}
	h3 := &exchange{name: "signals_http3"}
	enrolled := &exchange{name: "enrol"}
	renewed := &exchange{name: "renew"}
	reported := &exchange{name: "report"}

	target := sitetrust.Target{Address: s.gateway.Addr, ServerName: sitetrust.DNSName(calleeSite), Roots: s.roots,
		Client: peerPair, SPIFFE: true, Site: calleeSite, Timeout: 10 * time.Second, Dial: dial}
	for range samples {
		probe.time(func() error {
			if o := sitetrust.Probe(ctx, target); o.Kind != sitetrust.Verified {
				return fmt.Errorf("%s: %s", o.Reason, o.Message)
			}
			return nil
		})
	}
	b.Logf("wan-links: %s", probe.fields("p99"))

	peerTLS := &tls.Config{RootCAs: s.roots, ServerName: sitetrust.DNSName(calleeSite), Certificates: []tls.Certificate{peerPair}, MinVersion: tls.VersionTLS13}
	url := "https://" + listenAddr + signals.Path
	for range samples {
		// A new connection each poll, made as the agent's poller makes
		// it (a new connect when one goes unanswered); unbounded here, so
		// that the figures say how many polls its bound would cut.
		https.time(func() error {
			return poll(ctx, url, &http.Transport{TLSClientConfig: peerTLS.Clone(), DialContext: redial.Dialer(time.Minute, dial), DisableKeepAlives: true, ForceAttemptHTTP2: true})
		})
		h3.time(func() error {
			tr := &http3.Transport{TLSClientConfig: peerTLS.Clone(), Dial: dialQUIC,
				QUICConfig: &quic.Config{HandshakeIdleTimeout: 10 * time.Second}}
			defer func() { _ = tr.Close() }()
			return poll(ctx, url, tr)
		})
	}
	b.Logf("wan-links: %s %s", https.fields("p99"), h3.fields("p99"))

	client := enrol.Client{Dial: dial, Timeout: 30 * time.Second}
	issuer := enrol.Issuer{Address: listenAddr, Site: calleeSite}
	for i := range enrolments {
		site := fmt.Sprintf("new-%d", i)
		token, err := s.tokens.Add(ctx, s.network, site, time.Hour, time.Now())
		measure.Must(b, err)
		key, csr, err := enrol.NewKey()
		measure.Must(b, err)
		var chain []byte
		enrolled.time(func() error {
			chain, err = client.Request(ctx, issuer, s.roots, enrol.Request{Network: s.network, Site: site, Token: token, CSR: string(csr)}, nil, key)
			return err
		})
		if chain == nil {
			continue
		}
		keyDER, err := x509.MarshalPKCS8PrivateKey(key)
		measure.Must(b, err)
		current := pair(b, chain, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}))
		next, csr2, err := enrol.NewKey()
		measure.Must(b, err)
		renewed.time(func() error {
			_, err := client.Request(ctx, issuer, s.roots, enrol.Request{Network: s.network, Site: site, CSR: string(csr2)}, &current, next)
			return err
		})
	}
	b.Logf("wan-links: %s %s", enrolled.fields("max"), renewed.fields("max"))

	measureReports(ctx, b, s, reported, samples, dial, dialQUIC, listenAddr)
	b.Logf("wan-links: %s", reported.fields("p99"))

	for _, e := range []*exchange{probe, https, h3, enrolled, renewed, reported} {
		if e.first != nil {
			b.Logf("wan-links: %s: %d failed, the first: %v", e.name, e.failed, e.first)
		}
		if len(e.took) == 0 {
			b.Fatalf("wan-links: every %s failed", e.name)
		}
	}
	fmt.Printf("wan-links rtt_ms=%d loss_pct=%g probe_p99_ms=%.0f signals_https_p99_ms=%.0f signals_http3_p99_ms=%.0f enrol_ms=%.0f report_p99_ms=%.0f"+
		" probe_p50_ms=%.0f signals_https_p50_ms=%.0f signals_http3_p50_ms=%.0f enrol_max_ms=%.0f renew_ms=%.0f renew_max_ms=%.0f report_p50_ms=%.0f"+
		" probe_max_ms=%.0f signals_https_past_poll_bound=%d signals_http3_past_poll_bound=%d samples=%d enrolments=%d failed=%s\n",
		rtt.Milliseconds(), lossPct, measure.Percentile(probe.took, 99), measure.Percentile(https.took, 99), measure.Percentile(h3.took, 99),
		measure.Percentile(enrolled.took, 50), measure.Percentile(reported.took, 99),
		measure.Percentile(probe.took, 50), measure.Percentile(https.took, 50), measure.Percentile(h3.took, 50),
		measure.Percentile(enrolled.took, 100), measure.Percentile(renewed.took, 50), measure.Percentile(renewed.took, 100),
		measure.Percentile(reported.took, 50), measure.Percentile(probe.took, 100), past(https.took, pollBound), past(h3.took, pollBound),
		samples, enrolments, failures(probe, https, h3, enrolled, renewed, reported))
}

// pollBound is the agent's bound on one poll of a peer's signals.
const pollBound = 2 * time.Second

// past counts the timings over bound.
func past(took []float64, bound time.Duration) int {
	n := 0
	for _, ms := range took {
		if ms > measure.Millis(bound) {
			n++
		}
	}
	return n
}

func failures(es ...*exchange) string {
	var out []string
	for _, e := range es {
		out = append(out, fmt.Sprintf("%s:%d", e.name, e.failed))
	}
	return strings.Join(out, ",")
}

// poll reads the callee's signals as a peer site does: one GET, its
// answer read whole.
func poll(ctx context.Context, url string, tr http.RoundTripper) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, http.NoBody)
	if err != nil {
		return err
	}
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("the signals listener answered %d", resp.StatusCode)
	}
	return nil
}

func pair(b *testing.B, chain, key []byte) tls.Certificate {
	p, err := tls.X509KeyPair(chain, key)
	measure.Must(b, err)
	return p
}

// startCallee runs the callee's agent in this process: its controller,
// the network's issuer (which issues the callee's own certificate), the
// signals listener with what the agent mounts on it (signals, enrolment
// and renewal, delivery reports) on TCP and QUIC in the callee's
// namespace, and its gateway there.
func startCallee(ctx context.Context, b *testing.B, lab *testwan.Lab) *calleeState {
	st := framework.NewSite(b, cp, framework.SiteOptions{Prefix: "wanlinks"})
	admin, credNS := st.Admin, st.Namespace()
	// A network of each run's own: GridNetworks are cluster-wide, and
	// each loss rate's run starts a site of its own.
	network := fmt.Sprintf("wan-%d", st.ID)
	measure.Must(b, cp.AgentTrustSecrets(ctx, st.AgentNS, credNS, "grid-ca", "site-cert"))
	measure.Must(b, cp.Grant(ctx, st.AgentNS, controlplane.AgentServiceAccount, "gridsync-agent-tokenreview-"+st.AgentNS, "", rbac.TokenReviewRules()))
	measure.Must(b, admin.Create(ctx, &v1alpha1.GridNetwork{
		ObjectMeta: metav1.ObjectMeta{Name: network},
		Spec: v1alpha1.GridNetworkSpec{
			TLS: &v1alpha1.GridTLS{
				CASecretRef:     &v1alpha1.NamespacedName{Name: "grid-ca", Namespace: credNS},
				SiteSecretRef:   &v1alpha1.NamespacedName{Name: "site-cert", Namespace: credNS},
				SiteCertificate: &v1alpha1.SiteCertificate{Mode: v1alpha1.SiteCertificateIssuer},
			},
			PeerTrust: &v1alpha1.PeerTrust{Mode: "spiffe"},
		},
	}))
	dir := &controller.Directory{}
	mgr, err := controller.NewManager(st.Config, controller.ManagerOptions{Options: controller.Options{
		Namespaces: st.Namespaces, Logger: slog.New(slog.DiscardHandler), SiteName: calleeSite, Directory: dir,
	}, SeveralPerProcess: true}) // a run per loss rate, each with its agent
	measure.Must(b, err)
	mctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- mgr.Start(mctx) }()
	b.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			b.Log(err)
		}
	})
	var caSecret, siteSecret corev1.Secret
	measure.Until(b, time.Minute, 20*time.Millisecond, "the callee's site certificate", func() bool {
		return admin.Get(ctx, types.NamespacedName{Namespace: credNS, Name: "site-cert"}, &siteSecret) == nil
	})
	measure.Must(b, admin.Get(ctx, types.NamespacedName{Namespace: credNS, Name: "grid-ca"}, &caSecret))
	ca, err := sitetrust.ParseCA(caSecret.Data["tls.crt"], caSecret.Data["tls.key"])
	measure.Must(b, err)
	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert)
	proj := testpki.NewProjection(b)
	proj.Publish(map[string][]byte{"tls.crt": siteSecret.Data["tls.crt"], "tls.key": siteSecret.Data["tls.key"], "ca.crt": caSecret.Data["tls.crt"]})
	id, err := tlsidentity.New(tlsidentity.Options{CertFile: proj.Path("tls.crt"), KeyFile: proj.Path("tls.key"), CAFile: proj.Path("ca.crt")})
	measure.Must(b, err)

	// What the agent mounts on its signals listener.
	tokens := &enrol.Tokens{API: admin, Namespace: st.AgentNS}
	issuer, err := enrol.NewServer(controller.EnrolmentAuthority(admin, nil), tokens, time.Hour, slog.New(slog.DiscardHandler), nil)
	measure.Must(b, err)
	clientset, err := kubernetes.NewForConfig(st.Config)
	measure.Must(b, err)
	agg := rollout.New(rollout.Options{Registerer: prometheus.NewRegistry()})
	stopAgg := make(chan struct{})
	go agg.Watch(stopAgg)
	b.Cleanup(func() { close(stopAgg) })
	mux := http.NewServeMux()
	(&signalsapi.API{Site: calleeSite, Store: signals.NewStore(time.Now), Directory: dir}).Register(mux)
	mux.Handle(enrol.EnrollPath, issuer)
	mux.Handle(enrol.RenewPath, issuer)
	mux.Handle(deliveryreport.Path, reports.NewHandler(&reports.Reviewer{Client: clientset, Audience: reports.DefaultAudience}, agg, nil, prometheus.NewRegistry()))
	l, err := siglisten.New(mux, siglisten.Options{
		Identity: id, Naming: siglisten.Naming{LocalSite: calleeSite, SPIFFE: true},
		AnonymousPaths: []string{deliveryreport.Path, enrol.EnrollPath}, Registerer: prometheus.NewRegistry(),
	})
	measure.Must(b, err)
	addr := net.JoinHostPort(lab.Addr(callee).String(), fmt.Sprint(listenPort))
	tcp, err := lab.Listen(callee, addr)
	measure.Must(b, err)
	udp, err := lab.ListenPacket(callee, addr)
	measure.Must(b, err)
	lctx, lstop := context.WithCancel(ctx)
	ldone := make(chan error, 1)
	go func() { ldone <- l.Serve(lctx, tcp, udp) }()
	b.Cleanup(func() {
		lstop()
		if err := <-ldone; err != nil {
			b.Log(err)
		}
		_ = udp.Close()
	})

	gl, err := lab.Listen(callee, net.JoinHostPort(lab.Addr(callee).String(), fmt.Sprint(gatewayPort)))
	measure.Must(b, err)
	gw := testgateway.Serve(gl)
	b.Cleanup(gw.Close)
	gw.Present(pair(b, siteSecret.Data["tls.crt"], siteSecret.Data["tls.key"]), roots)
	// The signals answer a peer once the network has been reconciled.
	measure.Until(b, time.Minute, 50*time.Millisecond, "the provider directory", func() bool {
		_, err := dir.Providers(ctx, callerSite, false)
		return err == nil
	})
	return &calleeState{network: network, ca: ca, roots: roots, tokens: tokens, gateway: gw, agg: agg, gwNS: credNS}
}

// calleeState is what the caller's exchanges need of the callee.
type calleeState struct {
	network string
	ca      *sitetrust.CA
	roots   *x509.CertPool
	tokens  *enrol.Tokens
	gateway *testgateway.Gateway
	agg     *rollout.Aggregator
	gwNS    string
}

// measureReports runs a gateway pod's reporter at the caller against the
// callee's listener and times each change, from the reporter's Notify to
// the callee's aggregator holding the pod on the new revision.
func measureReports(ctx context.Context, b *testing.B, s *calleeState, e *exchange, samples int,
	dial func(context.Context, string, string) (net.Conn, error),
	dialQUIC func(context.Context, string, *tls.Config, *quic.Config) (*quic.Conn, error), listenAddr string) {
	const gateway, pod = "edge", "edge-0"
	s.agg.SetGateways(s.network, []types.NamespacedName{{Namespace: s.gwNS, Name: gateway}})
	token, err := cp.PodToken(ctx, s.gwNS, pod, pod, reports.DefaultAudience)
	measure.Must(b, err)
	dir := b.TempDir()
	tokenFile := filepath.Join(dir, "token")
	measure.Must(b, os.WriteFile(tokenFile, []byte(token), 0o600))
	caFile := filepath.Join(dir, "ca.crt")
	measure.Must(b, os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: s.ca.Cert.Raw}), 0o600))
	revision := make(chan string, 1)
	revision <- revisionOf(0)
	current := revisionOf(0)
	r, err := deliveryreport.NewReporter(deliveryreport.ReporterOptions{
		URL: "https://" + listenAddr, TokenFile: tokenFile, CAFile: caFile, ServerName: sitetrust.DNSName(calleeSite),
		Interval: time.Minute, Timeout: 10 * time.Second, Dial: dial, DialQUIC: dialQUIC,
		Snapshot: func() deliveryreport.Report {
			select {
			case current = <-revision:
			default:
			}
			return deliveryreport.Report{Namespace: s.gwNS, Gateway: gateway, Pod: pod, Revision: current, State: deliveryreport.StateReady}
		},
	})
	measure.Must(b, err)
	rctx, stop := context.WithCancel(ctx)
	defer stop()
	go r.Run(rctx)
	holds := func(rev string) bool {
		d := s.agg.Summary(s.gwNS, gateway, rev, time.Now())
		return d != nil && d.PodsOnRevision == 1
	}
	// The first report opens the stream; the changes after it are timed.
	measure.Until(b, time.Minute, 5*time.Millisecond, "the first report", func() bool { return holds(revisionOf(0)) })
	for i := 1; i <= samples; i++ {
		rev := revisionOf(i)
		e.time(func() error {
			revision <- rev
			r.Notify()
			deadline := time.Now().Add(30 * time.Second)
			for !holds(rev) {
				if time.Now().After(deadline) {
					return fmt.Errorf("revision %d never reached the agent", i)
				}
				time.Sleep(time.Millisecond)
			}
			return nil
		})
	}
}

func revisionOf(i int) string {
	var b [32]byte
	b[0], b[1] = byte(i>>8), byte(i)
	return hex.EncodeToString(b[:])
}
