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
	"io"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"

	"github.com/gridsync/gridsync/api/v1alpha1"
	"github.com/gridsync/gridsync/controller"
	"github.com/gridsync/gridsync/controller/rbac"
	"github.com/gridsync/gridsync/internal/cli/rotateca"
	"github.com/gridsync/gridsync/shared/envelope"
	"github.com/gridsync/gridsync/test/controlplane"
	"github.com/gridsync/gridsync/test/framework"
	"github.com/gridsync/gridsync/test/measure"
	"github.com/gridsync/gridsync/test/testbin"
	"github.com/gridsync/gridsync/test/testgateway"
	"github.com/gridsync/gridsync/test/testpki"
	"github.com/gridsync/gridsync/test/testproc"
	"github.com/gridsync/gridsync/trust/enrol"
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

// grid is the sites of one benchmark run: site 0 the issuer, whose
// operator evicts and rotates; the others enrolled with it.
type grid struct {
	b       *testing.B
	ctx     context.Context
	network string
	sites   []*framework.Site
	agents  []*framework.Agent
	gws     []*testgateway.Gateway
}

// newGrid starts every site and waits until each is Active at every
// other and routes every other's provider. Site 0 generates the grid CA
// and serves enrolment on its signals listener; every other site holds
// the CA's certificate only and enrols with a one-time token, as the
// trust README describes.
func newGrid(b *testing.B, ctx context.Context, network string) *grid {
	g := &grid{b: b, ctx: ctx, network: network}
	swimKey := make([]byte, 32)
	_, _ = rand.Read(swimKey)
	issuerAddr := testproc.FreeAddr(b)
	var caPEM []byte
	var tokens *enrol.Tokens
	for i := range sites {
		s := framework.NewSite(b, cps[i], framework.SiteOptions{Prefix: "life", Name: fmt.Sprintf("site-%d", i), Swim: true})
		measure.Must(b, cps[i].AgentTrustSecrets(ctx, s.AgentNS, s.Namespace(), "grid-ca", "site-cert"))
		measure.Must(b, s.Admin.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "swim-key", Namespace: s.Namespace()}, Data: map[string][]byte{"key": swimKey}}))
		tlsSpec := &v1alpha1.GridTLS{
			SwimKeySecretRef: &v1alpha1.NamespacedKeyRef{Name: "swim-key", Namespace: s.Namespace()},
			SiteSecretRef:    &v1alpha1.NamespacedName{Name: "site-cert", Namespace: s.Namespace()},
		}
		var seeds, args []string
		files := testpki.NewProjection(b)
		if i == 0 {
			measure.Must(b, cps[i].Grant(ctx, s.AgentNS, controlplane.AgentServiceAccount, "gridsync-agent-enrollment", s.AgentNS, rbac.EnrollmentTokenRules(enrol.DefaultTokenSecret)))
			tlsSpec.CASecretRef = &v1alpha1.NamespacedName{Name: "grid-ca", Namespace: s.Namespace()}
			tlsSpec.SiteCertificate = &v1alpha1.SiteCertificate{Mode: v1alpha1.SiteCertificateIssuer}
			args = []string{"--signals-addr", issuerAddr, "--signals-cert", files.Path("tls.crt"), "--signals-key", files.Path("tls.key"), "--signals-ca", files.Path("ca.crt")}
			tokens = &enrol.Tokens{API: s.Admin, Namespace: s.AgentNS}
		} else {
			token, err := tokens.Add(ctx, network, s.Name, time.Hour, time.Now())
			measure.Must(b, err)
			measure.Must(b, s.Admin.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "enrol-token", Namespace: s.Namespace()}, Data: map[string][]byte{"token": []byte(token)}}))
			measure.Must(b, s.Admin.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "grid-ca", Namespace: s.Namespace()}, Data: map[string]string{"ca.crt": string(caPEM)}}))
			tlsSpec.CAConfigMapRef = &v1alpha1.NamespacedKeyRef{Name: "grid-ca", Namespace: s.Namespace()}
			tlsSpec.SiteCertificate = &v1alpha1.SiteCertificate{Mode: v1alpha1.SiteCertificateEnrolled,
				Issuer:                   &v1alpha1.EnrollmentIssuer{Address: issuerAddr, Site: g.sites[0].Name},
				EnrollmentTokenSecretRef: &v1alpha1.NamespacedKeyRef{Name: "enrol-token", Namespace: s.Namespace()}}
			seeds = []string{g.sites[0].SwimAddr}
		}
		measure.Must(b, s.Admin.Create(ctx, &v1alpha1.GridNetwork{
			ObjectMeta: metav1.ObjectMeta{Name: network, Labels: map[string]string{controller.AutoDiscoverSitesLabel: "true"}},
			Spec: v1alpha1.GridNetworkSpec{
				Seeds:            seeds,
				ConsumerGateways: []v1alpha1.ConsumerGateway{{Name: "edge", Namespace: s.Namespace(), SiteName: s.Name}},
				PeerTrust:        &v1alpha1.PeerTrust{Mode: "spiffe"},
				TLS:              tlsSpec,
			},
		}))
		measure.Must(b, s.Admin.Create(ctx, &v1alpha1.InferenceProvider{
			ObjectMeta: metav1.ObjectMeta{Name: network + "-" + s.Name},
			Spec: v1alpha1.InferenceProviderSpec{GridNetworkRef: network, ProviderKind: "vllm", BackendKind: "openai_compatible",
				Endpoint: "https://prov.invalid", ClusterName: s.Name, Models: []v1alpha1.Model{{Name: modelOf(s)}}},
		}))
		gw, err := testgateway.Start(testproc.FreeAddr(b))
		measure.Must(b, err)
		b.Cleanup(gw.Close)
		g.sites, g.gws = append(g.sites, s), append(g.gws, gw)
		g.agents = append(g.agents, s.StartAgent(b, framework.AgentOptions{Timings: framework.Fast, Loopback: true,
			Args: append([]string{"--gateway-address", gw.Addr}, args...)}))
		go g.present(i, files)
		if i == 0 {
			g.await("the issuer's grid CA", time.Minute, func() bool {
				var sec corev1.Secret
				if s.Admin.Get(ctx, types.NamespacedName{Namespace: s.Namespace(), Name: "grid-ca"}, &sec) != nil {
					return false
				}
				caPEM = sec.Data["ca.crt"]
				return len(caPEM) > 0
			})
		}
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

