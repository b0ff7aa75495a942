package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gridsync/gridsync/api/v1alpha1"
	"github.com/gridsync/gridsync/controller"
	"github.com/gridsync/gridsync/controller/rbac"
	deliveryreport "github.com/gridsync/gridsync/delivery/report"
	"github.com/gridsync/gridsync/test/controlplane"
	"github.com/gridsync/gridsync/trust/sitetrust"
)

// signalsListener is east's signals listener: its address and the folder
// its site certificate is mounted in (empty until the agent issues it).
type signalsListener struct {
	addr, identity string
}

func newSignalsListener(work string) (*signalsListener, []string, error) {
	addr, err := freeAddr()
	if err != nil {
		return nil, nil, err
	}
	l := &signalsListener{addr: addr, identity: filepath.Join(work, "east-site-identity")}
	if err := os.MkdirAll(l.identity, 0o700); err != nil {
		return nil, nil, err
	}
	return l, []string{
		"--signals-addr", addr, "--signals-cert", filepath.Join(l.identity, "tls.crt"), "--signals-key", filepath.Join(l.identity, "tls.key"),
		"--signals-ca", filepath.Join(l.identity, "ca.crt"), "--signals-interval", "1s", "--report-silent-after", "3s",
	}, nil
}

// rolloutEvidence shows a gateway pod's sidecar reporting what it serves
// to east's signals listener, and the network's status saying so.
func rolloutEvidence(ctx context.Context, cp *controlplane.ControlPlane, c client.Client, l *signalsListener, work, binDir string) error {
	step("rollout evidence: a gateway pod's sidecar reports what it serves to the agent's signals listener (HTTP/3), the GridNetwork says DELIVERED")
	// The site certificate the agent issued, as the chart mounts it.
	var site corev1.Secret
	if err := waitFor(ctx, func() bool {
		return c.Get(ctx, types.NamespacedName{Namespace: agentNamespace, Name: "grid-site-cert"}, &site) == nil && len(site.Data["tls.key"]) > 0
	}); err != nil {
		return fmt.Errorf("no site certificate: %w", err)
	}
	for name, key := range map[string]string{"tls.crt": corev1.TLSCertKey, "tls.key": corev1.TLSPrivateKeyKey, "ca.crt": "ca.crt"} {
		if err := os.WriteFile(filepath.Join(l.identity, name), site.Data[key], 0o600); err != nil {
			return err
		}
	}
	// The chart's extra rule for the listener: TokenReview create.
	if err := cp.Grant(ctx, agentNamespace, controlplane.AgentServiceAccount, "gridsync-agent-tokenreview", "", rbac.TokenReviewRules()); err != nil {
		return err
	}
	if err := waitFor(ctx, func() bool {
		conn, err := (&net.Dialer{Timeout: time.Second}).DialContext(ctx, "tcp", l.addr)
		if err == nil {
			_ = conn.Close()
		}
		return err == nil
	}); err != nil {
		return fmt.Errorf("the signals listener never started: %w", err)
	}
	fmt.Printf("    east's signals listener serves HTTPS and HTTP/3 on %s with its site certificate\n", l.addr)

	token, err := cp.PodToken(ctx, scope.Namespace, "praxis-gateway", "edge-gateway-7d9f-x2", "gridsync-agent")
	if err != nil {
		return err
	}
	tokenFile := filepath.Join(work, "report-token")
	if err := os.WriteFile(tokenFile, []byte(token), 0o600); err != nil {
		return err
	}
	volume := filepath.Join(work, "praxis-routing-pod-2")
	if err := os.MkdirAll(volume, 0o755); err != nil {
		return err
	}
	health, err := freeAddr()
	if err != nil {
		return err
	}
	sidecar, err := startBinary(ctx, filepath.Join(binDir, "gridsync-sidecar"), filepath.Join(work, "sidecar-pod-2.log"),
		"--kubeconfig", filepath.Join(work, "kubeconfig"), "--namespace", scope.Namespace, "--config-map", configMapName(),
		"--output", filepath.Join(volume, "routing-overlay.json"), "--health-addr", health,
		"--expected-network", scope.Network, "--expected-gateway", scope.Gateway, "--expected-local-site", scope.LocalSite,
		"--report-to", "https://"+l.addr, "--report-token-file", tokenFile, "--report-ca", filepath.Join(l.identity, "ca.crt"),
		"--report-server-name", sitetrust.DNSName(scope.LocalSite), "--report-interval", "1s", "--pod-name", "edge-gateway-7d9f-x2")
	if err != nil {
		return err
	}
	network := &v1alpha1.GridNetwork{}
	delivered := func(want string) error {
		return waitFor(ctx, func() bool {
			return c.Get(ctx, types.NamespacedName{Name: scope.Network}, network) == nil && network.Status.Delivered == want
		})
	}
	if err := delivered("1/1"); err != nil {
		_ = sidecar.Process.Kill()
		return fmt.Errorf("never delivered: %w", err)
	}
	for _, o := range network.Status.OverlayStatus {
		if d := o.Delivery; d != nil {
			at := "not yet"
			if d.DeliveredAt != nil {
				at = d.DeliveredAt.Format(time.TimeOnly)
			}
			fmt.Printf("    kubectl get gridnetwork: DELIVERED %s; gateway %s: %d reporting, %d on revision %s, delivered everywhere at %s\n",
				network.Status.Delivered, o.GatewayName, d.ReportingPods, d.PodsOnRevision, short(o.RenderedRevision), at)
		}
	}

	if err := compressedForm(ctx, c, health); err != nil {
		_ = sidecar.Process.Kill()
		return err
	}

	if err := forgedReport(ctx, l, token); err != nil {
		return err
	}

	// The co-located gateway reads the site's signals with the site leaf.
	pair, err := tls.X509KeyPair(site.Data[corev1.TLSCertKey], site.Data[corev1.TLSPrivateKeyKey])
	if err != nil {
		return err
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(site.Data["ca.crt"])
	gw := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{
		RootCAs: roots, ServerName: sitetrust.DNSName(scope.LocalSite), Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS13}}}
	signalsURL := "https://" + l.addr + "/v1/site/signals?collect[]=grid_provider_ready&collect[]=" + demoQueueMetric + "&collect[]=" + demoKVMetric
	body, err := getText(ctx, gw, signalsURL)
	if err != nil {
		return err
	}
	fmt.Println("    GET /v1/site/signals as the co-located gateway (Prometheus text, stamped):")
	printIndented(body)
	if err := loadSignals(ctx, c, gw, signalsURL); err != nil {
		return err
	}

	step("the pod goes away: it lags as Silent once it has not reported for 3 s")
	_ = sidecar.Process.Signal(syscall.SIGKILL)
	_ = sidecar.Wait()
	if err := delivered("0/1"); err != nil {
		return err
	}
	for _, o := range network.Status.OverlayStatus {
		if d := o.Delivery; d != nil && len(d.Lagging) > 0 {
			fmt.Printf("    DELIVERED %s; lagging: %s (%s)\n", network.Status.Delivered, d.Lagging[0].Pod, d.Lagging[0].Reason)
		}
	}
	return nil
}

