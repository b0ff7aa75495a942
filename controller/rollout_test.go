package controller_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gridsync/gridsync/api/v1alpha1"
	"github.com/gridsync/gridsync/controller"
	"github.com/gridsync/gridsync/controller/rbac"
	rollout "github.com/gridsync/gridsync/delivery/fold"
	reports "github.com/gridsync/gridsync/delivery/handler"
	deliveryreport "github.com/gridsync/gridsync/delivery/report"
	siglisten "github.com/gridsync/gridsync/listener"
	"github.com/gridsync/gridsync/shared/envelope"
	"github.com/gridsync/gridsync/shared/overlaysync"
	"github.com/gridsync/gridsync/shared/tlsidentity"
	signalsapi "github.com/gridsync/gridsync/signals/httpapi"
	"github.com/gridsync/gridsync/test/testpki"
	"github.com/gridsync/gridsync/trust/sitetrust"
)

func withDeliveries(d controller.DeliveryTracker) agentOption {
	return func(o *controller.ManagerOptions) { o.Deliveries = d }
}

// reportListener is the agent's signals listener taking delivery reports:
// this site's identity from a grid CA, TokenReviews made with the agent's
// own ServiceAccount (granted exactly the chart's rule).
type reportListener struct {
	url, caFile string
	stop        func()
	ca          *sitetrust.CA
	gateway     tls.Certificate // this site's current leaf
}

func (e *env) startReportListener(agg *rollout.Aggregator, apis ...*signalsapi.API) *reportListener {
	e.t.Helper()
	now := time.Now()
	caPEM, caKey, err := sitetrust.NewCA(now, time.Hour)
	require.NoError(e.t, err)
	ca, err := sitetrust.ParseCA(caPEM, caKey)
	require.NoError(e.t, err)
	chain, key, err := ca.Issue("east", now, time.Hour)
	require.NoError(e.t, err)
	proj := testpki.NewProjection(e.t)
	proj.Publish(map[string][]byte{"tls.crt": chain, "tls.key": key, "ca.crt": caPEM})
	id, err := tlsidentity.New(tlsidentity.Options{CertFile: proj.Path("tls.crt"), KeyFile: proj.Path("tls.key"), CAFile: proj.Path("ca.crt")})
	require.NoError(e.t, err)

	require.NoError(e.t, e.cp.Grant(e.ctx, e.agentNS, "gridsync-agent", "gridsync-agent-tokenreview-"+e.agentNS, "", rbac.TokenReviewRules()))
	clientset, err := kubernetes.NewForConfig(e.saConfig)
	require.NoError(e.t, err)
	mux := http.NewServeMux()
	mux.Handle(deliveryreport.Path, reports.NewHandler(&reports.Reviewer{Client: clientset, Audience: reports.DefaultAudience}, agg, nil, prometheus.NewRegistry()))
	for _, api := range apis {
		api.Register(mux)
	}
	l, err := siglisten.New(mux, siglisten.Options{
		Identity: id, Naming: siglisten.Naming{LocalSite: "east"}, AnonymousPaths: []string{deliveryreport.Path},
		Registerer: prometheus.NewRegistry(),
	})
	require.NoError(e.t, err)
	tcp, err := (&net.ListenConfig{}).Listen(e.ctx, "tcp", "127.0.0.1:0")
	require.NoError(e.t, err)
	udp, err := (&net.ListenConfig{}).ListenPacket(e.ctx, "udp", tcp.Addr().String())
	require.NoError(e.t, err)
	ctx, cancel := context.WithCancel(e.ctx)
	done := make(chan error, 1)
	go func() { done <- l.Serve(ctx, tcp, udp) }()
	rl := &reportListener{url: "https://" + tcp.Addr().String(), caFile: proj.Path("ca.crt"), ca: ca}
	rl.gateway, err = tls.X509KeyPair(chain, key)
	require.NoError(e.t, err)
	stopped := false
	rl.stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		assert.NoError(e.t, <-done)
		_ = udp.Close()
	}
	e.t.Cleanup(rl.stop)
	return rl
}

// watchedReports is an aggregator that marks pods silent after 3 s, its
// watch running until the test ends.
func (e *env) watchedReports() *rollout.Aggregator {
	agg := rollout.New(rollout.Options{SilentAfter: 3 * time.Second, Registerer: prometheus.NewRegistry()})
	stop := make(chan struct{})
	e.t.Cleanup(func() { close(stop) })
	go agg.Watch(stop)
	return agg
}

