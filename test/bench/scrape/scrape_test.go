// Package scrape measures the agent's scrapes of providers' metrics: the
// real gridsync-agent binary, with its chart's RBAC on a real
// kube-apiserver, scrapes 200 providers every second, each its own HTTP
// server on loopback. Run it with `make bench`; it prints
//
//	scrape providers=200 tls=none scrape_p50_ms=<> scrape_p99_ms=<> agent_cpu_ms_per_scrape=<> new_connections=<> full_handshakes=<> resumed_handshakes=<>
//	scrape providers=200 tls=mutual ...
//	scrape providers=200 tls=mutual-reconnect ...
//
// tls=none serves plain HTTP; tls=mutual serves HTTPS from a private CA
// and requires a client certificate, both named by each provider's
// spec.tls (the CA from a Secret, the agent's identity from another);
// tls=mutual-reconnect is the same with servers that close a connection
// idle for half a second, so that every scrape reconnects (a proxy or a
// server that does not keep connections). The scrape durations are the
// agent's own (its signals_scraped debug lines: TLS material read from
// the API server, connection, request, body); the CPU is the agent
// process's over the measured rounds divided by the scrapes the servers
// answered; the connection and handshake counts are the servers', over
// the measured rounds. The agent logs at debug level in every case (the
// durations come from those lines), which is part of each case's CPU.
package scrape

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gridsync/gridsync/api/v1alpha1"
	"github.com/gridsync/gridsync/test/controlplane"
	"github.com/gridsync/gridsync/test/framework"
	"github.com/gridsync/gridsync/test/measure"
	"github.com/gridsync/gridsync/test/testbin"
	"github.com/gridsync/gridsync/test/testpki"
	"github.com/gridsync/gridsync/test/testproc"
)

const interval = time.Second

// The sizes measured, and the smoke run's.
var (
	providers = measure.Size(200, 3)
	warmup    = measure.Size(3, 1)  // rounds every provider is scraped before measuring
	rounds    = measure.Size(10, 2) // rounds measured
)

const metricsBody = `# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting 3
# TYPE vllm:gpu_cache_usage_perc gauge
vllm:gpu_cache_usage_perc 0.42
`

var cp *controlplane.ControlPlane

func TestMain(m *testing.M) {
	framework.BenchMain(m, framework.ControlPlanes(&cp), framework.Binaries(testbin.Agent))
}

func BenchmarkScrape(b *testing.B) {
	for b.Loop() {
		for _, mode := range []string{"none", "mutual", "mutual-reconnect"} {
			runCase(b, mode)
		}
	}
}

// counters are what the servers saw.
type counters struct {
	scrapes, connections, fullHandshakes, resumed atomic.Int64
}

func (c *counters) reset() {
	c.scrapes.Store(0)
	c.connections.Store(0)
	c.fullHandshakes.Store(0)
	c.resumed.Store(0)
}

// pki is the providers' CA and server certificate, and the client CA and
// the agent's client certificate.
type pki struct {
	ca, clientCA          *testpki.Issuer
	serverCert, serverKey []byte
	agentCert, agentKey   []byte
}

// startServers starts a provider server per provider; stop closes them.
func startServers(b *testing.B, mode string, p pki, c *counters) (urls []string, stop func()) {
	var tlsConfig *tls.Config
	if mode != "none" {
		pair, err := tls.X509KeyPair(p.serverCert, p.serverKey)
		measure.Must(b, err)
		clients := x509.NewCertPool()
		clients.AddCert(p.clientCA.Cert)
		tlsConfig = &tls.Config{
			MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{pair},
			ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: clients,
			VerifyConnection: func(cs tls.ConnectionState) error {
				if cs.DidResume {
					c.resumed.Add(1)
				} else {
					c.fullHandshakes.Add(1)
				}
				return nil
			},
		}
	}
	urls = make([]string, providers)
	servers := make([]*http.Server, providers)
	for i := range urls {
		l, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", "127.0.0.1:0")
		measure.Must(b, err)
		srv := &http.Server{
			Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				c.scrapes.Add(1)
				_, _ = w.Write([]byte(metricsBody))
			}),
			ReadHeaderTimeout: 5 * time.Second,
			ConnState: func(_ net.Conn, s http.ConnState) {
				if s == http.StateNew {
					c.connections.Add(1)
				}
			},
		}
		if mode == "mutual-reconnect" {
			srv.IdleTimeout = interval / 2
		}
		scheme := "http"
		if tlsConfig != nil {
			srv.TLSConfig = tlsConfig
			l = tls.NewListener(l, tlsConfig)
			scheme = "https"
		}
		go func() { _ = srv.Serve(l) }()
		servers[i] = srv
		urls[i] = scheme + "://" + l.Addr().String()
	}
	return urls, func() {
		for _, srv := range servers {
			_ = srv.Close()
		}
	}
}

