// Package trust measures site trust: the agent's controller, with its
// chart's RBAC, on a real kube-apiserver, probing N remote sites' gateways
// (Go TLS servers on loopback with certificates from the grid CA the agent
// generated) over mutual TLS. Run it with `make bench`; it prints
//
//	trust sites=<N> probe_p50_ms=<> probe_p99_ms=<> active_after_ms=<>
//	trust-demote sites=<N> probe_interval_ms=<> demoted_after_ms=<>
//
// probe_* is one probe (connect, handshake, the gateway's verdict on the
// client certificate), 10 rounds over every site, one at a time.
// active_after_ms is the worst, over the N sites, of the time from the
// write that gives a GridSite its address to the GridSite being Active.
// demoted_after_ms is the worst time from every gateway presenting an
// unpinned leaf to its GridSite leaving Active.
package trust

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gridsync/gridsync/api/v1alpha1"
	"github.com/gridsync/gridsync/controller"
	"github.com/gridsync/gridsync/controller/probe"
	"github.com/gridsync/gridsync/test/controlplane"
	"github.com/gridsync/gridsync/test/framework"
	"github.com/gridsync/gridsync/test/measure"
	"github.com/gridsync/gridsync/test/testgateway"
	"github.com/gridsync/gridsync/trust/sitetrust"
)

const (
	probeInterval = 2 * time.Second
	network       = "trust-bench"
)

// sites is how many remote gateways are probed.
var sites = measure.Size(50, 3)

var cp *controlplane.ControlPlane

func TestMain(m *testing.M) { framework.BenchMain(m, framework.ControlPlanes(&cp)) }

func BenchmarkTrust(b *testing.B) {
	for b.Loop() {
		runBench(b)
	}
}

func runBench(b *testing.B) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	// The agent's controller runs in this process, with the site's RBAC.
	s := framework.NewSite(b, cp, framework.SiteOptions{Prefix: "trust"})
	credNS, admin, cfg := s.Namespace(), s.Admin, s.Config
	measure.Must(b, cp.AgentTrustSecrets(ctx, s.AgentNS, credNS, "grid-ca", "site-cert"))

	measure.Must(b, admin.Create(ctx, &v1alpha1.GridNetwork{
		ObjectMeta: metav1.ObjectMeta{Name: network},
		Spec: v1alpha1.GridNetworkSpec{TLS: &v1alpha1.GridTLS{
			CASecretRef:   &v1alpha1.NamespacedName{Name: "grid-ca", Namespace: credNS},
			SiteSecretRef: &v1alpha1.NamespacedName{Name: "site-cert", Namespace: credNS},
		}},
	}))
	mgr, err := controller.NewManager(cfg, controller.ManagerOptions{Options: controller.Options{
		Namespaces: []string{credNS}, Logger: slog.New(slog.DiscardHandler),
		SiteName: "bench", SiteProbeInterval: probeInterval, SiteProbeTimeout: time.Second,
		// The benchmark's gateways listen on loopback.
		ProbeDestinations: probe.Destinations{AllowCIDRs: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}},
	}, SeveralPerProcess: true}) // the trust and enrolment benchmarks run in one process
	measure.Must(b, err)
	mctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- mgr.Start(mctx) }()
	defer func() {
		stop()
		if err := <-done; err != nil {
			b.Log(err)
		}
	}()

	// The grid CA the agent generated, and this site's identity.
	var caSecret, siteSecret corev1.Secret
	for admin.Get(ctx, types.NamespacedName{Namespace: credNS, Name: "site-cert"}, &siteSecret) != nil {
		time.Sleep(20 * time.Millisecond)
	}
	measure.Must(b, admin.Get(ctx, types.NamespacedName{Namespace: credNS, Name: "grid-ca"}, &caSecret))
	ca, err := sitetrust.ParseCA(caSecret.Data["tls.crt"], caSecret.Data["tls.key"])
	measure.Must(b, err)
	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert)
	client0, err := tls.X509KeyPair(siteSecret.Data["tls.crt"], siteSecret.Data["tls.key"])
	measure.Must(b, err)

	pins := make([]string, sites)
	present := func(i int, g *testgateway.Gateway) {
		chain, key, err := ca.Issue(fmt.Sprintf("site-%d", i), time.Now(), time.Hour)
		measure.Must(b, err)
		pair, err := tls.X509KeyPair(chain, key)
		measure.Must(b, err)
		g.Present(pair, roots)
		pins[i] = sitetrust.Fingerprint(pair.Certificate[0])
	}
	gws := make([]*testgateway.Gateway, sites)
	for i := range gws {
		site := fmt.Sprintf("site-%d", i)
		gws[i], err = testgateway.Start("127.0.0.1:0")
		measure.Must(b, err)
		defer gws[i].Close()
		present(i, gws[i])
		measure.Must(b, admin.Create(ctx, &v1alpha1.GridSite{
			ObjectMeta: metav1.ObjectMeta{Name: network + "-" + site},
			Spec: v1alpha1.GridSiteSpec{
				GridNetworkRef:  network,
				GatewayEndpoint: &v1alpha1.GatewayEndpoint{TLS: &v1alpha1.GatewayTLS{Mode: "Mutual", ServerName: sitetrust.DNSName(site)}},
				Trust:           &v1alpha1.SiteTrust{CanonicalFingerprints: []string{pins[i]}},
			},
		}))
	}

	// One probe, one site at a time.
	var probes []time.Duration
	for range 10 {
		for i, g := range gws {
			start := time.Now()
			o := sitetrust.Probe(ctx, sitetrust.Target{Address: g.Addr, ServerName: sitetrust.DNSName(fmt.Sprintf("site-%d", i)), Roots: roots,
				Client: client0, Pins: []string{pins[i]}, Timeout: time.Second})
			probes = append(probes, time.Since(start))
			if o.Kind != sitetrust.Verified {
				b.Fatalf("probe of site-%d: %s: %s", i, o.Reason, o.Message)
			}
		}
	}

	// Every GridSite Discovered (no address) before the addresses arrive.
	rv := awaitPhases(ctx, b, admin, func(p v1alpha1.SitePhase) bool { return p == sitetrust.PhaseDiscovered })
	w := &siteWatch{ctx: ctx, admin: admin, rv: rv}
	defer w.stop()
	addressed := make([]time.Time, sites)
	errs := make([]error, sites)
	var wg sync.WaitGroup
	for i := range gws {
		wg.Go(func() {
			patch := fmt.Sprintf(`{"spec":{"gatewayEndpoint":{"address":%q}}}`, gws[i].Addr)
			errs[i] = admin.Patch(ctx, &v1alpha1.GridSite{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-site-%d", network, i)}},
				client.RawPatch(types.MergePatchType, []byte(patch)))
			addressed[i] = time.Now()
		})
	}
	activeAt := until(b, w, func(p v1alpha1.SitePhase) bool { return p == sitetrust.PhaseActive })
	wg.Wait()
	for _, err := range errs {
		measure.Must(b, err)
	}
	var worst time.Duration
	for name, at := range activeAt {
		var i int
		_, _ = fmt.Sscanf(name, network+"-site-%d", &i)
		worst = max(worst, at.Sub(addressed[i]))
	}

	// Every gateway presents an unpinned leaf at once.
	swapped := time.Now()
	for i, g := range gws {
		present(i, g) // a new leaf: outside the pin
	}
	demotedAt := until(b, w, func(p v1alpha1.SitePhase) bool { return p == sitetrust.PhaseConnecting })
	var demoted time.Duration
	for _, at := range demotedAt {
		demoted = max(demoted, at.Sub(swapped))
	}

	slices.Sort(probes)
	fmt.Printf("trust sites=%d probe_p50_ms=%.1f probe_p99_ms=%.1f active_after_ms=%.0f\n", sites,
		measure.Millis(probes[len(probes)/2]), measure.Millis(probes[len(probes)*99/100]), measure.Millis(worst))
	fmt.Printf("trust-demote sites=%d probe_interval_ms=%.0f demoted_after_ms=%.0f\n", sites, measure.Millis(probeInterval), measure.Millis(demoted))
	measure.Must(b, admin.DeleteAllOf(ctx, &v1alpha1.GridSite{}))
}

