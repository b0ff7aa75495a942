package controller_test

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gridsync/gridsync/api/v1alpha1"
	"github.com/gridsync/gridsync/controller"
	membership "github.com/gridsync/gridsync/gossip"
	"github.com/gridsync/gridsync/gossip/sites"
	"github.com/gridsync/gridsync/gossip/swimkeys"
	"github.com/gridsync/gridsync/shared/envelope"
	"github.com/gridsync/gridsync/test/testnet"
	"github.com/gridsync/gridsync/test/testpki"
	"github.com/gridsync/gridsync/test/testproc"
	"github.com/gridsync/gridsync/trust/sitetrust"
)

// A site's SWIM runtime on loopback with a fifth of the reference's
// timings: real memberlist, real encryption. Its port is chosen afresh
// at every start of its node unless cfg.BindAddr names one.
type swimSite struct {
	*membership.Runtime
	cancel context.CancelFunc
	done   chan struct{}
	logs   *testproc.Buffer
}

func startSwimSite(t *testing.T, site string, cfg membership.Config) *swimSite {
	t.Helper()
	logs := &testproc.Buffer{}
	cfg.Site = site
	if cfg.BindAddr == "" {
		cfg.BindAddr = "127.0.0.1:0"
	}
	cfg.ProbeInterval, cfg.ProbeTimeout, cfg.GossipInterval, cfg.PushPullInterval = time.Second, 600*time.Millisecond, 50*time.Millisecond, 2*time.Second
	cfg.Logger = slog.New(slog.NewJSONHandler(logs, nil))
	rt, err := membership.New(context.Background(), cfg)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	s := &swimSite{Runtime: rt, cancel: cancel, done: make(chan struct{}), logs: logs}
	go func() { defer close(s.done); _ = rt.Start(ctx) }()
	t.Cleanup(s.stop)
	return s
}

func (s *swimSite) stop() {
	s.cancel()
	<-s.done
}

// signsWith has the site sign a network's records with a site
// certificate the grid CA issues it now.
func (s *swimSite) signsWith(t *testing.T, network string, ca *sitetrust.CA) {
	t.Helper()
	chain, key, err := ca.Issue(s.Site(), time.Now(), time.Hour)
	require.NoError(t, err)
	pair, err := tls.X509KeyPair(chain, key)
	require.NoError(t, err)
	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert)
	s.SetIdentity(network, sites.Identity{Roots: roots, Signer: &pair})
}

func (s *swimSite) running(t *testing.T) *swimSite {
	t.Helper()
	require.Eventually(t, func() bool { return s.Status().Running }, 10*time.Second, 10*time.Millisecond)
	return s
}

// seedNames resolves the names the tests give seeds without asking DNS.
type seedNames map[string]string

func (n seedNames) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	if a, ok := n[host]; ok {
		return []netip.Addr{netip.MustParseAddr(a)}, nil
	}
	return nil, errors.New("no such host")
}

func withMembership(m *swimSite, names seedNames) agentOption {
	return func(o *controller.ManagerOptions) {
		o.Membership = m.Runtime
		o.SwimKeyPollInterval = 500 * time.Millisecond
		o.SeedResolver = names
	}
}

func swimKey(t *testing.T) []byte {
	k := make([]byte, swimkeys.Size)
	_, err := rand.Read(k)
	require.NoError(t, err)
	return k
}

// networkStatus waits until the network's status satisfies ok.
func (e *env) networkStatus(network *v1alpha1.GridNetwork, what string, ok func(*v1alpha1.GridNetwork) (bool, string)) *v1alpha1.GridNetwork {
	e.t.Helper()
	var got v1alpha1.GridNetwork
	e.eventually(what, func() (bool, string) {
		if err := e.admin.Get(e.ctx, client.ObjectKeyFromObject(network), &got); err != nil {
			return false, err.Error()
		}
		return ok(&got)
	})
	return &got
}

func condition(n *v1alpha1.GridNetwork, kind string) metav1.Condition {
	if c := meta.FindStatusCondition(n.Status.Conditions, kind); c != nil {
		return *c
	}
	return metav1.Condition{}
}