// reportingNetwork is a network with one gateway and one provider, the
// agent folding reports into its status, and its listener taking them.
func (e *env) reportingNetwork(agg *rollout.Aggregator) (v1alpha1.ConsumerGateway, *v1alpha1.GridNetwork, *v1alpha1.InferenceProvider, *reportListener) {
	e.t.Helper()
	gw := e.gateway("edge", "east")
	network := e.network(gw)
	e.create(network)
	provider := e.provider("llm", network.Name, "m1")
	e.create(provider)
	e.startAgent(withDeliveries(agg))
	return gw, network, provider, e.startReportListener(agg)
}

// pod is a gateway pod: a real Syncer with its own ServiceAccount, and its
// reporter.
type pod struct {
	name, output string
	syncer       *overlaysync.Syncer
	reporter     *deliveryreport.Reporter
	stopSync     context.CancelFunc
	stopReport   context.CancelFunc
}

func (e *env) startPod(network *v1alpha1.GridNetwork, gw v1alpha1.ConsumerGateway, name string, to *reportListener) *pod {
	e.t.Helper()
	return e.startPodReporting(network, gw, name, to, nil)
}

// startPodReporting starts a pod whose reports are amended by amend (what
// its sidecar says it reads and asks for); nil reports as a sidecar that
// predates the compressed form.
func (e *env) startPodReporting(network *v1alpha1.GridNetwork, gw v1alpha1.ConsumerGateway, name string, to *reportListener, amend func(*deliveryreport.Report)) *pod {
	e.t.Helper()
	cmName := envelope.ConfigMapName(network.Name, gw.Name)
	cfg, err := e.cp.ConfigMapReaderConfig(e.ctx, gw.Namespace, name, cmName)
	require.NoError(e.t, err)
	token, err := e.cp.PodToken(e.ctx, gw.Namespace, name, name, reports.DefaultAudience)
	require.NoError(e.t, err)
	dir := e.t.TempDir()
	tokenFile := filepath.Join(dir, "token")
	require.NoError(e.t, os.WriteFile(tokenFile, []byte(token), 0o600))
	p := &pod{name: name, output: filepath.Join(dir, "out", "routing-overlay.json")}
	require.NoError(e.t, os.MkdirAll(filepath.Dir(p.output), 0o755))
	p.reporter, err = deliveryreport.NewReporter(deliveryreport.ReporterOptions{
		URL: to.url, TokenFile: tokenFile, CAFile: to.caFile, ServerName: sitetrust.DNSName("east"), Interval: time.Second,
		Snapshot: func() deliveryreport.Report {
			rep := deliveryreport.Of(gw.Namespace, gw.Name, name, p.syncer.Status())
			if amend != nil {
				amend(&rep)
			}
			return rep
		},
	})
	require.NoError(e.t, err)
	p.syncer, err = overlaysync.New(cfg, overlaysync.Options{
		Namespace: gw.Namespace, ConfigMap: cmName, DataKey: envelope.DataKeyEnvelope, Output: p.output, MaxBytes: 4 << 20,
		Expect: envelope.Scope{Network: network.Name, Gateway: gw.Name, Namespace: gw.Namespace, LocalSite: gw.SiteName},
		Notify: p.reporter.Notify,
	})
	require.NoError(e.t, err)
	syncCtx, stopSync := context.WithCancel(e.ctx)
	reportCtx, stopReport := context.WithCancel(e.ctx)
	p.stopSync, p.stopReport = stopSync, stopReport
	go func() { _ = p.syncer.Run(syncCtx) }()
	go p.reporter.Run(reportCtx)
	e.t.Cleanup(func() { stopSync(); stopReport() })
	return p
}

func (p *pod) revision() string {
	data, err := os.ReadFile(p.output)
	if err != nil {
		return ""
	}
	res, err := envelope.Validate(data, envelope.Options{MaxBytes: envelope.MaxBytesCeiling})
	if err != nil {
		return ""
	}
	return res.Revision
}

