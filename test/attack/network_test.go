package attack

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gridsync/gridsync/api/v1alpha1"
	"github.com/gridsync/gridsync/shared/envelope"
	"github.com/gridsync/gridsync/test/testnet"
)

func (a *swimAgent) network(name string, seeds []string, gateways ...string) {
	a.t.Helper()
	n := &v1alpha1.GridNetwork{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1alpha1.GridNetworkSpec{Seeds: seeds}}
	for _, g := range gateways {
		n.Spec.ConsumerGateways = append(n.Spec.ConsumerGateways, v1alpha1.ConsumerGateway{Name: g, Namespace: a.resNS, SiteName: "here"})
	}
	require.NoError(a.t, a.admin.Create(context.Background(), n))
	a.t.Cleanup(func() { _ = a.admin.Delete(context.Background(), n) })
}

// servesDuringFlood creates a network with a gateway and returns how long
// its overlay took to be published, -1 when it was not within 10 s: the
// agent's own work going on during a flood.
func (a *swimAgent) servesDuringFlood() int64 {
	a.t.Helper()
	name := fmt.Sprintf("during-%d", seq.Add(1))
	start := time.Now()
	a.network(name, nil, "edge")
	at, ok := a.overlayAt(name, "edge", 10*time.Second)
	if !ok {
		return -1
	}
	return at.Sub(start).Milliseconds()
}

// overlayAt waits for a gateway's overlay ConfigMap and says when it came.
func (a *swimAgent) overlayAt(network, gateway string, timeout time.Duration) (time.Time, bool) {
	key := types.NamespacedName{Namespace: a.resNS, Name: envelope.ConfigMapName(network, gateway)}
	for deadline := time.Now().Add(timeout); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		var cm corev1.ConfigMap
		if a.admin.Get(context.Background(), key, &cm) == nil {
			return time.Now(), true
		}
	}
	return time.Time{}, false
}

// A seed that accepts and never answers, and hundreds of bad seeds, cost
// other networks nothing and fill no log (the first round: a new gateway
// on another network took 9.56 s instead of 0.06 s; 255 bad seeds wrote
// 255 warnings per reconcile, 813 KB in 30 s).
func TestBadSeeds(t *testing.T) {
	a := startSwimAgent(t, nil)
	silent := testnet.Silent(t)
	bad := size(255, 100)
	seeds := []string{silent.Addr()}
	for i := range bad {
		seeds = append(seeds, fmt.Sprintf("seed-%d:99999", i)) // never valid, never looked up
	}
	n := seq.Add(1)
	quiet, busy := fmt.Sprintf("quiet-%d", n), fmt.Sprintf("busy-%d", n)
	a.network(quiet, seeds, "quiet-edge")
	a.network(busy, nil, "edge")
	_, ok := a.overlayAt(busy, "edge", 30*time.Second)
	require.True(t, ok)
	logBefore := len(a.Log())
	watch := time.Duration(size(30, 8)) * time.Second
	// The quiet network is reconciled again meanwhile: its spec changes
	// (a gateway), its seeds do not.
	var qn v1alpha1.GridNetwork
	require.NoError(t, a.admin.Get(context.Background(), types.NamespacedName{Name: quiet}, &qn))
	qn.Spec.ConsumerGateways = append(qn.Spec.ConsumerGateways, v1alpha1.ConsumerGateway{Name: "quiet-edge-2", Namespace: a.resNS, SiteName: "here"})
	require.NoError(t, a.admin.Update(context.Background(), &qn))
	_, ok = a.overlayAt(quiet, "quiet-edge-2", 30*time.Second)
	require.True(t, ok)
	time.Sleep(watch / 2)

	var gn v1alpha1.GridNetwork
	require.NoError(t, a.admin.Get(context.Background(), types.NamespacedName{Name: busy}, &gn))
	gn.Spec.ConsumerGateways = append(gn.Spec.ConsumerGateways, v1alpha1.ConsumerGateway{Name: "edge-2", Namespace: a.resNS, SiteName: "here"})
	start := time.Now()
	require.NoError(t, a.admin.Update(context.Background(), &gn))
	at, ok := a.overlayAt(busy, "edge-2", 30*time.Second)
	took := at.Sub(start)
	time.Sleep(watch / 2)
	logs := a.Log()[logBefore:]
	warnings := strings.Count(logs, "swim_seed_")
	report(t, "bad_seeds", ok && took < time.Second && warnings <= 2,
		figure{"silent_seeds", 1}, figure{"bad_seeds", bad}, figure{"new_gateway_ms", took.Milliseconds()},
		figure{"seed_log_lines", warnings}, figure{"log_bytes", len(logs)}, figure{"window_s", int(watch.Seconds())},
		figure{"silent_seed_dials", silent.Accepted.Load()})
}

