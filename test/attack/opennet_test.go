package attack

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"fmt"
	"log/slog"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gridsync/gridsync/api/v1alpha1"
	"github.com/gridsync/gridsync/controller"
	membership "github.com/gridsync/gridsync/gossip"
	"github.com/gridsync/gridsync/gossip/record"
	"github.com/gridsync/gridsync/gossip/sites"
	"github.com/gridsync/gridsync/test/testnet"
)

// In a network without a grid CA, a key holder rewrites a site it did not
// first announce: site C announced its gateway and a provider, signed
// with its own key; the key holder sends C's records with a forged
// gateway, region and an injected provider, newer than C's, signed with a
// key of its own, unsigned, at the end of time, with C's key named but
// its own signature, and a tombstone withdrawing C. The agent holds C to
// the key C signed with first, through a restart of the agent (the
// binding kept in the network's status): C's GridSite and providers stay
// as C announced them, and every forged record is refused.
func TestOpenNetworkRewrite(t *testing.T) {
	ctx := context.Background()
	a := startSwimAgent(t, nil)
	network := fmt.Sprintf("open-%d", seq.Add(1))
	n := &v1alpha1.GridNetwork{ObjectMeta: metav1.ObjectMeta{Name: network, Labels: map[string]string{controller.AutoDiscoverSitesLabel: "true"}}}
	require.NoError(t, a.admin.Create(ctx, n))
	t.Cleanup(func() { _ = a.admin.Delete(context.Background(), n) })

	// Site C, honest: a membership of its own in the open network, with
	// its own record key, one provider, its gateway.
	_, keyC, err := ed25519.GenerateKey(rand.Reader)
	require.NoError(t, err)
	c, err := membership.New(ctx, membership.Config{Site: "site-c", BindAddr: "127.0.0.1:0", EnvKey: a.key,
		ProbeInterval: time.Second, ProbeTimeout: 600 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	cctx, cancel := context.WithCancel(ctx)
	t.Cleanup(cancel)
	go func() { _ = c.Start(cctx) }()
	require.Eventually(t, func() bool { return c.Status().Running }, 10*time.Second, 20*time.Millisecond)
	gatewayC := testnet.FreeTCPUDPAddr(t) // advertised, never dialled here
	c.SetGatewayAddress(gatewayC)
	c.SetIdentity(network, sites.Identity{Open: true, RecordKey: keyC})
	require.NoError(t, c.Publish(network, "", []sites.Provider{{Name: "prov-c", Models: []string{"model-c"}, Cluster: "c", Phase: "Available"}}))
	require.Empty(t, c.AnnounceSeeds(network, []string{a.swim}).Failed)
	gsC := types.NamespacedName{Name: network + "-site-c"}
	var gs v1alpha1.GridSite
	remoteProviders := func() int32 {
		var got v1alpha1.GridNetwork
		_ = a.admin.Get(ctx, types.NamespacedName{Name: network}, &got)
		return got.Status.RemoteProviderCount
	}
	require.Eventually(t, func() bool {
		return a.admin.Get(ctx, gsC, &gs) == nil && gs.Spec.GatewayEndpoint != nil && gs.Spec.GatewayEndpoint.Address == gatewayC && remoteProviders() == 1
	}, 20*time.Second, 50*time.Millisecond, "site C was never discovered")
	fpC := record.KeyFingerprint(keyC.Public().(ed25519.PublicKey))
	boundC := func() bool {
		var got v1alpha1.GridNetwork
		_ = a.admin.Get(ctx, types.NamespacedName{Name: network}, &got)
		for _, b := range got.Status.SiteKeys {
			if b.Site == "site-c" {
				return b.Fingerprint == fpC
			}
		}
		return false
	}
	require.Eventually(t, boundC, 20*time.Second, 50*time.Millisecond, "site C's key never reached the status")

	// The forgeries, from a key holder with a record key of its own.
	_, keyX, err := ed25519.GenerateKey(rand.Reader)
	require.NoError(t, err)
	holder := testnet.KeyHolder(t, a.key)
	forgeries := func(at time.Time) []membership.Record {
		v := uint64(at.UnixNano())
		site := membership.Record{Network: network, Site: "site-c", Kind: membership.KindSite, Version: v, GatewayAddress: "127.9.9.9:443",
			Region: "forged-region", Zone: "forged-zone"}
		providers := membership.Record{Network: network, Site: "site-c", Kind: membership.KindProviders, Version: v,
			Providers: []sites.Provider{{Name: "prov-c", Models: []string{"model-c"}, Cluster: "c", Phase: "Available"},
				{Name: "gpt-evil", Models: []string{"gpt-evil"}, Cluster: "c", Phase: "Available"}}}
		tombstone := membership.Record{Network: network, Site: "site-c", Kind: membership.KindProviders, Version: v + 1, Deleted: true}
		var out []membership.Record
		for _, r := range []membership.Record{site, providers, tombstone} {
			for _, version := range []uint64{r.Version, math.MaxUint64} {
				r.Version = version
				unsigned := r
				out = append(out, unsigned) // unsigned (from_future at the end of time)
				require.NoError(t, r.SignOpen(keyX))
				out = append(out, r) // rebound_key
				named := r
				named.Chain = [][]byte{keyC.Public().(ed25519.PublicKey)}
				named.Sig = ed25519.Sign(keyX, append([]byte("another message"), r.Sig...))
				out = append(out, named) // bad_signature: C's key named, a signature of the holder's
			}
		}
		return out
	}
	// send sends one round of forgeries, again with newer versions until
	// the agent judged a round with the network's identity loaded (a
	// record arriving before it is refused as unknown_network, which
	// proves nothing), and says how many were sent and refused.
	send := func() (sent, refused int) {
		for attempt := 0; ; attempt++ {
			forged := forgeries(time.Now().Add(time.Minute))
			msg, err := membership.DirectMessage(forged)
			require.NoError(t, err)
			before, unknown := a.recordOutcomes(), a.metricLabel("grid_swim_records_rejected_total", "reason", record.RejectUnknownNetwork)
			require.NoError(t, holder.SendReliable(a.node(t), msg))
			require.Eventually(t, func() bool {
				now := a.recordOutcomes()
				return now.refused+now.shed+now.stored-before.refused-before.shed-before.stored >= float64(len(forged))
			}, time.Minute, 50*time.Millisecond, "the agent never accounted for every forged record")
			after := a.recordOutcomes()
			sent += len(forged)
			refused += int(after.refused - before.refused)
			if a.metricLabel("grid_swim_records_rejected_total", "reason", record.RejectUnknownNetwork) == unknown {
				return sent, refused
			}
			if attempt >= 20 {
				t.Fatalf("the agent never judged a round with the network's identity loaded (every round refused as %s)", record.RejectUnknownNetwork)
			}
			time.Sleep(250 * time.Millisecond)
		}
	}
	accepted := func() int {
		n := 0
		if a.admin.Get(ctx, gsC, &gs) != nil || gs.Spec.GatewayEndpoint == nil || gs.Spec.GatewayEndpoint.Address != gatewayC || gs.Spec.Region != "" || gs.Spec.Zone != "" {
			n++
		}
		if got := remoteProviders(); got != 1 {
			n++
		}
		return n
	}

	sent, refused := send()
	byReason := map[string]int{}
	for _, reason := range []string{record.RejectReboundKey, record.RejectUnsigned, record.RejectBadSignature, record.RejectFromFuture} {
		byReason[reason] = int(a.metricLabel("grid_swim_records_rejected_total", "reason", reason))
	}
	// Time for anything accepted to reach the status and the GridSites.
	time.Sleep(3 * time.Second)
	acceptedBefore := accepted()

	// The agent restarts, C away: the key holder reaches it first.
	cancel()
	a.restart()
	require.True(t, boundC(), "the binding is in the status after the restart")
	sentAfter, refusedAfter := send()
	reboundAfter := int(a.metricLabel("grid_swim_records_rejected_total", "reason", record.RejectReboundKey))
	time.Sleep(3 * time.Second)
	require.NoError(t, a.admin.Get(ctx, gsC, &gs))
	acceptedAfter := 0
	if gs.Spec.GatewayEndpoint == nil || gs.Spec.GatewayEndpoint.Address != gatewayC || gs.Spec.Region != "" || remoteProviders() != 0 || !boundC() {
		acceptedAfter++
	}

	// C comes back, under its own key: taken as before.
	c2, err := membership.New(ctx, membership.Config{Site: "site-c", BindAddr: "127.0.0.1:0", EnvKey: a.key,
		ProbeInterval: time.Second, ProbeTimeout: 600 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	c2ctx, cancel2 := context.WithCancel(ctx)
	t.Cleanup(cancel2)
	go func() { _ = c2.Start(c2ctx) }()
	require.Eventually(t, func() bool { return c2.Status().Running }, 10*time.Second, 20*time.Millisecond)
	c2.SetGatewayAddress(gatewayC)
	c2.SetIdentity(network, sites.Identity{Open: true, RecordKey: keyC})
	require.NoError(t, c2.Publish(network, "", []sites.Provider{{Name: "prov-c", Models: []string{"model-c"}, Cluster: "c", Phase: "Available"}}))
	require.Empty(t, c2.AnnounceSeeds(network, []string{a.swim}).Failed)
	back := false
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline) && !back; time.Sleep(50 * time.Millisecond) {
		back = remoteProviders() == 1
	}
	if !back {
		acceptedAfter++ // C itself is refused
	}
	acceptedAfter += accepted()

	report(t, "open_network_rewrite", acceptedBefore+acceptedAfter == 0 && refused == sent && refusedAfter == sentAfter && reboundAfter > 0 && back,
		figure{"forged_sent", sent + sentAfter}, figure{"forged_accepted", acceptedBefore + acceptedAfter},
		figure{"rejected", refused + refusedAfter}, figure{"rebound_key", byReason[record.RejectReboundKey]},
		figure{"unsigned", byReason[record.RejectUnsigned]}, figure{"bad_signature", byReason[record.RejectBadSignature]},
		figure{"from_future", byReason[record.RejectFromFuture]}, figure{"rebound_key_after_restart", reboundAfter},
		figure{"site_back_after_restart", back})
}