func phaseAndCounts(n *v1alpha1.GridNetwork) string {
	c := condition(n, controller.ConditionMembership)
	return fmt.Sprintf("%s connected=%d remote=%d %s: %s", n.Status.Phase, n.Status.ConnectedSites, n.Status.RemoteProviderCount, c.Reason, c.Message)
}

// A network joins another site through its seeds, encrypted with its key
// Secret: its status counts the alive site and its provider records, a
// GridSite is created for the discovered site with its gossiped gateway
// address and certificate, the other site learns this site's providers
// and certificate (never a key), an idle network writes nothing, and a
// site that dies turns the network Degraded.
func TestNetworkMembershipStatusAndGridSites(t *testing.T) {
	e := newEnv(t)
	key := swimKey(t)
	root := testpki.NewRoot(t, "grid-ca")
	certA, keyA := root.Leaf(t, "site-a", testpki.Opts{})
	certB, _ := root.Leaf(t, "site-b", testpki.Opts{})
	e.create(e.secret("swim-key", map[string][]byte{"key": key}))
	e.create(e.secret("site-cert", map[string][]byte{"tls.crt": certA, "tls.key": keyA}))

	gw := e.gateway("edge", "site-a")
	network := e.network(gw)
	network.Labels[controller.AutoDiscoverSitesLabel] = "true"
	network.Spec.TLS = &v1alpha1.GridTLS{
		SwimKeySecretRef: &v1alpha1.NamespacedKeyRef{Name: "swim-key", Namespace: e.credNS},
		SiteSecretRef:    &v1alpha1.NamespacedName{Name: "site-cert", Namespace: e.credNS},
	}

	remote := startSwimSite(t, "site-b", membership.Config{EnvKey: key}).running(t)
	remote.SetGatewayAddress("127.0.0.1:9443")
	// The network declares no grid CA: its records are not signed.
	remote.SetIdentity(network.Name, sites.Identity{Open: true})
	require.NoError(t, remote.Publish(network.Name, string(certB), []sites.Provider{
		{Name: "remote-1", Models: []string{"m1"}, Cluster: "b", Phase: "Available"},
		{Name: "remote-2", Models: []string{"m2"}, Cluster: "b", Phase: "Degraded"},
	}))
	network.Spec.Seeds = []string{"site-b.grid.test:" + portOf(remote.AdvertiseAddr())}
	e.create(network)
	local := e.provider("local", network.Name, "model-a")
	e.create(local)

	site := startSwimSite(t, "site-a", membership.Config{RequireKey: true})
	a := e.startAgent(withMembership(site, seedNames{"site-b.grid.test": "127.0.0.1"}))

	got := e.networkStatus(network, "Active with one site and its two providers", func(n *v1alpha1.GridNetwork) (bool, string) {
		return n.Status.Phase == v1alpha1.NetworkActive && n.Status.ConnectedSites == 1 && n.Status.RemoteProviderCount == 2, phaseAndCounts(n)
	})
	assert.Equal(t, metav1.ConditionTrue, condition(got, controller.ConditionMembership).Status)
	assert.True(t, site.Status().Encrypted)
	e.overlayOf(network, gw, func(r envelope.Result) bool { return r.CandidateCount == 1 })

	// The GridSite of the discovered site: address and certificate from
	// gossip, Connecting (never routable on gossip alone).
	var gs v1alpha1.GridSite
	e.eventually("GridSite of site-b", func() (bool, string) {
		if err := e.admin.Get(e.ctx, types.NamespacedName{Name: network.Name + "-site-b"}, &gs); err != nil {
			return false, err.Error()
		}
		return gs.Status.Phase == "Connecting" && gs.Status.PublicCertPem == string(certB), string(gs.Status.Phase) + "/" + gs.Status.Reason
	})
	t.Cleanup(func() { _ = e.admin.Delete(context.Background(), &gs) })
	assert.Equal(t, network.Name, gs.Spec.GridNetworkRef)
	require.NotNil(t, gs.Spec.GatewayEndpoint)
	assert.Equal(t, "127.0.0.1:9443", gs.Spec.GatewayEndpoint.Address)
	assert.Equal(t, sitetrust.ReasonTrustMaterialMissing, gs.Status.Reason, "no grid CA configured: never routable")

	// The other site learns this one's provider and public certificate.
	require.Eventually(t, func() bool {
		v := remote.View(network.Name)
		return len(v.Providers) == 1 && v.Providers[0].Name == local.Name && len(v.Sites) == 1 && v.Sites[0].CertPEM == string(certA)
	}, 10*time.Second, 20*time.Millisecond)
	assert.NotContains(t, remote.logs.String()+site.logs.String()+e.logs.String(), "PRIVATE KEY")

	// Idle: no write for a few seconds, gossip going on. The writes of
	// what was just learnt settle first (a quiet second), so that a late
	// one of them is not taken for an idle write.
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
		before := a.requests.count()
		time.Sleep(time.Second)
		if len(a.requests.since(before)) == 0 {
			break
		}
	}
	start := a.requests.count()
	time.Sleep(4 * time.Second)
	assert.Empty(t, a.requests.since(start), "an idle network with membership writes nothing")

	// A record that changes at the remote site reaches the status.
	require.NoError(t, remote.Publish(network.Name, string(certB), []sites.Provider{{Name: "remote-1", Models: []string{"m1"}, Cluster: "b", Phase: "Available"}}))
	e.networkStatus(network, "one remote provider", func(n *v1alpha1.GridNetwork) (bool, string) {
		return n.Status.RemoteProviderCount == 1, phaseAndCounts(n)
	})

	// The remote site dies: suspect, then dead; the network is Degraded,
	// its records kept (stale) until the TTL.
	remote.Vanish()
	remote.stop()
	got = e.networkStatus(network, "Degraded", func(n *v1alpha1.GridNetwork) (bool, string) {
		return n.Status.Phase == v1alpha1.NetworkDegraded && n.Status.ConnectedSites == 0, phaseAndCounts(n)
	})
	assert.Equal(t, int32(1), got.Status.RemoteProviderCount, "a dead site's records are kept, stale, until the TTL")
	require.NoError(t, e.admin.Get(e.ctx, client.ObjectKeyFromObject(&gs), &gs), "a departed site is never deleted")
}

