package multisite

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
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
	"github.com/gridsync/gridsync/test/controlplane"
	"github.com/gridsync/gridsync/test/framework"
	"github.com/gridsync/gridsync/test/testbin"
	"github.com/gridsync/gridsync/test/testgateway"
	"github.com/gridsync/gridsync/test/testproc"
	"github.com/gridsync/gridsync/trust/sitetrust"
)

func (s *site) secretData(name string) map[string][]byte {
	var sec corev1.Secret
	if err := s.Admin.Get(context.Background(), types.NamespacedName{Namespace: s.Namespace(), Name: name}, &sec); err != nil {
		return nil
	}
	return sec.Data
}

func (s *site) waitSecret(name string, ok func(map[string][]byte) bool) map[string][]byte {
	s.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if d := s.secretData(name); d != nil && ok(d) {
			return d
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("%s: Secret %s never came", s.Name, name)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (s *site) trustNetwork(name string, seeds ...string) {
	s.t.Helper()
	n := &v1alpha1.GridNetwork{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"grid.praxis.fast/auto-discover-sites": "true"}},
		Spec: v1alpha1.GridNetworkSpec{
			Seeds:            seeds,
			ConsumerGateways: []v1alpha1.ConsumerGateway{{Name: "edge", Namespace: s.Namespace(), SiteName: s.Name}},
			TLS: &v1alpha1.GridTLS{
				SwimKeySecretRef: &v1alpha1.NamespacedKeyRef{Name: "swim-key", Namespace: s.Namespace()},
				CASecretRef:      &v1alpha1.NamespacedName{Name: "grid-ca", Namespace: s.Namespace()},
				SiteSecretRef:    &v1alpha1.NamespacedName{Name: "site-cert", Namespace: s.Namespace()},
			},
		},
	}
	require.NoError(s.t, s.Admin.Create(context.Background(), n))
	s.t.Cleanup(func() { s.remove(n) })
}

