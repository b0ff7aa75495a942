package multisite

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"net"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gridsync/gridsync/api/v1alpha1"
	"github.com/gridsync/gridsync/controller"
	"github.com/gridsync/gridsync/gossip/sites"
	"github.com/gridsync/gridsync/gossip/swimkeys"
	"github.com/gridsync/gridsync/test/controlplane"
	"github.com/gridsync/gridsync/test/testnet"
	"github.com/gridsync/gridsync/test/testpki"
)

func newKey(t *testing.T) []byte {
	k := make([]byte, swimkeys.Size)
	_, err := rand.Read(k)
	require.NoError(t, err)
	return k
}

// threeSites prepares sites A, B and C on three clusters, each with the
// SWIM key and its own certificate from one grid CA.
func threeSites(t *testing.T, key []byte) []*site {
	root := testpki.NewRoot(t, "grid-ca")
	var members []*site
	for i, name := range []string{"site-a", "site-b", "site-c"} {
		s := newSite(t, clusters[i], name)
		cert, certKey := root.Leaf(t, name, testpki.Opts{})
		s.secret("swim-key", map[string][]byte{"key": key})
		s.secret("site-cert", map[string][]byte{"tls.crt": cert, "tls.key": certKey})
		members = append(members, s)
	}
	return members
}

