package controller_test

import (
	"crypto/ed25519"
	"crypto/rand"
	"fmt"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gridsync/gridsync/api/v1alpha1"
	"github.com/gridsync/gridsync/controller"
	membership "github.com/gridsync/gridsync/gossip"
	"github.com/gridsync/gridsync/gossip/record"
	"github.com/gridsync/gridsync/gossip/sites"
	"github.com/gridsync/gridsync/test/testnet"
)

func newRecordKey(t *testing.T) ed25519.PrivateKey {
	t.Helper()
	_, k, err := ed25519.GenerateKey(rand.Reader)
	require.NoError(t, err)
	return k
}

func withRegistry(reg *prometheus.Registry) agentOption {
	return func(o *controller.ManagerOptions) { o.Registerer = reg }
}

// siteKey is the fingerprint a network's status holds a site to.
func siteKey(n *v1alpha1.GridNetwork, site string) string {
	for _, b := range n.Status.SiteKeys {
		if b.Site == site {
			return b.Fingerprint
		}
	}
	return ""
}

// A network without a grid CA says what it is: RecordsSigned False
// (NetworkUnsigned) and grid_network_records_unsigned 1, where a network
// with one reads True and 0. The agent creates its record key in its own
// namespace and signs with it; its status holds the remote site to the
// key it signed with. Restarted, the agent keeps both: a key holder that
// reaches it before the site does, with the site's records signed by
// another key, is refused. The reset annotation forgets the site's key
// once, and goes.
func TestAnOpenNetworkSaysWhatItIsAndHoldsSitesToTheirKeys(t *testing.T) {
	e := newEnv(t)
	key := swimKey(t)
	gw := e.gateway("edge", "site-a")
	open := e.network(gw)
	signed := &v1alpha1.GridNetwork{ObjectMeta: e.meta("signed")}
	signed.Spec.TLS = &v1alpha1.GridTLS{CAConfigMapRef: &v1alpha1.NamespacedKeyRef{Name: "no-such-ca", Namespace: e.credNS}}

	keyB := newRecordKey(t)
	remote := startSwimSite(t, "site-b", membership.Config{EnvKey: key}).running(t)
	remote.SetGatewayAddress("127.0.0.1:9443")
	remote.SetIdentity(open.Name, sites.Identity{Open: true, RecordKey: keyB})
	require.NoError(t, remote.Publish(open.Name, "", []sites.Provider{{Name: "remote-1", Models: []string{"m1"}, Cluster: "b", Phase: "Available"}}))
	names := seedNames{"site-b.grid.test": "127.0.0.1"}
	open.Spec.Seeds = []string{"site-b.grid.test:" + portOf(remote.AdvertiseAddr())}
	e.create(open)
	e.create(signed)

	reg := prometheus.NewRegistry()
	site := startSwimSite(t, "site-a", membership.Config{EnvKey: key}).running(t)
	a := e.startAgent(withMembership(site, names), withRegistry(reg))

	fpB := record.KeyFingerprint(keyB.Public().(ed25519.PublicKey))
	got := e.networkStatus(open, "RecordsSigned False, site-b held to its key", func(n *v1alpha1.GridNetwork) (bool, string) {
		c := condition(n, controller.ConditionRecordsSigned)
		return c.Status == metav1.ConditionFalse && c.Reason == controller.ReasonNetworkUnsigned && siteKey(n, "site-b") == fpB && n.Status.RemoteProviderCount == 1,
			fmt.Sprintf("%s/%s %v %s", c.Status, c.Reason, n.Status.SiteKeys, phaseAndCounts(n))
	})
	c := condition(got, controller.ConditionRecordsSigned)
	require.Contains(t, c.Message, "the SWIM key alone authenticates them")
	require.Contains(t, c.Message, "no remote site can become routable")
	require.Len(t, got.Status.SiteKeys, 1)
	e.networkStatus(signed, "RecordsSigned True", func(n *v1alpha1.GridNetwork) (bool, string) {
		c := condition(n, controller.ConditionRecordsSigned)
		return c.Status == metav1.ConditionTrue && c.Reason == controller.ReasonRecordsSigned && len(n.Status.SiteKeys) == 0, c.Reason
	})
	unsigned := map[string]float64{}
	for _, m := range gathered(t, reg, "grid_network_records_unsigned") {
		unsigned[m.GetLabel()[0].GetValue()] = m.GetGauge().GetValue()
	}
	require.Equal(t, 1.0, unsigned[open.Name])
	require.Equal(t, 0.0, unsigned[signed.Name])

	// The agent's record key, in its namespace: the remote site holds this
	// site to it.
	var secret corev1.Secret
	require.NoError(t, e.admin.Get(e.ctx, types.NamespacedName{Namespace: e.agentNS, Name: controller.DefaultRecordKeySecret}, &secret))
	seed := secret.Data["ed25519.seed"]
	require.Len(t, seed, ed25519.SeedSize)
	fpA := record.KeyFingerprint(ed25519.NewKeyFromSeed(seed).Public().(ed25519.PublicKey))
	require.Eventually(t, func() bool {
		v := remote.View(open.Name)
		return len(v.SiteKeys) == 1 && v.SiteKeys[0].Site == "site-a" && v.SiteKeys[0].Fingerprint == fpA
	}, 10*time.Second, 20*time.Millisecond, "the remote site holds this site to its record key")

	// Restart, site B away: the agent gives membership the keys its
	// status kept, and signs with the key its Secret kept.
	remote.Vanish()
	remote.stop()
	a.stop()
	site.stop()
	siteReg := prometheus.NewRegistry()
	site2 := startSwimSite(t, "site-a", membership.Config{EnvKey: key, Registerer: siteReg}).running(t)
	e.startAgent(withMembership(site2, names))
	require.Eventually(t, func() bool { return site2.View(open.Name).OpenKeys }, 20*time.Second, 20*time.Millisecond)
	require.Equal(t, fpB, siteKeyOf(site2.View(open.Name), "site-b"), "kept through the restart")

	keyX := newRecordKey(t)
	x := startSwimSite(t, "site-x", membership.Config{EnvKey: key}).running(t)
	x.SetIdentity(open.Name, sites.Identity{Open: true, RecordKey: keyX})
	require.NoError(t, x.Publish(open.Name, "", nil))
	require.Empty(t, x.AnnounceSeeds(open.Name, []string{site2.AdvertiseAddr()}).Failed)
	require.Eventually(t, func() bool { return siteKeyOf(x.View(open.Name), "site-a") != "" }, 20*time.Second, 20*time.Millisecond)
	require.Equal(t, fpA, siteKeyOf(x.View(open.Name), "site-a"), "the restarted agent signs with the key its Secret kept")
	forged := membership.Record{Network: open.Name, Site: "site-b", Kind: membership.KindSite, Version: uint64(time.Now().UnixNano()), GatewayAddress: "127.9.9.9:443"}
	require.NoError(t, forged.SignOpen(keyX))
	msg, err := membership.DirectMessage([]membership.Record{forged})
	require.NoError(t, err)
	holder := testnet.KeyHolder(t, key)
	host, port, err := net.SplitHostPort(site2.AdvertiseAddr())
	require.NoError(t, err)
	p, err := strconv.Atoi(port)
	require.NoError(t, err)
	require.NoError(t, holder.SendReliable(&memberlist.Node{Name: "site-a", Addr: net.ParseIP(host), Port: uint16(p)}, msg))
	require.Eventually(t, func() bool {
		return counterOf(t, siteReg, "grid_swim_records_rejected_total", record.RejectReboundKey) > 0
	}, 10*time.Second, 20*time.Millisecond)
	for _, s := range site2.View(open.Name).Sites {
		require.NotEqual(t, "127.9.9.9:443", s.GatewayAddress)
	}

	// The operator resets site B's key: it leaves the status once, the
	// annotation goes.
	update(e, open, func(n *v1alpha1.GridNetwork) {
		n.Annotations = map[string]string{controller.ResetSiteKeyAnnotation: "site-b"}
	})
	e.networkStatus(open, "site-b's key reset, the annotation gone", func(n *v1alpha1.GridNetwork) (bool, string) {
		_, annotated := n.Annotations[controller.ResetSiteKeyAnnotation]
		return !annotated && siteKey(n, "site-b") == "" && siteKey(n, "site-x") != "", fmt.Sprintf("annotated=%t %v", annotated, n.Status.SiteKeys)
	})
	require.Empty(t, siteKeyOf(site2.View(open.Name), "site-b"))
	require.NoError(t, e.admin.Get(e.ctx, client.ObjectKeyFromObject(&secret), &secret))
	require.Equal(t, seed, secret.Data["ed25519.seed"], "the record key is never rewritten")
}

func siteKeyOf(v sites.NetworkView, site string) string {
	for _, k := range v.SiteKeys {
		if k.Site == site {
			return k.Fingerprint
		}
	}
	return ""
}