// siteWatch follows GridSites from a resource version, opening the watch
// again from the last event seen when the API server ends it (as it may
// at any time; a reflector does the same), so that no change is missed.
type siteWatch struct {
	ctx   context.Context
	admin client.WithWatch
	rv    string
	w     watch.Interface
}

func (s *siteWatch) next(b *testing.B, deadline <-chan time.Time) *v1alpha1.GridSite {
	for {
		if s.w == nil {
			w, err := s.admin.Watch(s.ctx, &v1alpha1.GridSiteList{}, &client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: s.rv}})
			measure.Must(b, err)
			s.w = w
		}
		select {
		case ev, open := <-s.w.ResultChan():
			if !open {
				s.w = nil
				continue
			}
			gs, isSite := ev.Object.(*v1alpha1.GridSite)
			if !isSite {
				b.Fatalf("the watch of GridSites said %s: %v", ev.Type, ev.Object)
			}
			s.rv = gs.ResourceVersion
			return gs
		case <-deadline:
			return nil
		}
	}
}

func (s *siteWatch) stop() {
	if s.w != nil {
		s.w.Stop()
	}
}

// until follows the watch until every site's phase satisfies ok, and
// returns when each first did.
func until(b *testing.B, w *siteWatch, ok func(v1alpha1.SitePhase) bool) map[string]time.Time {
	at := map[string]time.Time{}
	deadline := time.After(2 * time.Minute)
	for len(at) < sites {
		gs := w.next(b, deadline)
		if gs == nil {
			b.Fatalf("only %d of %d sites got there", len(at), sites)
		}
		if _, seen := at[gs.Name]; !seen && ok(gs.Status.Phase) {
			at[gs.Name] = time.Now()
		}
	}
	return at
}

// awaitPhases waits until every site's phase satisfies ok and returns
// the list's resource version.
func awaitPhases(ctx context.Context, b *testing.B, admin client.Client, ok func(v1alpha1.SitePhase) bool) string {
	deadline := time.Now().Add(2 * time.Minute)
	for {
		var list v1alpha1.GridSiteList
		measure.Must(b, admin.List(ctx, &list))
		n := 0
		for _, gs := range list.Items {
			if ok(gs.Status.Phase) {
				n++
			}
		}
		if n == sites {
			return list.ResourceVersion
		}
		if time.Now().After(deadline) {
			b.Fatalf("%d of %d sites ready", n, sites)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