// A SWIM key Secret that is missing, short or unreadable stops the
// network's reconcile with the reason in its status: nothing is announced
// or published and the overlays keep what they had. Once the Secret is
// right, the network goes on, encrypted.
func TestSwimKeyProblemsStopTheNetwork(t *testing.T) {
	e := newEnv(t)
	gw := e.gateway("edge", "site-a")
	network := e.network(gw)
	e.create(network)
	p := e.provider("local", network.Name, "model-a")
	e.create(p)
	site := startSwimSite(t, "site-a", membership.Config{RequireKey: true})
	e.startAgent(withMembership(site, nil))
	e.overlayOf(network, gw, func(r envelope.Result) bool { return r.CandidateCount == 1 })
	require.Eventually(t, func() bool { st := site.Status(); return st.Running && !st.Encrypted }, 10*time.Second, 20*time.Millisecond,
		"a network that declares no key releases the hold to the clear")

	update(e, network, func(n *v1alpha1.GridNetwork) {
		n.Spec.TLS = &v1alpha1.GridTLS{SwimKeySecretRef: &v1alpha1.NamespacedKeyRef{Name: "swim-key", Namespace: e.credNS}}
	})
	got := e.networkStatus(network, "SwimKeyMissing", func(n *v1alpha1.GridNetwork) (bool, string) {
		c := condition(n, "Ready")
		return c.Reason == controller.ReasonSwimKeyMissing && c.ObservedGeneration == n.Generation, c.Reason + ": " + c.Message
	})
	assert.Contains(t, condition(got, "Ready").Message, "spec.tls.swimKeySecretRef")
	assert.Equal(t, metav1.ConditionFalse, condition(got, controller.ConditionMembership).Status)
	_, before := e.overlayOf(network, gw, anyRevision)

	// The reconcile stops at the key: a provider change is not published.
	update(e, p, func(p *v1alpha1.InferenceProvider) {
		p.Spec.Models = append(p.Spec.Models, v1alpha1.Model{Name: "model-b"})
	})
	time.Sleep(3 * time.Second)
	_, after := e.overlayOf(network, gw, anyRevision)
	assert.Equal(t, before.Revision, after.Revision, "the overlay keeps what it had")

	e.create(e.secret("swim-key", map[string][]byte{"key": []byte("too short")}))
	got = e.networkStatus(network, "SwimKeyInvalid", func(n *v1alpha1.GridNetwork) (bool, string) {
		c := condition(n, "Ready")
		return c.Reason == controller.ReasonSwimKeyInvalid, c.Reason + ": " + c.Message
	})
	assert.Contains(t, condition(got, "Ready").Message, "9 bytes")
	assert.NotContains(t, e.logs.String(), "too short", "a key's bytes are never logged")

	update(e, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "swim-key", Namespace: e.credNS}}, func(s *corev1.Secret) {
		s.Data = map[string][]byte{"key": swimKey(t)}
	})
	e.networkStatus(network, "Ready again", func(n *v1alpha1.GridNetwork) (bool, string) {
		c := condition(n, "Ready")
		return c.Status == metav1.ConditionTrue, c.Reason + ": " + c.Message
	})
	e.overlayOf(network, gw, func(r envelope.Result) bool { return r.CandidateCount == 2 })
	require.Eventually(t, func() bool { st := site.Status(); return st.Running && st.Encrypted }, 10*time.Second, 20*time.Millisecond,
		"the key ends the clear")
}

