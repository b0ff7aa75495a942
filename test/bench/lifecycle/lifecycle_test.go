// Package lifecycle measures the trust lifecycle of a grid across real
// sites: each site an agent process on a control plane of its own,
// joined over SWIM on loopback, its gateway presenting its site
// certificate, every site Active at every other.
package lifecycle

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"

	"github.com/gridsync/gridsync/api/v1alpha1"
	"github.com/gridsync/gridsync/controller"
	"github.com/gridsync/gridsync/shared/envelope"
	"github.com/gridsync/gridsync/test/controlplane"
	"github.com/gridsync/gridsync/test/framework"
	"github.com/gridsync/gridsync/test/measure"
	"github.com/gridsync/gridsync/test/testbin"
	"github.com/gridsync/gridsync/test/testgateway"
	"github.com/gridsync/gridsync/test/testproc"
	"github.com/gridsync/gridsync/trust/sitetrust"
)

// sites is how many sites the grid has, each on its own control plane.
var sites = measure.Size(10, 3)

var cps = make([]*controlplane.ControlPlane, sites)

func TestMain(m *testing.M) {
	ptrs := make([]**controlplane.ControlPlane, len(cps))
	for i := range cps {
		ptrs[i] = &cps[i]
	}
	framework.BenchMain(m, framework.ControlPlanes(ptrs...), framework.Binaries(testbin.Agent))
}

// grid is the sites of one benchmark run, the first the one whose
// operator evicts.
type grid struct {
	b     *testing.B
	ctx   context.Context
	sites []*framework.Site
	gws   []*testgateway.Gateway
}

// newGrid starts every site and waits until each is Active at every
// other and routes every other's provider. Every site holds the grid
// CA's key (a CA Secret copied to each, the grid's earlier way): each
// issues its own certificate, and site 0 signs the network's evictions.
func newGrid(b *testing.B, ctx context.Context) *grid {
	g := &grid{b: b, ctx: ctx}
	caPEM, caKey, err := sitetrust.NewCA(time.Now(), 24*time.Hour)
	measure.Must(b, err)
	swimKey := make([]byte, 32)
	_, _ = rand.Read(swimKey)
	for i := range sites {
		s := framework.NewSite(b, cps[i], framework.SiteOptions{Prefix: "life", Name: fmt.Sprintf("site-%d", i), Swim: true})
		measure.Must(b, cps[i].AgentTrustSecrets(ctx, s.AgentNS, s.Namespace(), "grid-ca", "site-cert"))
		for name, data := range map[string]map[string][]byte{
			"grid-ca":  {corev1.TLSCertKey: caPEM, corev1.TLSPrivateKeyKey: caKey},
			"swim-key": {"key": swimKey},
		} {
			measure.Must(b, s.Admin.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: s.Namespace()}, Data: data}))
		}
		var seeds []string
		if i > 0 {
			seeds = []string{g.sites[0].SwimAddr}
		}
		measure.Must(b, s.Admin.Create(ctx, &v1alpha1.GridNetwork{
			ObjectMeta: metav1.ObjectMeta{Name: "grid", Labels: map[string]string{controller.AutoDiscoverSitesLabel: "true"}},
			Spec: v1alpha1.GridNetworkSpec{
				Seeds:            seeds,
				ConsumerGateways: []v1alpha1.ConsumerGateway{{Name: "edge", Namespace: s.Namespace(), SiteName: s.Name}},
				PeerTrust:        &v1alpha1.PeerTrust{Mode: "spiffe"},
				TLS: &v1alpha1.GridTLS{
					SwimKeySecretRef: &v1alpha1.NamespacedKeyRef{Name: "swim-key", Namespace: s.Namespace()},
					CASecretRef:      &v1alpha1.NamespacedName{Name: "grid-ca", Namespace: s.Namespace()},
					SiteSecretRef:    &v1alpha1.NamespacedName{Name: "site-cert", Namespace: s.Namespace()},
					SiteCertificate:  &v1alpha1.SiteCertificate{Mode: v1alpha1.SiteCertificateIssuer},
				},
			},
		}))
		measure.Must(b, s.Admin.Create(ctx, &v1alpha1.InferenceProvider{
			ObjectMeta: metav1.ObjectMeta{Name: "prov-" + s.Name},
			Spec: v1alpha1.InferenceProviderSpec{GridNetworkRef: "grid", ProviderKind: "vllm", BackendKind: "openai_compatible",
				Endpoint: "https://prov.invalid", ClusterName: s.Name, Models: []v1alpha1.Model{{Name: modelOf(s)}}},
		}))
		gw, err := testgateway.Start(testproc.FreeAddr(b))
		measure.Must(b, err)
		b.Cleanup(gw.Close)
		g.sites, g.gws = append(g.sites, s), append(g.gws, gw)
		s.StartAgent(b, framework.AgentOptions{Timings: framework.Fast, Loopback: true, Args: []string{"--gateway-address", gw.Addr}})
		go g.present(i)
	}
	// Formed: every site routes every other's provider.
	for i, s := range g.sites {
		for j, other := range g.sites {
			if i != j {
				g.await(fmt.Sprintf("%s routes %s", s.Name, other.Name), 3*time.Minute, func() bool { return g.routes(i, other) })
			}
		}
	}
	return g
}