// The reference's three-site mesh: A has no seeds, B seeds A, C seeds B
// only (added while C runs). Discovery is transitive; each site counts
// two alive sites and their two providers; GridSites are created for the
// discovered sites; a second network's provider never reaches the first
// network; a network whose key Secret is missing fails with the reason and
// gossips nothing; a site with a wrong key never joins.
func TestThreeSiteMesh(t *testing.T) {
	ctx := context.Background()
	key := newKey(t)
	members := threeSites(t, key)
	a, b, c := members[0], members[1], members[2]

	a.network("mesh")
	b.network("mesh", a.SwimAddr)
	c.network("mesh")
	for _, s := range members {
		s.provider("prov-"+s.Name, "mesh", "model-"+s.Name)
	}
	// Another network at C, with its own provider, also known at A.
	c.network("mesh-other", a.SwimAddr)
	c.provider("prov-other", "mesh-other", "model-other")
	a.network("mesh-other")
	// A network at B whose key Secret does not exist; A holds it too.
	broken := b.network("mesh-broken")
	broken.Spec.TLS.SwimKeySecretRef.Name = "missing"
	require.NoError(t, b.Admin.Update(ctx, broken))
	b.provider("prov-broken", "mesh-broken", "model-broken")
	a.network("mesh-broken")

	// C finds its gateway address on a LoadBalancer Service, with the
	// chart's grant (get on that Service only); the address is only
	// advertised, never dialled.
	c.gatewayService = "provider-gateway"
	require.NoError(t, c.CP.Grant(ctx, c.AgentNS, controlplane.AgentServiceAccount, "gateway-service", c.Namespace(),
		[]rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"services"}, Verbs: []string{"get"}, ResourceNames: []string{"provider-gateway"}}}))
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "provider-gateway", Namespace: c.Namespace()},
		Spec:       corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Ports: []corev1.ServicePort{{Port: 8443}}},
	}
	require.NoError(t, c.Admin.Create(ctx, svc))
	svc.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "127.0.0.1"}}
	require.NoError(t, c.Admin.Status().Update(ctx, svc))

	// A points its SWIM Service at itself, as the leader does in a pod.
	// The API server refuses loopback endpoints: the pod address is a
	// documentation address, written to the API and never dialled.
	agents := []*agent{a.start([]string{"POD_IP=192.0.2.10"}, "--swim-service-name", "grid-swim"), b.start(nil), c.start(nil)}
	// B joined A. C has no seed in mesh yet, but its other network's seed
	// joins it to A, whose gossip may bring C to B before B is ever seen
	// with A alone: at least A, then.
	b.networkStatus("mesh", 30*time.Second, func(n *v1alpha1.GridNetwork) bool {
		return n.Status.Phase == v1alpha1.NetworkActive && n.Status.NetworkSites >= 1 && n.Status.RemoteProviderCount >= 1
	})
	// Adding the seed to mesh joins without a restart either way.
	// A merge patch: the agent may be writing the object (its finalizer)
	// at the same moment, which would make an update conflict.
	seeds, err := json.Marshal(map[string]any{"spec": map[string]any{"seeds": []string{b.SwimAddr}}})
	require.NoError(t, err)
	require.NoError(t, c.Admin.Patch(ctx, &v1alpha1.GridNetwork{ObjectMeta: metav1.ObjectMeta{Name: "mesh"}}, client.RawPatch(types.MergePatchType, seeds)))

	for _, s := range members {
		got := s.networkStatus("mesh", 30*time.Second, counts(v1alpha1.NetworkActive, 2, 2))
		cond := meta.FindStatusCondition(got.Status.Conditions, controller.ConditionMembership)
		require.NotNil(t, cond)
		assert.Equal(t, "True", string(cond.Status), cond.Message)
	}
	// Isolation: the other network's provider is counted there only;
	// connectedSites counts every alive peer, as the reference defines it.
	other := a.networkStatus("mesh-other", 20*time.Second, counts(v1alpha1.NetworkActive, 1, 1))
	assert.Equal(t, int32(2), other.Status.ConnectedSites, "B and C are alive, whichever networks they announced")
	got := a.networkStatus("mesh", time.Second, counts(v1alpha1.NetworkActive, 2, 2))
	assert.Equal(t, int32(2), got.Status.RemoteProviderCount, "exactly B's and C's providers")

	// The broken network: the reason, and nothing of it gossiped.
	gotBroken := b.networkStatus("mesh-broken", 20*time.Second, func(n *v1alpha1.GridNetwork) bool {
		r := meta.FindStatusCondition(n.Status.Conditions, "Ready")
		return r != nil && r.Reason == controller.ReasonSwimKeyMissing
	})
	assert.Contains(t, meta.FindStatusCondition(gotBroken.Status.Conditions, "Ready").Message, "spec.tls.swimKeySecretRef")
	time.Sleep(2 * time.Second)
	// A reconciled mesh-broken at A (its status written for this
	// generation) that knows no site: B, alive in mesh, never announced it.
	a.networkStatus("mesh-broken", 10*time.Second, func(n *v1alpha1.GridNetwork) bool {
		return n.Status.ObservedGeneration == n.Generation && counts(v1alpha1.NetworkInitializing, 0, 0)(n)
	})

	// GridSites of the discovered sites at A: gossiped address and
	// certificate, Connecting, never Active on gossip alone.
	for _, other := range []*site{b, c} {
		var gs v1alpha1.GridSite
		require.Eventually(t, func() bool {
			err := a.Admin.Get(ctx, types.NamespacedName{Name: "mesh-" + other.Name}, &gs)
			return err == nil && gs.Status.Phase == "Connecting" && gs.Status.PublicCertPem != ""
		}, 20*time.Second, 50*time.Millisecond, "GridSite mesh-%s: %+v", other.Name, gs.Status)
		want := other.gateway
		if other == c {
			want = "127.0.0.1:8443" // discovered from its Service
		}
		assert.Equal(t, want, gs.Spec.GatewayEndpoint.Address)
		assert.NotContains(t, gs.Status.PublicCertPem, "PRIVATE KEY")
		a.remove(&gs)
	}
	for _, ag := range agents {
		assert.Equal(t, float64(2), ag.metric(`grid_swim_sites{state="Alive"}`), "%s counts its alive sites", ag.site.Name)
		assert.True(t, ag.status().Swim.Encrypted)
		assert.NotContains(t, ag.Log(), "PRIVATE KEY")
	}

	// The SWIM Service's one EndpointSlice names the leader.
	var slice discoveryv1.EndpointSlice
	require.NoError(t, a.Admin.Get(ctx, types.NamespacedName{Namespace: a.AgentNS, Name: "grid-swim"}, &slice))
	require.Len(t, slice.Endpoints, 1)
	assert.Equal(t, []string{"192.0.2.10"}, slice.Endpoints[0].Addresses)
	assert.Equal(t, "grid-swim", slice.Labels[discoveryv1.LabelServiceName])
	require.Len(t, slice.Ports, 2)
	assert.Equal(t, portOf(a.SwimAddr), fmt.Sprint(*slice.Ports[0].Port))

	// An intruder with a wrong key, seeding A, is never a member, and its
	// packets are counted as rejected.
	x := newSite(t, clusters[3], "site-x")
	wrong := newKey(t)
	intruder := x.start([]string{"GRID_SWIM_ENCRYPT_KEY=" + hexKey(wrong), "GRID_SWIM_SEEDS=" + a.SwimAddr})
	require.Eventually(t, func() bool {
		return agents[0].metric(`grid_swim_packets_rejected_total{reason="unknown_key"}`) > 0
	}, 60*time.Second, 100*time.Millisecond, "the intruder's packets were never counted: it starts, on two loaded cores, before it sends")
	time.Sleep(2 * time.Second)
	for _, ag := range agents {
		_, seen := ag.member("site-x")
		assert.False(t, seen, "%s sees the intruder", ag.site.Name)
	}
	assert.Empty(t, intruder.status().Swim.Members)

	// A stopping agent leaves: its peers see Left at once, not a death.
	require.NoError(t, agents[2].Cmd.Process.Signal(syscall.SIGTERM))
	require.Equal(t, 0, agents[2].Wait(t, 15*time.Second))
	require.Eventually(t, func() bool {
		m, _ := agents[0].member("site-c")
		return m.State == sites.SiteLeft
	}, 5*time.Second, 50*time.Millisecond)
}