func runCase(b *testing.B, mode string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	s := framework.NewSite(b, cp, framework.SiteOptions{Prefix: "scrape-" + mode, Name: "east"})
	credNS, admin := s.Namespace(), s.Admin

	p := pki{ca: testpki.NewRoot(b, "provider-ca"), clientCA: testpki.NewRoot(b, "client-ca")}
	p.serverCert, p.serverKey = p.ca.Leaf(b, "provider", testpki.Opts{})
	p.agentCert, p.agentKey = p.clientCA.Leaf(b, "agent", testpki.Opts{ClientOnly: true})
	for name, data := range map[string]map[string][]byte{
		"provider-ca":  {"ca.crt": p.ca.PEM},
		"agent-client": {"tls.crt": p.agentCert, "tls.key": p.agentKey},
	} {
		measure.Must(b, admin.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: credNS, Name: name}, Data: data}))
	}
	var c counters
	urls, stopServers := startServers(b, mode, p, &c)
	defer stopServers()
	network := "scrape-" + mode
	measure.Must(b, admin.Create(ctx, &v1alpha1.GridNetwork{ObjectMeta: metav1.ObjectMeta{Name: network}}))
	for i, url := range urls {
		pr := &v1alpha1.InferenceProvider{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%03d", network, i), Labels: map[string]string{"bench": network}},
			Spec: v1alpha1.InferenceProviderSpec{GridNetworkRef: network, ProviderKind: "vllm", BackendKind: "openai_compatible",
				Endpoint: url, Models: []v1alpha1.Model{{Name: "m1"}},
				MetricsConfig: &v1alpha1.MetricsConfig{Timeout: "2s", SignalNames: v1alpha1.MetricSignalNames{
					QueueDepth: "vllm:num_requests_waiting", KVCacheUtilization: "vllm:gpu_cache_usage_perc"}}}}
		if mode != "none" {
			pr.Spec.TLS = &v1alpha1.EndpointTLSConfig{
				CASecretRef:                &v1alpha1.NamespacedKeyRef{Namespace: credNS, Name: "provider-ca"},
				ClientCertificateSecretRef: &v1alpha1.ClientCertificateSecretRef{Namespace: credNS, Name: "agent-client"},
			}
		}
		measure.Must(b, admin.Create(ctx, pr))
	}

	agent := startAgent(b, s)
	defer stopAgent(b, agent)
	// Gone before the next case's agent starts (every agent scrapes every
	// provider of the cluster), while this agent still runs to release the
	// network's finalizer.
	defer removeProviders(ctx, b, admin, network)
	pid := agent.Cmd.Process.Pid
	measure.Until(b, 2*time.Minute, 50*time.Millisecond, "every provider scraped in the warm-up rounds", func() bool {
		if !agent.Running() {
			b.Fatal("the agent exited before the warm-up rounds ended") // its output follows
		}
		return c.scrapes.Load() >= int64(warmup*providers)
	})

	c.reset()
	from := time.Now()
	cpu0 := measure.MustCPU(b, pid)
	time.Sleep(time.Duration(rounds) * interval)
	cpu := measure.MustCPU(b, pid) - cpu0
	to := time.Now()
	scrapes := c.scrapes.Load()
	durations := scrapeDurations(b, agent.Log(), from, to)
	if scrapes < int64(rounds*providers*9/10) || len(durations) == 0 {
		b.Fatalf("%d scrapes answered and %d timed in %d rounds of %d providers", scrapes, len(durations), rounds, providers)
	}
	fmt.Printf("scrape providers=%d tls=%s scrape_p50_ms=%.2f scrape_p99_ms=%.2f agent_cpu_ms_per_scrape=%.3f new_connections=%d full_handshakes=%d resumed_handshakes=%d\n",
		providers, mode, measure.Percentile(durations, 50), measure.Percentile(durations, 99),
		measure.Millis(cpu)/float64(scrapes), c.connections.Load(), c.fullHandshakes.Load(), c.resumed.Load())
}

func startAgent(b *testing.B, s *framework.Site) *testproc.Proc {
	// The signals collection runs with the signals listener, which serves
	// with the site identity; the providers listen on loopback.
	identity := testpki.NewSite(b, s.Name)
	return s.StartAgent(b, framework.AgentOptions{Loopback: true, Args: append([]string{"--leader-elect=false", "--log-level", "debug",
		"--signals-addr", testproc.FreeAddr(b), "--signals-interval", interval.String()}, identity.AgentArgs()...)}).Proc
}

func stopAgent(b *testing.B, agent *testproc.Proc) {
	_ = agent.Cmd.Process.Signal(syscall.SIGTERM)
	if code := agent.Wait(b, 30*time.Second); code != 0 {
		b.Errorf("the agent exited with %d", code)
	}
}

// scrapeDurations reads the agent's signals_scraped lines logged between
// from and to.
func scrapeDurations(b *testing.B, log string, from, to time.Time) []float64 {
	var out []float64
	scanner := bufio.NewScanner(strings.NewReader(log))
	scanner.Buffer(make([]byte, 64<<10), 1<<20)
	for scanner.Scan() {
		var line struct {
			Time       time.Time `json:"time"`
			Msg        string    `json:"msg"`
			DurationMS float64   `json:"duration_ms"`
		}
		if json.Unmarshal(scanner.Bytes(), &line) != nil || line.Msg != "signals_scraped" {
			continue
		}
		if line.Time.After(from) && line.Time.Before(to) {
			out = append(out, line.DurationMS)
		}
	}
	measure.Must(b, scanner.Err())
	return out
}

// removeProviders deletes a case's providers and network and waits until
// they are gone.
func removeProviders(ctx context.Context, b *testing.B, admin client.Client, network string) {
	measure.Must(b, admin.DeleteAllOf(ctx, &v1alpha1.InferenceProvider{}, client.MatchingLabels{"bench": network}))
	measure.Must(b, admin.Delete(ctx, &v1alpha1.GridNetwork{ObjectMeta: metav1.ObjectMeta{Name: network}}))
	measure.Until(b, time.Minute, 100*time.Millisecond, "the case's providers deleted", func() bool {
		var list v1alpha1.InferenceProviderList
		return admin.List(ctx, &list, client.MatchingLabels{"bench": network}) == nil && len(list.Items) == 0
	})
}