// The load series the demo's provider exposes, as vLLM names them.
const (
	demoQueueMetric = "vllm:num_requests_waiting"
	demoKVMetric    = "vllm:gpu_cache_usage_perc"
)

// loadSignals shows a provider's metrics scraped into the site's signals:
// west-provider gets a metricsConfig pointing at a metrics endpoint on
// loopback; its MetricsScraped condition says how the last scrape went;
// when the endpoint goes away the samples are absent once stale, never 0.
func loadSignals(ctx context.Context, c client.Client, gw *http.Client, signalsURL string) error {
	step("load signals: west-provider's Prometheus metrics are scraped into the site's signals")
	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	metrics := &http.Server{ReadHeaderTimeout: time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = fmt.Fprintf(w, "# TYPE %s gauge\n%s 3\n# TYPE %s gauge\n%s 0.42\n", demoQueueMetric, demoQueueMetric, demoKVMetric, demoKVMetric)
	})}
	go func() { _ = metrics.Serve(ln) }()
	defer func() { _ = metrics.Close() }()

	var p v1alpha1.InferenceProvider
	if err := c.Get(ctx, types.NamespacedName{Name: "west-provider"}, &p); err != nil {
		return err
	}
	orig := p.DeepCopy()
	p.Spec.MetricsConfig = &v1alpha1.MetricsConfig{MetricsEndpoint: "http://" + ln.Addr().String(),
		SignalNames: v1alpha1.MetricSignalNames{QueueDepth: demoQueueMetric, KVCacheUtilization: demoKVMetric}}
	if err := c.Patch(ctx, &p, client.MergeFrom(orig)); err != nil {
		return err
	}
	fmt.Printf("    west-provider: metricsConfig {metricsEndpoint: http://%s, signalNames: {queueDepth, kvCacheUtilization}}\n", ln.Addr())
	if err := showScraped(ctx, c, &p, metav1.ConditionTrue); err != nil {
		return err
	}
	var body string
	if err := waitFor(ctx, func() bool {
		body, err = getText(ctx, gw, signalsURL)
		return err == nil && strings.Contains(body, demoQueueMetric+"{")
	}); err != nil {
		return fmt.Errorf("the load signals never appeared: %w", err)
	}
	printIndented(body)

	step("the metrics endpoint goes away: the scrape fails, the condition says why, and the stale samples are absent (never 0)")
	_ = metrics.Close()
	if err := showScraped(ctx, c, &p, metav1.ConditionFalse); err != nil {
		return err
	}
	if err := waitFor(ctx, func() bool {
		body, err = getText(ctx, gw, signalsURL)
		return err == nil && !strings.Contains(body, demoQueueMetric)
	}); err != nil {
		return fmt.Errorf("the stale load signals stayed: %w", err)
	}
	printIndented(body)
	fmt.Printf("    west-provider is still %s: load signals are not health\n", p.Status.Phase)
	return nil
}

