package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gridsync/gridsync/api/v1alpha1"
	"github.com/gridsync/gridsync/trust/sitetrust"
)

// providerBehindTLS runs a provider's endpoint on loopback behind a
// private CA that requires a client certificate, and shows the agent
// health-checking and scraping it with the trust and identity its
// spec.tls names; then a client Secret whose certificate is another
// key's, refused by name with nothing sent.
func providerBehindTLS(ctx context.Context, c client.Client) error {
	step("a provider behind a private CA that requires a client certificate: spec.tls names the CA, the agent's identity and the server name; health-checked and scraped over mutual TLS")
	now := time.Now()
	caPEM, caKey, err := sitetrust.NewCA(now, time.Hour)
	if err != nil {
		return err
	}
	ca, err := sitetrust.ParseCA(caPEM, caKey)
	if err != nil {
		return err
	}
	serverChain, serverKey, err := ca.Issue("tls-provider", now, time.Hour)
	if err != nil {
		return err
	}
	clientChain, clientKey, err := ca.Issue("grid-agent", now, time.Hour)
	if err != nil {
		return err
	}
	_, otherKey, err := ca.Issue("someone-else", now, time.Hour)
	if err != nil {
		return err
	}
	srv, err := startMutualTLSProvider(caPEM, serverChain, serverKey)
	if err != nil {
		return err
	}
	defer srv.close()

	caSecret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "tls-provider-ca", Namespace: agentNamespace}, Data: map[string][]byte{"ca.crt": caPEM}}
	clientSecret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "tls-provider-client", Namespace: agentNamespace},
		Data: map[string][]byte{"tls.crt": clientChain, "tls.key": clientKey}}
	p := demoProvider("tls-provider", "sim-tls", []string{"llama-3-8b"})
	p.Spec.Endpoint = "https://" + srv.addr
	p.Spec.TLS = &v1alpha1.EndpointTLSConfig{
		CASecretRef:                &v1alpha1.NamespacedKeyRef{Name: caSecret.Name, Namespace: agentNamespace},
		ClientCertificateSecretRef: &v1alpha1.ClientCertificateSecretRef{Name: clientSecret.Name, Namespace: agentNamespace},
		ServerName:                 sitetrust.DNSName("tls-provider"),
	}
	p.Spec.HealthCheck = &v1alpha1.HealthCheck{Path: "/health", Interval: "5s", Timeout: "2s"}
	p.Spec.MetricsConfig = &v1alpha1.MetricsConfig{SignalNames: v1alpha1.MetricSignalNames{QueueDepth: "vllm:num_requests_waiting"}}
	for _, obj := range []client.Object{caSecret, clientSecret, p} {
		if err := c.Create(ctx, obj); err != nil {
			return err
		}
	}
	defer func() {
		for _, obj := range []client.Object{p, caSecret, clientSecret} {
			_ = c.Delete(context.Background(), obj)
		}
	}()
	show := func(phase v1alpha1.ProviderPhase, scraped string) error {
		var got v1alpha1.InferenceProvider
		if err := waitFor(ctx, func() bool {
			if c.Get(ctx, types.NamespacedName{Name: p.Name}, &got) != nil {
				return false
			}
			s := meta.FindStatusCondition(got.Status.Conditions, "MetricsScraped")
			return got.Status.Phase == phase && s != nil && s.Reason == scraped
		}); err != nil {
			return fmt.Errorf("%s never became %s with MetricsScraped %s (%s/%s)", p.Name, phase, scraped, got.Status.Phase, got.Status.Reason)
		}
		s := meta.FindStatusCondition(got.Status.Conditions, "MetricsScraped")
		fmt.Printf("    %s %s (%s: %s); MetricsScraped %s: %s\n", p.Name, got.Status.Phase, got.Status.Reason, got.Status.Message, s.Reason, s.Message)
		return nil
	}
	if err := show(v1alpha1.ProviderAvailable, "Scraped"); err != nil {
		return err
	}
	fmt.Printf("    the provider's server answered %d requests, each presenting %v (the identity spec.tls names)\n", srv.count(), srv.clients())

	step("the client Secret replaced by a certificate with another key's private key: refused by name, nothing sent")
	before := srv.count()
	var cur corev1.Secret
	if err := c.Get(ctx, client.ObjectKeyFromObject(clientSecret), &cur); err != nil {
		return err
	}
	cur.Data["tls.key"] = otherKey
	if err := c.Update(ctx, &cur); err != nil {
		return err
	}
	if err := show(v1alpha1.ProviderDegraded, "MetricsTlsIdentityMismatch"); err != nil {
		return err
	}
	time.Sleep(time.Second)
	after := srv.count()
	fmt.Printf("    requests to the provider since: %d (a health check or scrape may have been in flight)\n", after-before)
	return nil
}

// mutualTLSProvider is a provider endpoint that requires a client
// certificate of its CA and answers /health and /metrics.
type mutualTLSProvider struct {
	addr     string
	server   *http.Server
	mu       sync.Mutex
	requests int
	subjects map[string]bool
}

func startMutualTLSProvider(caPEM, chain, key []byte) (*mutualTLSProvider, error) {
	pair, err := tls.X509KeyPair(chain, key)
	if err != nil {
		return nil, err
	}
	clients := x509.NewCertPool()
	clients.AppendCertsFromPEM(caPEM)
	l, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	m := &mutualTLSProvider{addr: l.Addr().String(), subjects: map[string]bool{}}
	m.server = &http.Server{
		ReadHeaderTimeout: 5 * time.Second,
		TLSConfig: &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{pair},
			ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: clients},
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			m.mu.Lock()
			m.requests++
			m.subjects[siteOf(r.TLS.PeerCertificates[0])] = true
			m.mu.Unlock()
			if r.URL.Path == "/metrics" {
				_, _ = w.Write([]byte("# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting 3\n"))
			}
		}),
	}
	go func() { _ = m.server.ServeTLS(l, "", "") }()
	return m, nil
}

func (m *mutualTLSProvider) count() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.requests
}

func (m *mutualTLSProvider) clients() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []string
	for s := range m.subjects {
		out = append(out, s)
	}
	return out
}

func (m *mutualTLSProvider) close() { _ = m.server.Close() }

// siteOf names a site certificate's site (its organization).
func siteOf(c *x509.Certificate) string {
	if len(c.Subject.Organization) > 0 {
		return c.Subject.Organization[0]
	}
	return c.Subject.CommonName
}