func modelOf(s *framework.Site) string { return "model-" + s.Name }

// present has site i's gateway present its site certificate as it
// changes, as a gateway that mounts the site Secret does.
func (g *grid) present(i int) {
	s := g.sites[i]
	var last []byte
	for g.ctx.Err() == nil {
		var sec corev1.Secret
		if s.Admin.Get(g.ctx, types.NamespacedName{Namespace: s.Namespace(), Name: "site-cert"}, &sec) == nil &&
			len(sec.Data["tls.key"]) > 0 && !bytes.Equal(sec.Data["tls.crt"], last) {
			if _, err := g.gws[i].PresentSecret(sec.Data); err == nil {
				last = sec.Data["tls.crt"]
			}
		}
		select {
		case <-g.ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// routes says whether site i's overlay holds other's candidate.
func (g *grid) routes(i int, other *framework.Site) bool {
	s := g.sites[i]
	var cm corev1.ConfigMap
	if s.Admin.Get(g.ctx, types.NamespacedName{Namespace: s.Namespace(), Name: envelope.ConfigMapName("grid", "edge")}, &cm) != nil {
		return false
	}
	var doc struct {
		Overlay envelope.Overlay `json:"overlay"`
	}
	if json.Unmarshal([]byte(cm.Data[envelope.DataKeyEnvelope]), &doc) != nil {
		return false
	}
	return slices.ContainsFunc(doc.Overlay.Candidates, func(c envelope.Candidate) bool { return c.Site == other.Name && c.Name == modelOf(other) })
}

// network is site i's GridNetwork.
func (g *grid) network(i int) *v1alpha1.GridNetwork {
	var n v1alpha1.GridNetwork
	_ = g.sites[i].Admin.Get(g.ctx, types.NamespacedName{Name: "grid"}, &n)
	return &n
}

// updateNetwork edits site i's GridNetwork spec.
func (g *grid) updateNetwork(i int, edit func(*v1alpha1.GridNetworkSpec)) {
	measure.Must(g.b, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n := g.network(i)
		edit(&n.Spec)
		return g.sites[i].Admin.Update(g.ctx, n)
	}))
}

func (g *grid) await(what string, timeout time.Duration, ok func() bool) {
	deadline := time.Now().Add(timeout)
	for !ok() {
		if time.Now().After(deadline) {
			g.b.Fatalf("timed out waiting: %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// BenchmarkEvict measures an eviction across the grid: from the issuer's
// operator listing the last site in the network's evictedSites to the
// last other site refusing it (its GridNetwork's status holds the signed
// bundle that evicts it: from then on that site's membership refuses the
// evicted site's records and its listener its connections, the same
// bundle) and to the last overlay without its provider. It prints
//
//	evict sites=10 refused_everywhere_ms=<> providers_withdrawn_ms=<>
func BenchmarkEvict(b *testing.B) {
	for b.Loop() {
		runEvict(b)
	}
}

func runEvict(b *testing.B) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	g := newGrid(b, ctx)
	victim := g.sites[len(g.sites)-1]
	start := time.Now()
	g.updateNetwork(0, func(spec *v1alpha1.GridNetworkSpec) {
		spec.TLS.SiteCertificate.EvictedSites = []string{victim.Name}
	})
	refused, withdrawn := map[int]time.Duration{}, map[int]time.Duration{}
	others := len(g.sites) - 1
	g.await("every site refuses the evicted one and withdraws its provider", 2*time.Minute, func() bool {
		for i := range others {
			if _, ok := refused[i]; !ok {
				if tb := g.network(i).Status.TrustBundle; tb != nil && slices.Contains(tb.EvictedSites, victim.Name) {
					refused[i] = time.Since(start)
				}
			}
			if _, ok := withdrawn[i]; !ok && !g.routes(i, victim) {
				withdrawn[i] = time.Since(start)
			}
		}
		return len(refused) == others && len(withdrawn) == others
	})
	fmt.Printf("evict sites=%d refused_everywhere_ms=%d providers_withdrawn_ms=%d\n", len(g.sites),
		slices.Max(durations(refused)).Milliseconds(), slices.Max(durations(withdrawn)).Milliseconds())
}

func durations(m map[int]time.Duration) []time.Duration {
	out := make([]time.Duration, 0, len(m))
	for _, d := range m {
		out = append(out, d)
	}
	return out
}