func (s *site) gridSite(name, what string, ok func(*v1alpha1.GridSite) bool) *v1alpha1.GridSite {
	s.t.Helper()
	var gs v1alpha1.GridSite
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := s.Admin.Get(context.Background(), types.NamespacedName{Name: name}, &gs)
		if err == nil && ok(&gs) {
			return &gs
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("%s: GridSite %s never %s: %s/%s: %s (%v)", s.Name, name, what, gs.Status.Phase, gs.Status.Reason, gs.Status.Message, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// overlayFile is the gateway's routing overlay as the sidecar delivered it.
type overlayFile struct{ path string }

func (f overlayFile) sites(t *testing.T) []string {
	b, err := os.ReadFile(f.path)
	if err != nil {
		return nil
	}
	var doc struct {
		Overlay envelope.Overlay `json:"overlay"`
	}
	require.NoError(t, json.Unmarshal(b, &doc))
	var out []string
	for _, c := range doc.Overlay.Candidates {
		out = append(out, c.Site+"/"+c.Name)
	}
	slices.Sort(out)
	return out
}

func (f overlayFile) await(t *testing.T, what string, want ...string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !slices.Equal(f.sites(t), want) {
		if time.Now().After(deadline) {
			t.Fatalf("the gateway's file never held %s: it holds %v", what, f.sites(t))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Three sites, each an agent on its own cluster: A generates the grid CA,
// which reaches B and C out of band; each agent issues its own site
// certificate. A's gateway (through the real sidecar's file) gets C's
// provider only once C's GridSite passed the mutual-TLS probe with the pin
// an operator took from C's cluster, never B's (gossip alone), and loses
// it again when C's gateway presents a reissued leaf outside the pins. No
// private key reaches a status, an Event or a log of any site.
func TestSiteTrustAcrossThreeSites(t *testing.T) {
	ctx := context.Background()
	key := newKey(t)
	var sites []*site
	for i, name := range []string{"site-a", "site-b", "site-c"} {
		s := newSite(t, clusters[i], name)
		s.secret("swim-key", map[string][]byte{"key": key})
		require.NoError(t, s.CP.AgentTrustSecrets(ctx, s.AgentNS, s.Namespace(), "grid-ca", "site-cert"))
		sites = append(sites, s)
	}
	a, b, c := sites[0], sites[1], sites[2]
	trustFlags := []string{"--site-probe-interval", "1s", "--site-probe-timeout", "1s"}

	// A's gateway: the real sidecar, reading A's overlay ConfigMap.
	configMap := envelope.ConfigMapName("trust", "edge")
	reader, err := a.CP.ConfigMapReaderConfig(ctx, a.Namespace(), "gateway", configMap)
	require.NoError(t, err)
	readerKube := filepath.Join(t.TempDir(), "kubeconfig")
	require.NoError(t, controlplane.WriteKubeconfig(reader, readerKube))
	file := overlayFile{path: filepath.Join(t.TempDir(), "routing-overlay.json")}
	testproc.Start(t, framework.Bin(testbin.Sidecar), nil, "--kubeconfig", readerKube, "--namespace", a.Namespace(), "--config-map", configMap,
		"--output", file.path, "--expected-network", "trust", "--expected-gateway", "edge", "--expected-local-site", a.Name,
		"--health-addr", testproc.FreeAddr(t))

	a.trustNetwork("trust")
	a.provider("prov-a", "trust", "model-a")
	agents := []*agent{a.start(nil, trustFlags...)}
	caData := a.waitSecret("grid-ca", func(map[string][]byte) bool { return true })
	for _, s := range []*site{b, c} {
		s.secret("grid-ca", caData) // out of band: the agent never copies Secrets
	}
	b.trustNetwork("trust", a.SwimAddr)
	c.trustNetwork("trust", b.SwimAddr)
	b.provider("prov-b", "trust", "model-b")
	c.provider("prov-c", "trust", "model-c")
	agents = append(agents, b.start(nil, trustFlags...), c.start(nil, trustFlags...))

	gateways := map[string]*testgateway.Gateway{}
	pins := map[string]string{}
	var keys [][]byte
	for _, s := range sites {
		data := s.waitSecret("site-cert", func(d map[string][]byte) bool { return len(d["tls.key"]) > 0 })
		g, err := testgateway.Start(s.gateway)
		require.NoError(t, err)
		t.Cleanup(g.Close)
		leaf, err := g.PresentSecret(data)
		require.NoError(t, err)
		require.NoError(t, sitetrust.CheckSVID(leaf, s.Name))
		pins[s.Name] = sitetrust.Fingerprint(leaf.Raw)
		gateways[s.Name] = g
		keys = append(keys, data["tls.key"])
	}
	keys = append(keys, caData["tls.key"])

	// Every site discovers the two others; nothing remote is routable yet.
	for _, s := range sites {
		s.networkStatus("trust", 30*time.Second, counts(v1alpha1.NetworkActive, 2, 2))
	}
	gsB, gsC := "trust-site-b", "trust-site-c"
	a.gridSite(gsC, "Connecting without pins", func(gs *v1alpha1.GridSite) bool {
		return gs.Status.Phase == sitetrust.PhaseConnecting && gs.Status.Reason == sitetrust.ReasonTrustMaterialMissing && gs.Status.PublicCertPem != ""
	})
	file.await(t, "A's provider only", "prov-a/model-a")

	// An operator pins C's gateway at A, the pin read from C's cluster.
	patch := fmt.Sprintf(`{"spec":{"gatewayEndpoint":{"tls":{"mode":"Mutual","serverName":"site-c.grid.internal"}},"trust":{"canonicalFingerprints":[%q]}}}`, pins["site-c"])
	require.NoError(t, a.Admin.Patch(ctx, &v1alpha1.GridSite{ObjectMeta: metav1.ObjectMeta{Name: gsC}}, client.RawPatch(types.MergePatchType, []byte(patch))))
	active := a.gridSite(gsC, "Active", func(gs *v1alpha1.GridSite) bool { return gs.Status.Phase == sitetrust.PhaseActive })
	assert.Equal(t, sitetrust.ReasonTLSVerified, active.Status.Reason)
	file.await(t, "C's provider beside A's", "prov-a/model-a", "site-c/model-c")
	// grid_sites counts the cluster's GridSites by phase (earlier tests'
	// sites of this cluster are kept, as evidence, and counted too).
	var all v1alpha1.GridSiteList
	require.NoError(t, a.Admin.List(ctx, &all))
	byPhase := map[v1alpha1.SitePhase]float64{}
	for _, gs := range all.Items {
		byPhase[gs.Status.Phase]++
	}
	require.Positive(t, byPhase[sitetrust.PhaseActive])
	for _, phase := range []v1alpha1.SitePhase{sitetrust.PhaseActive, sitetrust.PhaseConnecting} {
		assert.Equal(t, byPhase[phase], agents[0].metric(fmt.Sprintf("grid_sites{phase=%q}", phase)), "grid_sites of %s", phase)
	}
	assert.Equal(t, sitetrust.PhaseConnecting, a.gridSite(gsB, "known", func(*v1alpha1.GridSite) bool { return true }).Status.Phase,
		"B only gossiped: never routable")

	// C's site certificate is reissued (its Secret deleted: C's agent
	// issues a new one) and C's gateway presents it: outside A's pins.
	require.NoError(t, c.Admin.Delete(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "site-cert", Namespace: c.Namespace()}}))
	reissued := c.waitSecret("site-cert", func(d map[string][]byte) bool {
		l, err := sitetrust.ParseCertificates(d["tls.crt"])
		return err == nil && sitetrust.Fingerprint(l[0].Raw) != pins["site-c"]
	})
	keys = append(keys, reissued["tls.key"])
	_, err = gateways["site-c"].PresentSecret(reissued)
	require.NoError(t, err)
	a.gridSite(gsC, "PinMismatch", func(gs *v1alpha1.GridSite) bool {
		return gs.Status.Phase == sitetrust.PhaseConnecting && gs.Status.Reason == sitetrust.ReasonPinMismatch
	})
	file.await(t, "A's provider only again", "prov-a/model-a")

	// No private key anywhere a user or a peer reads.
	var haystack strings.Builder
	for _, ag := range agents {
		haystack.WriteString(ag.Log())
	}
	for _, s := range sites {
		var gsl v1alpha1.GridSiteList
		require.NoError(t, s.Admin.List(ctx, &gsl))
		var nl v1alpha1.GridNetworkList
		require.NoError(t, s.Admin.List(ctx, &nl))
		var el corev1.EventList
		require.NoError(t, s.Admin.List(ctx, &el, client.InNamespace(s.AgentNS)))
		fmt.Fprintf(&haystack, "%+v%+v%+v", gsl.Items, nl.Items, el.Items)
	}
	assert.NotContains(t, haystack.String(), "PRIVATE KEY")
	for _, k := range keys {
		body := strings.Split(strings.TrimSpace(string(k)), "\n")[1]
		assert.NotContains(t, haystack.String(), body)
	}
}