// Seeds that do not resolve are skipped and named; a seed of another grid
// is refused and said.
func TestSeedProblemsAndGridIDConflict(t *testing.T) {
	e := newEnv(t)
	key := swimKey(t)
	// Grid IDs that never give way, as for grids formed long ago.
	const settled = time.Nanosecond
	friend := startSwimSite(t, "site-f", membership.Config{EnvKey: key, GridIDSettle: settled}).running(t)
	friend.SetIdentity("elsewhere", sites.Identity{Open: true})
	require.NoError(t, friend.Publish("elsewhere", "", nil))
	network := e.network(e.gateway("edge", "site-a"))
	network.Spec.Seeds = []string{"127.0.0.1:" + portOf(friend.AdvertiseAddr()), "nowhere.grid.test:7946", "not an address"}
	e.create(network)
	site := startSwimSite(t, "site-a", membership.Config{EnvKey: key, GridIDSettle: settled})
	e.startAgent(withMembership(site, seedNames{}))

	got := e.networkStatus(network, "joined, bad seeds named", func(n *v1alpha1.GridNetwork) (bool, string) {
		c := condition(n, controller.ConditionMembership)
		return strings.Contains(c.Message, "nowhere.grid.test") && site.GridID() != "", c.Reason + ": " + c.Message
	})
	assert.Contains(t, condition(got, controller.ConditionMembership).Message, "not an address")

	// Two sites that formed another grid.
	x := startSwimSite(t, "site-x", membership.Config{EnvKey: key, GridIDSettle: settled}).running(t)
	y := startSwimSite(t, "site-y", membership.Config{EnvKey: key, GridIDSettle: settled}).running(t)
	require.Empty(t, y.AnnounceSeeds("other", []string{x.AdvertiseAddr()}).Failed)
	require.Eventually(t, func() bool { return x.GridID() != "" && x.GridID() == y.GridID() }, 10*time.Second, 20*time.Millisecond)
	require.NotEqual(t, site.GridID(), x.GridID())

	update(e, network, func(n *v1alpha1.GridNetwork) {
		n.Spec.Seeds = append(n.Spec.Seeds, x.AdvertiseAddr())
	})
	got = e.networkStatus(network, "GridIdConflict", func(n *v1alpha1.GridNetwork) (bool, string) {
		c := condition(n, controller.ConditionMembership)
		return c.Reason == controller.ReasonGridIDConflict, c.Reason + ": " + c.Message
	})
	assert.Equal(t, metav1.ConditionFalse, condition(got, controller.ConditionMembership).Status)
	for _, m := range site.Status().Members {
		assert.NotEqual(t, "site-x", m.Site)
	}
}

func portOf(addr string) string {
	return addr[strings.LastIndex(addr, ":")+1:]
}