// showScraped waits for the provider's MetricsScraped condition to have
// status, and prints it.
func showScraped(ctx context.Context, c client.Client, p *v1alpha1.InferenceProvider, status metav1.ConditionStatus) error {
	var cond *metav1.Condition
	if err := waitFor(ctx, func() bool {
		if c.Get(ctx, client.ObjectKeyFromObject(p), p) != nil {
			return false
		}
		cond = meta.FindStatusCondition(p.Status.Conditions, controller.ConditionMetricsScraped)
		return cond != nil && cond.Status == status
	}); err != nil {
		return fmt.Errorf("MetricsScraped never became %s: %w", status, err)
	}
	fmt.Printf("    kubectl get inferenceprovider west-provider: MetricsScraped=%s (%s: %s)\n", cond.Status, cond.Reason, cond.Message)
	return nil
}

// getText GETs url with the client and returns the answer's body.
func getText(ctx context.Context, c *http.Client, url string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, http.NoBody)
	if err != nil {
		return "", err
	}
	resp, err := c.Do(req)
	if err != nil {
		return "", err
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("%s: %s", url, resp.Status)
	}
	return string(body), err
}

func printIndented(text string) {
	for _, line := range strings.Split(strings.TrimSpace(text), "\n") {
		fmt.Println("      " + line)
	}
}

// forgedReport shows that a pod's token speaks for that pod only: the
// same token reporting for another pod is refused.
func forgedReport(ctx context.Context, l *signalsListener, token string) error {
	step("a pod's token reports for that pod only: the same token claiming another pod is refused")
	caPEM, err := os.ReadFile(filepath.Join(l.identity, "ca.crt"))
	if err != nil {
		return err
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(caPEM)
	c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{
		RootCAs: roots, ServerName: sitetrust.DNSName(scope.LocalSite), MinVersion: tls.VersionTLS13}}}
	rev := strings.Repeat("0", 64)
	body, err := json.Marshal(deliveryreport.Report{Namespace: scope.Namespace, Gateway: scope.Gateway, Pod: "edge-gateway-invented",
		Revision: rev, ContentDigest: rev, State: deliveryreport.StateReady})
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "https://"+l.addr+deliveryreport.Path, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	answer, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		return fmt.Errorf("a report for another pod got %d, not 403", resp.StatusCode)
	}
	fmt.Printf("    POST %s for pod edge-gateway-invented with edge-gateway-7d9f-x2's token: %d %s", deliveryreport.Path, resp.StatusCode, answer)
	return nil
}