// The three steps of a key rotation, each on every site in turn, while
// providers keep changing: no site is ever seen suspect or dead, every
// change arrives, nothing restarts, and a site holding only the retired
// key is shut out at the end.
func TestKeyRotationAcrossSites(t *testing.T) {
	oldKey, newKey := newKey(t), newKey(t)
	members := threeSites(t, oldKey)
	a, b, c := members[0], members[1], members[2]
	a.network("rot")
	b.network("rot", a.SwimAddr)
	c.network("rot", a.SwimAddr)
	agents := []*agent{a.start(nil), b.start(nil), c.start(nil)}
	providers := 0
	addProvider := func() {
		providers++
		for _, s := range members {
			s.provider(fmt.Sprintf("rot-%s-%d", s.Name, providers), "rot", "model")
		}
		for _, s := range members {
			s.networkStatus("rot", 30*time.Second, counts(v1alpha1.NetworkActive, 2, int32(2*providers)))
		}
	}
	addProvider()
	generations := map[string]uint64{}
	for _, ag := range agents {
		generations[ag.site.Name] = ag.status().Swim.Generation
		require.NotZero(t, generations[ag.site.Name])
	}

	var mu sync.Mutex
	var problems []string
	stop := watch(100*time.Millisecond, func() {
		for _, ag := range agents {
			for _, m := range ag.status().Swim.Members {
				if m.State != sites.SiteAlive {
					mu.Lock()
					problems = append(problems, fmt.Sprintf("%s saw %s %s", ag.site.Name, m.Site, m.State))
					mu.Unlock()
				}
			}
		}
	})

	steps := []map[string][]byte{
		{"key": oldKey, "key.next": newKey},     // 1. every site accepts the next key
		{"key": newKey, "key.previous": oldKey}, // 2. every site sends with it
		{"key": newKey},                         // 3. the old key is retired
	}
	for i, data := range steps {
		for j, s := range members {
			s.secret("swim-key", data)
			want := 2
			if i == 2 {
				want = 1
			}
			require.Eventually(t, func() bool { return agents[j].status().Swim.KeysInstalled == want }, 15*time.Second, 100*time.Millisecond,
				"step %d at %s", i+1, s.Name)
			addProvider()
		}
	}
	stop()
	assert.Empty(t, problems)
	for _, ag := range agents {
		assert.Equal(t, generations[ag.site.Name], ag.status().Swim.Generation, "no restart at %s", ag.site.Name)
	}

	retired := newSite(t, clusters[3], "site-r")
	r := retired.start([]string{"GRID_SWIM_ENCRYPT_KEY=" + hexKey(oldKey), "GRID_SWIM_SEEDS=" + a.SwimAddr})
	require.Eventually(t, func() bool {
		return agents[0].metric(`grid_swim_packets_rejected_total{reason="unknown_key"}`) > 0
	}, 60*time.Second, 100*time.Millisecond, "the intruder's packets were never counted: it starts, on two loaded cores, before it sends")
	time.Sleep(2 * time.Second)
	assert.Empty(t, r.status().Swim.Members, "a site with only the retired key is shut out")
}