// A seed that accepts a connection and never answers, and many seeds that
// do not resolve, cost other networks nothing: a new gateway on another
// network is distributed at once (the first round measured 9.56 s, held
// behind memberlist's TCP timeout), and each bad seed is logged once, not
// at every reconcile.
func TestBadSeedsHoldNoOtherNetwork(t *testing.T) {
	e := newEnv(t)
	silent := testnet.Silent(t)
	quiet := e.network(e.gateway("quiet-edge", "site-a"))
	quiet.Name += "-quiet"
	quiet.Spec.Seeds = []string{silent.Addr()}
	for i := range 40 {
		quiet.Spec.Seeds = append(quiet.Spec.Seeds, fmt.Sprintf("nowhere-%d.grid.test:7946", i))
	}
	e.create(quiet)
	busy := e.network(e.gateway("edge", "site-a"))
	e.create(busy)
	site := startSwimSite(t, "site-a", membership.Config{})
	e.startAgent(withMembership(site, seedNames{}), func(o *controller.ManagerOptions) { o.ResyncPeriod = time.Second })
	e.overlayOf(busy, busy.Spec.ConsumerGateways[0], anyRevision)

	// The quiet network is reconciled again and again meanwhile (its
	// resync is a second); the busy one gets a gateway.
	time.Sleep(3 * time.Second)
	start := time.Now()
	added := e.gateway("edge-2", "site-a")
	update(e, busy, func(n *v1alpha1.GridNetwork) { n.Spec.ConsumerGateways = append(n.Spec.ConsumerGateways, added) })
	e.overlayOf(busy, added, anyRevision)
	took := time.Since(start)
	t.Logf("new_gateway_distributed_ms=%d", took.Milliseconds())
	assert.Less(t, took, 2*time.Second)

	logs := e.logs.String()
	assert.Equal(t, 40, strings.Count(logs, `"swim_seed_skipped"`), "each unresolvable seed once")
	assert.LessOrEqual(t, strings.Count(logs, `"swim_seed_join_failed"`), 1)
}

// A remote site that changes its providers and changes them back at once
// has the network's status follow every change, however far the agent's
// cache lags its own status writes: the second write is never skipped as
// equal to the stale cached copy (which would leave the first change in
// the status until the next resync, here far beyond the test).
func TestNetworkStatusFollowsChangeAndUndo(t *testing.T) {
	e := newEnv(t)
	key := swimKey(t)
	e.create(e.secret("swim-key", map[string][]byte{"key": key}))
	network := e.network(e.gateway("edge", "site-a"))
	network.Spec.TLS = &v1alpha1.GridTLS{SwimKeySecretRef: &v1alpha1.NamespacedKeyRef{Name: "swim-key", Namespace: e.credNS}}
	remote := startSwimSite(t, "site-b", membership.Config{EnvKey: key}).running(t)
	remote.SetIdentity(network.Name, sites.Identity{Open: true})
	one := []sites.Provider{{Name: "remote-1", Models: []string{"m1"}, Cluster: "b", Phase: "Available"}}
	two := append(slices.Clone(one), sites.Provider{Name: "remote-2", Models: []string{"m2"}, Cluster: "b", Phase: "Available"})
	require.NoError(t, remote.Publish(network.Name, "", one))
	network.Spec.Seeds = []string{"site-b.grid.test:" + portOf(remote.AdvertiseAddr())}
	e.create(network)
	site := startSwimSite(t, "site-a", membership.Config{RequireKey: true})
	e.startAgent(withMembership(site, seedNames{"site-b.grid.test": "127.0.0.1"}), func(o *controller.ManagerOptions) { o.ResyncPeriod = time.Hour })
	e.networkStatus(network, "one remote provider", func(n *v1alpha1.GridNetwork) (bool, string) {
		return n.Status.RemoteProviderCount == 1, phaseAndCounts(n)
	})

	// Each change is published as soon as the API server shows the one
	// before it, often before the agent's cache does.
	for i := range 30 {
		want := one
		if i%2 == 0 {
			want = two
		}
		require.NoError(t, remote.Publish(network.Name, "", want))
		// A lost change is never made up for (the resync is an hour
		// away); a loaded machine (the whole suite beside it, under the
		// race detector) once took past 5 s for one.
		deadline := time.Now().Add(15 * time.Second)
		for {
			var got v1alpha1.GridNetwork
			require.NoError(t, e.admin.Get(e.ctx, client.ObjectKeyFromObject(network), &got))
			if got.Status.RemoteProviderCount == int32(len(want)) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("change %d: the status still says %d remote providers 15 s after the site announced %d", i, got.Status.RemoteProviderCount, len(want))
			}
			time.Sleep(2 * time.Millisecond)
		}
	}
}