// delivery waits for the gateway's delivery summary to satisfy ok.
func (e *env) delivery(network *v1alpha1.GridNetwork, gateway string, ok func(v1alpha1.GridNetworkStatus, *v1alpha1.GatewayDelivery) bool) (v1alpha1.GridNetworkStatus, *v1alpha1.GatewayDelivery) {
	e.t.Helper()
	var status v1alpha1.GridNetworkStatus
	var got *v1alpha1.GatewayDelivery
	e.eventually("delivery of "+gateway, func() (bool, string) {
		var n v1alpha1.GridNetwork
		if err := e.admin.Get(e.ctx, client.ObjectKeyFromObject(network), &n); err != nil {
			return false, err.Error()
		}
		status = n.Status
		for _, s := range n.Status.OverlayStatus {
			if s.GatewayName == gateway {
				got = s.Delivery
				b, _ := json.Marshal(s.Delivery)
				return ok(n.Status, s.Delivery), string(b) + " rendered=" + s.RenderedRevision + " delivered=" + n.Status.Delivered
			}
		}
		return false, "no entry"
	})
	return status, got
}

// renderedOf is the revision the status says was rendered for gateway.
func renderedOf(status v1alpha1.GridNetworkStatus, gateway string) string {
	for _, s := range status.OverlayStatus {
		if s.GatewayName == gateway {
			return s.RenderedRevision
		}
	}
	return ""
}

// Real sidecars deliver and report over the signals listener; the network
// status says which pods serve the rendered revision, which lag and why,
// and never takes a report for another namespace's gateway.
func TestGatewayPodsReportTheirDeliveriesIntoTheNetworkStatus(t *testing.T) {
	e := newEnv(t)
	gw, network, provider, listener := e.reportingNetwork(e.watchedReports())

	pods := []*pod{e.startPod(network, gw, "edge-a", listener), e.startPod(network, gw, "edge-b", listener), e.startPod(network, gw, "edge-c", listener)}
	_, res := e.overlayOf(network, gw, anyRevision)
	status, d := e.delivery(network, gw.Name, func(_ v1alpha1.GridNetworkStatus, d *v1alpha1.GatewayDelivery) bool {
		return d != nil && d.PodsOnRevision == 3 && d.DeliveredAt != nil
	})
	assert.Equal(t, int32(3), d.ReportingPods)
	assert.Zero(t, d.LaggingPods)
	assert.Equal(t, "3/3", status.Delivered, "kubectl get gridnetwork shows DELIVERED 3/3")
	for _, p := range pods {
		assert.Equal(t, res.Revision, p.revision())
	}

	// One pod is held on its revision: its sync stops, its reports go on.
	pods[2].stopSync()
	update(e, provider, func(p *v1alpha1.InferenceProvider) { p.Spec.Models = append(p.Spec.Models, v1alpha1.Model{Name: "m2"}) })
	_, next := e.overlayOf(network, gw, func(r envelope.Result) bool { return r.Revision != res.Revision })
	// The ConfigMap is written before the status: until the status has
	// the new revision, the counts are against the previous one (edge-c
	// on it, a pod already on the new one lagging).
	_, d = e.delivery(network, gw.Name, func(st v1alpha1.GridNetworkStatus, d *v1alpha1.GatewayDelivery) bool {
		return renderedOf(st, gw.Name) == next.Revision && d != nil && d.PodsOnRevision == 2 && d.LaggingPods == 1
	})
	require.Len(t, d.Lagging, 1)
	assert.Equal(t, v1alpha1.LaggingPod{Pod: "edge-c", Reason: rollout.LagOlderRevision, Revision: res.Revision}, d.Lagging[0])
	assert.Nil(t, d.DeliveredAt, "not delivered everywhere")
	assert.Equal(t, next.Revision, pods[0].revision())

	// A pod that stops reporting lags as Silent.
	pods[1].stopReport()
	_, d = e.delivery(network, gw.Name, func(_ v1alpha1.GridNetworkStatus, d *v1alpha1.GatewayDelivery) bool {
		return d != nil && slices.ContainsFunc(d.Lagging, func(l v1alpha1.LaggingPod) bool { return l.Pod == "edge-b" && l.Reason == rollout.LagSilent })
	})
	assert.Equal(t, int32(1), d.PodsOnRevision)

	// A pod's token of another namespace reports for nobody here.
	foreign, err := e.cp.PodToken(e.ctx, e.credNS, "intruder", "edge-x", reports.DefaultAudience)
	require.NoError(t, err)
	status2 := postReport(t, listener, foreign, deliveryreport.Report{Namespace: gw.Namespace, Gateway: gw.Name, Pod: "edge-x", Revision: next.Revision, ContentDigest: next.Revision, State: "ready"})
	assert.Equal(t, http.StatusForbidden, status2)
	audienceless, err := e.cp.ServiceAccountToken(e.ctx, gw.Namespace, "edge-a", "some-other-audience")
	require.NoError(t, err)
	assert.Equal(t, http.StatusUnauthorized, postReport(t, listener, audienceless, deliveryreport.Report{
		Namespace: gw.Namespace, Gateway: gw.Name, Pod: "edge-x", Revision: next.Revision, ContentDigest: next.Revision, State: "ready"}),
		"a token for another audience is refused")
	// The same refusal on a sidecar's report stream ends the stream; the
	// reporter counts it and backs off.
	foreignFile := filepath.Join(t.TempDir(), "token")
	require.NoError(t, os.WriteFile(foreignFile, []byte(foreign), 0o600))
	reg := prometheus.NewRegistry()
	intruder, err := deliveryreport.NewReporter(deliveryreport.ReporterOptions{
		URL: listener.url, TokenFile: foreignFile, CAFile: listener.caFile, ServerName: sitetrust.DNSName("east"), Interval: time.Second,
		Registerer: reg,
		Snapshot: func() deliveryreport.Report {
			return deliveryreport.Report{Namespace: gw.Namespace, Gateway: gw.Name, Pod: "edge-x", Revision: next.Revision, ContentDigest: next.Revision, State: "ready"}
		},
	})
	require.NoError(t, err)
	go intruder.Run(e.ctx)
	e.eventually("the stream refused", func() (bool, string) {
		families, err := reg.Gather()
		require.NoError(t, err)
		for _, f := range families {
			for _, m := range f.GetMetric() {
				for _, l := range m.GetLabel() {
					if f.GetName() == "gridsync_delivery_reports_total" && l.GetName() == "outcome" && l.GetValue() == "refused" && m.GetCounter().GetValue() > 0 {
						return true, ""
					}
				}
			}
		}
		return false, "no refusal counted"
	})
	_, d = e.delivery(network, gw.Name, func(_ v1alpha1.GridNetworkStatus, d *v1alpha1.GatewayDelivery) bool { return d != nil })
	assert.Equal(t, int32(3), d.ReportingPods, "the refused reports counted no pod")
}