// modelOf is the model a site's provider serves.
func modelOf(s *framework.Site) string { return "model-" + s.Name }

// present has site i's gateway present its site certificate and trust
// its CAs as they change, as a gateway that mounts the site Secret does;
// the files (the issuer's listener reads them) hold them too.
func (g *grid) present(i int, files *testpki.Projection) {
	s := g.sites[i]
	var last []byte
	for g.ctx.Err() == nil {
		var sec corev1.Secret
		if s.Admin.Get(g.ctx, types.NamespacedName{Namespace: s.Namespace(), Name: "site-cert"}, &sec) == nil && len(sec.Data["tls.key"]) > 0 {
			if now := append(slices.Clip(sec.Data["tls.crt"]), sec.Data["ca.crt"]...); !bytes.Equal(now, last) {
				files.Publish(map[string][]byte{"tls.crt": sec.Data["tls.crt"], "tls.key": sec.Data["tls.key"], "ca.crt": sec.Data["ca.crt"]})
				if _, err := g.gws[i].PresentSecret(sec.Data); err == nil {
					last = now
				}
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
	if s.Admin.Get(g.ctx, types.NamespacedName{Namespace: s.Namespace(), Name: envelope.ConfigMapName(g.network, "edge")}, &cm) != nil {
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

// networkAt is site i's GridNetwork.
func (g *grid) networkAt(i int) *v1alpha1.GridNetwork {
	var n v1alpha1.GridNetwork
	_ = g.sites[i].Admin.Get(g.ctx, types.NamespacedName{Name: g.network}, &n)
	return &n
}

// updateNetwork edits site i's GridNetwork spec.
func (g *grid) updateNetwork(i int, edit func(*v1alpha1.GridNetworkSpec)) {
	measure.Must(g.b, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n := g.networkAt(i)
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
	g := newGrid(b, ctx, "evict")
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
				if tb := g.networkAt(i).Status.TrustBundle; tb != nil && slices.Contains(tb.EvictedSites, victim.Name) {
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

// BenchmarkRotate measures a rotation of the grid CA across the grid,
// while the sites probe each other and gossip: from the issuer's operator
// adding the new CA (switching to it as soon as every site trusts it) to
// the last site holding a certificate of it; then the old CA is retired.
// trust_gaps counts what the rotation made any site refuse, from the add
// to the end of the retirement: a GridSite leaving Active, a record
// refused for its certificate. It prints
//
//	rotate sites=10 completed_ms=<> trust_gaps=<> trusted_everywhere_ms=<the new CA trusted by every site>
func BenchmarkRotate(b *testing.B) {
	for b.Loop() {
		runRotate(b)
	}
}

func runRotate(b *testing.B) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	g := newGrid(b, ctx, "rotate")
	before := g.gaps()
	start := time.Now()
	measure.Must(b, rotateca.Run(ctx, g.sites[0].Admin, rotateca.Options{Network: g.network, Stage: rotateca.StageAdd, Out: io.Discard, Poll: 20 * time.Millisecond}))
	trusted := time.Since(start)
	measure.Must(b, rotateca.Run(ctx, g.sites[0].Admin, rotateca.Options{Network: g.network, Stage: rotateca.StageSwitch, Out: io.Discard, Poll: 20 * time.Millisecond}))
	newCA := g.networkAt(0).Status.TrustBundle.Rotation.NewCA
	g.await("every site renewed under the new CA", 2*time.Minute, func() bool {
		for _, s := range g.sites {
			var sec corev1.Secret
			if s.Admin.Get(ctx, types.NamespacedName{Namespace: s.Namespace(), Name: "site-cert"}, &sec) != nil || !issuedBy(sec.Data["tls.crt"], sec.Data["ca.crt"], newCA) {
				return false
			}
		}
		return true
	})
	completed := time.Since(start)
	measure.Must(b, rotateca.Run(ctx, g.sites[0].Admin, rotateca.Options{Network: g.network, Stage: rotateca.StageRetire, Out: io.Discard, Poll: 20 * time.Millisecond}))
	for i := range g.sites {
		g.await("every site trusts the new CA alone", time.Minute, func() bool {
			tb := g.networkAt(i).Status.TrustBundle
			return tb != nil && slices.Equal(tb.Roots, []string{newCA})
		})
	}
	// Refusals are counted by the agents; a second for the last ones.
	time.Sleep(time.Second)
	fmt.Printf("rotate sites=%d completed_ms=%d trust_gaps=%d trusted_everywhere_ms=%d\n", len(g.sites), completed.Milliseconds(), g.gaps()-before, trusted.Milliseconds())
}

// gaps sums, over every agent, the GridSites that left Active and the
// records refused for their certificate.
func (g *grid) gaps() int {
	total := 0.0
	for _, a := range g.agents {
		_, body := testproc.Get(g.b, "http://"+a.Health+"/metrics")
		for _, line := range strings.Split(body, "\n") {
			if strings.HasPrefix(line, "grid_site_phase_transition_total{") && strings.Contains(line, `from_phase="Active"`) ||
				strings.HasPrefix(line, `grid_swim_records_rejected_total{reason="untrusted_certificate"}`) {
				f := strings.Fields(line)
				v, _ := strconv.ParseFloat(f[len(f)-1], 64)
				total += v
			}
		}
	}
	return int(total)
}

// issuedBy says whether the leaf of chainPEM was issued by the CA of
// caPEM whose fingerprint is ca.
func issuedBy(chainPEM, caPEM []byte, ca string) bool {
	certs, err := sitetrust.ParseCertificates(chainPEM)
	if err != nil {
		return false
	}
	roots, err := sitetrust.ParseCertificates(caPEM)
	if err != nil {
		return false
	}
	for _, r := range roots {
		if sitetrust.Fingerprint(r.Raw) == ca && certs[0].CheckSignatureFrom(r) == nil {
			return true
		}
	}
	return false
}