// A seed at a TCP echo service is not a member (the first round: the
// agent merged its own reflected join and reported it joined).
func TestEchoSeed(t *testing.T) {
	echo := testnet.Echo(t)
	a := startSwimAgent(t, nil, echo.Addr())
	require.Eventually(t, func() bool { return strings.Contains(a.Log(), "swim_seeds_joined") }, 20*time.Second, 50*time.Millisecond)
	line := ""
	for _, l := range strings.Split(a.Log(), "\n") {
		if strings.Contains(l, "swim_seeds_joined") {
			line = l
		}
	}
	joined := strings.Contains(line, `"joined":1`)
	report(t, "echo_seed", !joined && echo.Accepted.Load() > 0,
		figure{"echo_dials", echo.Accepted.Load()}, figure{"counted_joined", joined})
}

// A GridSite's address is dialled under the probe destination rule: the
// agent's own loopback, where nothing of a peer site lives, is never
// probed unless a CIDR allows it (the first round: site probes and signal
// polls dialled any address, loopback and metadata included).
func TestProbeDestinations(t *testing.T) {
	a := startSwimAgentWith(t, nil, nil, false) // no CIDR allowed: loopback is denied
	target := testnet.Silent(t)
	n := seq.Add(1)
	network := fmt.Sprintf("probed-%d", n)
	a.network(network, nil, "edge")
	gs := &v1alpha1.GridSite{ObjectMeta: metav1.ObjectMeta{Name: network + "-inside"}, Spec: v1alpha1.GridSiteSpec{
		GridNetworkRef:  network,
		GatewayEndpoint: &v1alpha1.GatewayEndpoint{Address: target.Addr(), TLS: &v1alpha1.GatewayTLS{Mode: "Plaintext"}},
	}}
	require.NoError(t, a.admin.Create(context.Background(), gs))
	t.Cleanup(func() { _ = a.admin.Delete(context.Background(), gs) })
	var got v1alpha1.GridSite
	require.Eventually(t, func() bool {
		return a.admin.Get(context.Background(), types.NamespacedName{Name: gs.Name}, &got) == nil && got.Status.Reason != ""
	}, 30*time.Second, 50*time.Millisecond)
	time.Sleep(2 * time.Second) // a few probe periods
	report(t, "probe_destinations", target.Accepted.Load() == 0 && strings.Contains(got.Status.Message, "not allowed"),
		figure{"dials_to_loopback", target.Accepted.Load()}, figure{"reason", got.Status.Reason})
}

// Two networks whose gateways map to one ConfigMap name (network x-a,
// gateway b-c; network x-a-b, gateway c): the first keeps the name, the
// second is refused, and nothing flaps (the first round's name
// collision).
func TestNameCollision(t *testing.T) {
	a := startSwimAgent(t, nil)
	n := seq.Add(1)
	first, second := fmt.Sprintf("x%d-a", n), fmt.Sprintf("x%d-a-b", n)
	a.network(first, nil, "b-c")
	_, ok := a.overlayAt(first, "b-c", 30*time.Second)
	require.True(t, ok)
	a.network(second, nil, "c")
	var reason string
	require.Eventually(t, func() bool {
		var gn v1alpha1.GridNetwork
		if a.admin.Get(context.Background(), types.NamespacedName{Name: second}, &gn) != nil {
			return false
		}
		for _, s := range gn.Status.OverlayStatus {
			if s.GatewayName == "c" {
				reason = s.Reason
			}
		}
		return reason != ""
	}, 30*time.Second, 50*time.Millisecond)
	key := types.NamespacedName{Namespace: a.resNS, Name: envelope.ConfigMapName(first, "b-c")}
	var cm corev1.ConfigMap
	require.NoError(t, a.admin.Get(context.Background(), key, &cm))
	before := cm.ResourceVersion
	time.Sleep(time.Duration(size(10, 3)) * time.Second)
	require.NoError(t, a.admin.Get(context.Background(), key, &cm))
	writes := 0
	if cm.ResourceVersion != before {
		writes = 1
	}
	report(t, "name_collision", reason == "ConfigMapNameConflict" && writes == 0,
		figure{"refused_reason", reason}, figure{"writes_while_colliding", writes})
}
