package multisite

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gridsync/gridsync/api/v1alpha1"
	"github.com/gridsync/gridsync/shared/envelope"
	"github.com/gridsync/gridsync/test/framework"
	"github.com/gridsync/gridsync/test/testgateway"
	"github.com/gridsync/gridsync/test/testnet"
	"github.com/gridsync/gridsync/test/testpki"
	"github.com/gridsync/gridsync/trust/sitetrust"
)

// Two sites in poll mode: each agent serves its signals on its listener
// and polls the other's over mutual TLS with its site certificate, once
// the other is trusted (Active). B's provider says it is unhealthy on its
// own metrics endpoint: A's overlay keeps B's candidate, not fresh, while
// B's gossip still calls it Available; healthy again, fresh again. B's
// queue, normalised at B, reaches A's admission: pressured, B's candidate
// takes no new sessions at A; recovered, it does again; drained at B, it
// does not (the drain travels in B's gossiped record).
func TestTwoSitesPollEachOthersSignals(t *testing.T) {
	ctx := context.Background()
	key := newKey(t)
	var sites []*site
	for i, name := range []string{"site-a", "site-b"} {
		s := newSite(t, clusters[i], name)
		s.secret("swim-key", map[string][]byte{"key": key})
		require.NoError(t, s.CP.AgentTrustSecrets(ctx, s.AgentNS, s.Namespace(), "grid-ca", "site-cert"))
		sites = append(sites, s)
	}
	a, b := sites[0], sites[1]

	// B's provider's metrics endpoint, on loopback (B's probes may go
	// there: --probe-allow-destinations).
	var healthy, queuePercent atomic.Int32
	healthy.Store(1)
	queuePercent.Store(25)
	metrics := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintf(w, "# TYPE engine_healthy gauge\nengine_healthy %d\n# TYPE engine_queue gauge\nengine_queue %.2f\n", healthy.Load(), float64(queuePercent.Load())/100)
	}))
	t.Cleanup(metrics.Close)

	// Ports already promised to the sites (their SWIM and gateway
	// addresses, not bound yet) are not taken again.
	taken := map[string]bool{}
	for _, s := range sites {
		for _, addr := range []string{s.SwimAddr, s.gateway} {
			if _, port, err := net.SplitHostPort(addr); err == nil {
				taken[port] = true
			}
		}
	}
	var ports [2]string
	for i := range ports {
		for ports[i] == "" || taken[ports[i]] {
			ports[i] = freePort(t)
		}
		taken[ports[i]] = true
	}
	identities := [2]*testpki.Projection{testpki.NewProjection(t), testpki.NewProjection(t)}
	signalFlags := func(i int) []string {
		return []string{
			"--site-probe-interval", "1s", "--site-probe-timeout", "1s",
			"--signals-addr", "127.0.0.1:" + ports[i], "--signals-peer-port", ports[1-i], "--signals-interval", "300ms",
			"--signals-cert", identities[i].Path("tls.crt"), "--signals-key", identities[i].Path("tls.key"), "--signals-ca", identities[i].Path("ca.crt"),
		}
	}
	pollMode := func(s *site, name string, seeds ...string) {
		s.trustNetwork(name, seeds...)
		patch := `{"spec":{"signalTransport":{"mode":"poll"}}}`
		require.NoError(t, s.Admin.Patch(ctx, &v1alpha1.GridNetwork{ObjectMeta: metav1.ObjectMeta{Name: name}}, client.RawPatch(types.MergePatchType, []byte(patch))))
	}

	pollMode(a, "sig")
	a.provider("prov-a", "sig", "model-a")
	agentA := a.start(nil, signalFlags(0)...)
	caData := a.waitSecret("grid-ca", func(map[string][]byte) bool { return true })
	b.secret("grid-ca", caData)
	pollMode(b, "sig", a.SwimAddr)
	provB := &v1alpha1.InferenceProvider{
		ObjectMeta: metav1.ObjectMeta{Name: "prov-b"},
		Spec: v1alpha1.InferenceProviderSpec{GridNetworkRef: "sig", ProviderKind: "vllm", BackendKind: "openai_compatible",
			Endpoint: metrics.URL, ClusterName: b.Name, Models: []v1alpha1.Model{{Name: "model-b"}},
			MetricsConfig: &v1alpha1.MetricsConfig{Timeout: "500ms", SignalNames: v1alpha1.MetricSignalNames{Healthy: "engine_healthy", QueueDepth: "engine_queue"}}},
	}
	require.NoError(t, b.Admin.Create(ctx, provB))
	t.Cleanup(func() { b.remove(provB) })
	agentB := b.start(nil, signalFlags(1)...)

	// Each site's certificate, as the kubelet projects its Secret, for its
	// listener and its gateway; each pins the other's.
	pins := map[string]string{}
	var leafA tls.Certificate
	for i, s := range sites {
		data := s.waitSecret("site-cert", func(d map[string][]byte) bool { return len(d["tls.key"]) > 0 })
		identities[i].Publish(map[string][]byte{"tls.crt": data[corev1.TLSCertKey], "tls.key": data[corev1.TLSPrivateKeyKey], "ca.crt": data["ca.crt"]})
		g, err := testgateway.Start(s.gateway)
		require.NoError(t, err)
		t.Cleanup(g.Close)
		leaf, err := g.PresentSecret(data)
		require.NoError(t, err)
		pins[s.Name] = sitetrust.Fingerprint(leaf.Raw)
		if i == 0 {
			leafA, err = tls.X509KeyPair(data[corev1.TLSCertKey], data[corev1.TLSPrivateKeyKey])
			require.NoError(t, err)
		}
	}
	for _, s := range sites {
		s.networkStatus("sig", 30*time.Second, counts(v1alpha1.NetworkActive, 1, 1))
	}
	for _, pair := range [][2]*site{{a, b}, {b, a}} {
		at, other := pair[0], pair[1]
		name := "sig-" + other.Name
		at.gridSite(name, "discovered", func(gs *v1alpha1.GridSite) bool { return gs.Status.PublicCertPem != "" })
		patch := fmt.Sprintf(`{"spec":{"gatewayEndpoint":{"tls":{"mode":"Mutual","serverName":"%s.grid.internal"}},"trust":{"canonicalFingerprints":[%q]}}}`, other.Name, pins[other.Name])
		require.NoError(t, at.Admin.Patch(ctx, &v1alpha1.GridSite{ObjectMeta: metav1.ObjectMeta{Name: name}}, client.RawPatch(types.MergePatchType, []byte(patch))))
		at.gridSite(name, "Active", func(gs *v1alpha1.GridSite) bool { return gs.Status.Phase == sitetrust.PhaseActive })
	}

	remoteFresh := func(want bool) func() (bool, string) {
		return func() (bool, string) {
			c, ok := a.candidate("sig", "site-b", "model-b")
			return ok && c.Fresh == want, fmt.Sprintf("%+v", c)
		}
	}
	framework.Eventually(t, 30*time.Second, "B's candidate fresh at A", remoteFresh(true))
	framework.Eventually(t, 30*time.Second, "B's signals polled into A", func() (bool, string) {
		v := agentA.metric(`grid_provider_ready{grid_provider="prov-b",grid_site="site-b"}`)
		return v == 1, fmt.Sprint(v)
	})
	framework.Eventually(t, 30*time.Second, "A's signals polled into B", func() (bool, string) {
		v := agentB.metric(`grid_provider_ready{grid_provider="prov-a",grid_site="site-a"}`)
		return v == 1, fmt.Sprint(v)
	})

	healthy.Store(0)
	framework.Eventually(t, 30*time.Second, "B's candidate not fresh at A", remoteFresh(false))
	assert.Equal(t, 0.0, agentA.metric(`grid_provider_ready{grid_provider="prov-b",grid_site="site-b"}`))
	var gsB v1alpha1.InferenceProvider
	require.NoError(t, b.Admin.Get(ctx, types.NamespacedName{Name: "prov-b"}, &gsB))
	assert.Equal(t, v1alpha1.ProviderAvailable, gsB.Status.Phase, "its probes and gossip still say Available")

	// A's gateway reads B's signals from A's listener, relayed.
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caData["tls.crt"])
	gw := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{
		RootCAs: pool, ServerName: sitetrust.DNSName("site-a"), Certificates: []tls.Certificate{leafA}, MinVersion: tls.VersionTLS13}}}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://127.0.0.1:"+ports[0]+"/v1/site/signals", http.NoBody)
	require.NoError(t, err)
	resp, err := gw.Do(req)
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	assert.Contains(t, string(body), `engine_queue{grid_provider="prov-b",grid_site="site-b"} 0.25`)

	healthy.Store(1)
	framework.Eventually(t, 30*time.Second, "B's candidate fresh again", remoteFresh(true))

	// Admission at A from B's queue, as B normalised it.
	patch := `{"spec":{"scoringPolicy":{"strategy":"queueDepth"},"admissionPolicy":{"mode":"instantaneous","pressure":` +
		`{"enterThreshold":0.85,"exitThreshold":0.5,"failureThreshold":1,"successThreshold":1,"minimumStateDuration":"1s","recoveryHoldDown":"1s"}}}}`
	require.NoError(t, a.Admin.Patch(ctx, &v1alpha1.GridNetwork{ObjectMeta: metav1.ObjectMeta{Name: "sig"}}, client.RawPatch(types.MergePatchType, []byte(patch))))
	remoteAdmission := func(want string) func() (bool, string) {
		return func() (bool, string) {
			c, ok := a.candidate("sig", "site-b", "model-b")
			return ok && c.AdmissionState == want, fmt.Sprintf("%+v", c)
		}
	}
	framework.Eventually(t, 30*time.Second, "B's candidate admitted at A", remoteAdmission("new_and_existing"))
	queuePercent.Store(95)
	framework.Eventually(t, 30*time.Second, "B's candidate existing_only at A", remoteAdmission("existing_only"))
	relayed, err := gw.Do(req.Clone(ctx))
	require.NoError(t, err)
	body, _ = io.ReadAll(relayed.Body)
	_ = relayed.Body.Close()
	assert.Contains(t, string(body), `grid_provider_queue_depth_ratio{grid_provider="prov-b",grid_site="site-b"} 0.95`, "B's normalised queue, polled")
	queuePercent.Store(25)
	framework.Eventually(t, 30*time.Second, "B's candidate admitted again at A", remoteAdmission("new_and_existing"))

	drain := `{"spec":{"trafficPolicy":{"drain":true}}}`
	require.NoError(t, b.Admin.Patch(ctx, &v1alpha1.InferenceProvider{ObjectMeta: metav1.ObjectMeta{Name: "prov-b"}}, client.RawPatch(types.MergePatchType, []byte(drain))))
	framework.Eventually(t, 30*time.Second, "B's drained candidate existing_only at A", remoteAdmission("existing_only"))
}

// candidate finds a candidate in the site's overlay ConfigMap of gateway
// edge.
func (s *site) candidate(network, site, model string) (envelope.Candidate, bool) {
	var cm corev1.ConfigMap
	key := types.NamespacedName{Namespace: s.Namespace(), Name: envelope.ConfigMapName(network, "edge")}
	if err := s.Admin.Get(context.Background(), key, &cm); err != nil {
		return envelope.Candidate{}, false
	}
	var doc struct {
		Overlay envelope.Overlay `json:"overlay"`
	}
	if json.Unmarshal([]byte(cm.Data[envelope.DataKeyEnvelope]), &doc) != nil {
		return envelope.Candidate{}, false
	}
	for _, c := range doc.Overlay.Candidates {
		if c.Site == site && c.Name == model {
			return c, true
		}
	}
	return envelope.Candidate{}, false
}

// freePort is a loopback port free for TCP and UDP alike (the listener
// takes both).
func freePort(t *testing.T) string {
	t.Helper()
	_, port, err := net.SplitHostPort(testnet.FreeTCPUDPAddr(t))
	require.NoError(t, err)
	return port
}