// With the agent's listener gone, the sidecars deliver as they did: the
// reports fail beside delivery, never in its way.
func TestSidecarsDeliverWhileTheAgentListenerIsDown(t *testing.T) {
	e := newEnv(t)
	agg := rollout.New(rollout.Options{Registerer: prometheus.NewRegistry()})
	gw, network, provider, listener := e.reportingNetwork(agg)
	pods := []*pod{e.startPod(network, gw, "edge-a", listener), e.startPod(network, gw, "edge-b", listener)}
	_, res := e.overlayOf(network, gw, anyRevision)
	e.delivery(network, gw.Name, func(_ v1alpha1.GridNetworkStatus, d *v1alpha1.GatewayDelivery) bool {
		return d != nil && d.PodsOnRevision == 2
	})

	listener.stop()
	for i := range 3 {
		update(e, provider, func(p *v1alpha1.InferenceProvider) {
			p.Spec.Models = append(p.Spec.Models, v1alpha1.Model{Name: fmt.Sprintf("extra-%d", i)})
		})
		_, next := e.overlayOf(network, gw, func(r envelope.Result) bool { return r.Revision != res.Revision })
		res = next
		for _, p := range pods {
			e.eventually(p.name+" delivers "+next.Revision, func() (bool, string) { return p.revision() == next.Revision, p.revision() })
		}
	}
}

func postReport(t *testing.T, l *reportListener, token string, r deliveryreport.Report) int {
	t.Helper()
	body, err := json.Marshal(r)
	require.NoError(t, err)
	pool, err := os.ReadFile(l.caFile)
	require.NoError(t, err)
	c := tlsClient(t, pool)
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, l.url+deliveryreport.Path, bytes.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := c.Do(req)
	require.NoError(t, err)
	_ = resp.Body.Close()
	return resp.StatusCode
}

func tlsClient(t *testing.T, caPEM []byte, certs ...tls.Certificate) *http.Client {
	t.Helper()
	pool := x509.NewCertPool()
	require.True(t, pool.AppendCertsFromPEM(caPEM))
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: sitetrust.DNSName("east"), MinVersion: tls.VersionTLS13, Certificates: certs},
	}}
}