// Two replicas of site A: only the leader is a member. When it is killed
// the standby takes the site's membership over with a greater generation;
// the site never has a second member. Then the last replica is killed:
// the site is suspected, then dead, its records stale, then dropped after
// the TTL; a new agent rejoins with a greater generation.
func TestFailoverAndKill(t *testing.T) {
	key := newKey(t)
	members := threeSites(t, key)
	a, b := members[0], members[1]
	a.network("fo", b.SwimAddr)
	b.network("fo", a.SwimAddr)
	a.provider("fo-a", "fo", "model")
	b.provider("fo-b", "fo", "model")

	first := a.start(nil)
	require.Eventually(t, func() bool { return first.status().Leader }, 20*time.Second, 50*time.Millisecond)
	observer := b.start(nil, "--swim-stale-ttl", "5s")
	b.networkStatus("fo", 30*time.Second, counts(v1alpha1.NetworkActive, 1, 1))
	// The standby binds its own SWIM port (same site, another pod).
	a2 := *a
	a2.SwimAddr = testnet.FreeTCPUDPAddr(t)
	standby := a2.start(nil)

	var mu sync.Mutex
	var seenGenerations []uint64
	stop := watch(50*time.Millisecond, func() {
		count := 0
		for _, m := range observer.status().Swim.Members {
			if m.Site == "site-a" {
				count++
				mu.Lock()
				if len(seenGenerations) == 0 || seenGenerations[len(seenGenerations)-1] != m.Generation {
					seenGenerations = append(seenGenerations, m.Generation)
				}
				mu.Unlock()
			}
		}
		if count > 1 {
			t.Errorf("two members for site-a")
		}
	})

	time.Sleep(2 * time.Second)
	require.False(t, standby.status().Swim.Running, "a standby is never a member")
	g1 := first.status().Swim.Generation
	m, ok := observer.member("site-a")
	require.True(t, ok)
	require.Equal(t, g1, m.Generation)

	require.NoError(t, first.Cmd.Process.Kill()) // kill -9
	require.Eventually(t, func() bool {
		m, ok := observer.member("site-a")
		return ok && m.Generation > g1 && m.State == sites.SiteAlive
	}, 30*time.Second, 50*time.Millisecond, "the standby takes over")
	require.True(t, standby.status().Swim.Running)
	b.networkStatus("fo", 20*time.Second, counts(v1alpha1.NetworkActive, 1, 1))
	g2 := standby.status().Swim.Generation

	// The last replica killed: suspect, then dead within the window.
	killed := time.Now()
	require.NoError(t, standby.Cmd.Process.Kill())
	var suspectAt, deadAt time.Duration
	require.Eventually(t, func() bool {
		m, _ := observer.member("site-a")
		if m.State == sites.SiteSuspect && suspectAt == 0 {
			suspectAt = time.Since(killed)
		}
		if m.State == sites.SiteDead {
			deadAt = time.Since(killed)
			return true
		}
		return false
	}, 20*time.Second, 20*time.Millisecond)
	stop()
	require.NotZero(t, suspectAt, "suspect before dead")
	t.Logf("suspect after %s, dead after %s", suspectAt, deadAt)
	// The window is 3 s; finding the death takes a probe period or two.
	assert.Less(t, deadAt, 12*time.Second)
	b.networkStatus("fo", 10*time.Second, counts(v1alpha1.NetworkDegraded, 0, 1)) // stale, kept
	b.networkStatus("fo", 20*time.Second, counts(v1alpha1.NetworkDegraded, 0, 0)) // dropped after the TTL
	mu.Lock()
	assert.Equal(t, []uint64{g1, g2}, seenGenerations)
	mu.Unlock()

	// A new agent of the site rejoins with a greater generation.
	again := a.start(nil)
	require.Eventually(t, func() bool { return again.status().Leader }, 30*time.Second, 50*time.Millisecond)
	require.Eventually(t, func() bool {
		m, ok := observer.member("site-a")
		return ok && m.Generation > g2 && m.State == sites.SiteAlive
	}, 30*time.Second, 50*time.Millisecond)
	b.networkStatus("fo", 20*time.Second, counts(v1alpha1.NetworkActive, 1, 1))
}

func portOf(addr string) string {
	_, port, _ := net.SplitHostPort(addr)
	return port
}

// watch calls check every period until the returned stop is called.
func watch(every time.Duration, check func()) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-done:
				return
			case <-time.After(every):
			}
			check()
		}
	}()
	return func() {
		close(done)
		wg.Wait()
	}
}
