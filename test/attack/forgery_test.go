package attack

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"math"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gridsync/gridsync/api/v1alpha1"
	"github.com/gridsync/gridsync/controller"
	membership "github.com/gridsync/gridsync/gossip"
	"github.com/gridsync/gridsync/gossip/sites"
	"github.com/gridsync/gridsync/test/testnet"
	"github.com/gridsync/gridsync/trust/sitetrust"
)

// A key holder with no certificate for site C speaks for C (the first
// round: C's records written at the end of time with a forged gateway and
// an injected provider were taken by every site and never given back)
// and invents sites. The agent, in a network with a grid CA, keeps C as C
// announced itself: no forged address, no injected provider, no GridSite
// for a site nobody can sign for.
func TestRecordForgery(t *testing.T) {
	ctx := context.Background()
	a := startSwimAgent(t, nil)
	g := newSignedNetwork(t, a, "forge")
	network, gridCA := g.name, g.ca
	pair := func(ca *sitetrust.CA, site string) *tls.Certificate { return issue(t, ca, site) }

	// Site C, honest: a membership of its own with its certificate from
	// the grid CA, one provider, its gateway.
	c := g.startSite(t, "site-c", []sites.Provider{{Name: "prov-c", Models: []string{"model-c"}, Cluster: "c", Phase: "Available"}})
	gatewayC := c.gateway
	gsC := network + "-site-c"
	var gs v1alpha1.GridSite
	remoteProviders := func() int32 { return g.remoteProviders(ctx) }
	require.Eventually(t, func() bool { return remoteProviders() == 1 }, 20*time.Second, 50*time.Millisecond)

	// The forgeries, from a key holder.
	holder := testnet.KeyHolder(t, a.key)
	to := a.node(t)
	// A minute ahead (within the clock skew allowed): newer than anything
	// C signed, even a record C signs again after this point (it does
	// when it adopts the grid ID), so that every forgery is checked and
	// none is set aside as older than what is held.
	now := uint64(time.Now().Add(time.Minute).UnixNano())
	forgedSite := membership.Record{Network: network, Site: "site-c", Kind: membership.KindSite, Version: now, GatewayAddress: "127.9.9.9:443",
		Region: "forged-region", Zone: "forged-zone"}
	forgedProviders := membership.Record{Network: network, Site: "site-c", Kind: membership.KindProviders, Version: now,
		Providers: []sites.Provider{{Name: "gpt-evil", Models: []string{"gpt-evil"}, Cluster: "c", Phase: "Available"}}}
	otherPEM, otherKey, err := sitetrust.NewCA(time.Now(), time.Hour)
	require.NoError(t, err)
	otherCA, err := sitetrust.ParseCA(otherPEM, otherKey)
	require.NoError(t, err)
	signers := []*tls.Certificate{nil, pair(otherCA, "site-c"), pair(gridCA, "site-x")}
	var forged []membership.Record
	for _, signer := range signers {
		for _, r := range []membership.Record{forgedSite, forgedProviders} {
			for _, version := range []uint64{now, math.MaxUint64} {
				r.Version = version
				if signer != nil {
					require.NoError(t, r.Sign(signer))
				}
				forged = append(forged, r)
			}
		}
	}
	invented := size(50, 10)
	for i := range invented {
		forged = append(forged, membership.Record{Network: network, Site: fmt.Sprintf("inv-%d", i), Kind: membership.KindSite, Version: now, GatewayAddress: "127.9.9.9:443"})
	}
	msg, err := membership.DirectMessage(forged)
	require.NoError(t, err)
	outcomes := a.recordOutcomes()
	require.NoError(t, holder.SendReliable(to, msg))
	// Every forgery accounted for: each is newer than what is held, so
	// each is checked and refused (or shed unchecked); C's own records
	// are never refused nor shed, so these count forgeries only. The
	// wait has no race with C and ends as soon as the agent is done.
	settled := func() bool {
		now := a.recordOutcomes()
		return now.refused+now.shed-outcomes.refused-outcomes.shed >= float64(len(forged))
	}
	require.Eventually(t, settled, time.Minute, 50*time.Millisecond, "the agent never accounted for every forged record")
	// Time for anything accepted to reach the status and the GridSites.
	time.Sleep(3 * time.Second)

	accepted := 0
	require.NoError(t, a.admin.Get(ctx, types.NamespacedName{Name: gsC}, &gs))
	if gs.Spec.GatewayEndpoint == nil || gs.Spec.GatewayEndpoint.Address != gatewayC || gs.Spec.Region != "" || gs.Spec.Zone != "" {
		accepted++
	}
	if extra := remoteProviders() - 1; extra != 0 {
		accepted += int(max(extra, 1))
	}
	var all v1alpha1.GridSiteList
	require.NoError(t, a.admin.List(ctx, &all))
	for _, g := range all.Items {
		if strings.HasPrefix(g.Name, network+"-inv-") {
			accepted++
		}
	}
	report(t, "record_forgery", accepted == 0,
		figure{"forged_sent", len(forged)}, figure{"forged_accepted", accepted},
		figure{"rejected", int(a.recordOutcomes().refused - outcomes.refused)}, figure{"invented_sites", invented})
}

// signedNetwork is a GridNetwork of an agent with a grid CA (generated
// by the agent) and the agent's site certificate: every record of it is
// signed and checked.
type signedNetwork struct {
	a    *swimAgent
	name string
	ca   *sitetrust.CA
}

func newSignedNetwork(t *testing.T, a *swimAgent, prefix string) *signedNetwork {
	t.Helper()
	ctx := context.Background()
	network := fmt.Sprintf("%s-%d", prefix, seq.Add(1))
	require.NoError(t, cp.AgentTrustSecrets(ctx, a.agentNS, a.resNS, "grid-ca", "site-cert"))
	n := &v1alpha1.GridNetwork{
		ObjectMeta: metav1.ObjectMeta{Name: network, Labels: map[string]string{controller.AutoDiscoverSitesLabel: "true"}},
		Spec: v1alpha1.GridNetworkSpec{TLS: &v1alpha1.GridTLS{
			CASecretRef:   &v1alpha1.NamespacedName{Name: "grid-ca", Namespace: a.resNS},
			SiteSecretRef: &v1alpha1.NamespacedName{Name: "site-cert", Namespace: a.resNS},
		}},
	}
	require.NoError(t, a.admin.Create(ctx, n))
	t.Cleanup(func() { _ = a.admin.Delete(context.Background(), n) })
	var caSecret corev1.Secret
	require.Eventually(t, func() bool {
		return a.admin.Get(ctx, types.NamespacedName{Namespace: a.resNS, Name: "grid-ca"}, &caSecret) == nil
	}, 20*time.Second, 50*time.Millisecond, "the grid CA was never generated")
	gridCA, err := sitetrust.ParseCA(caSecret.Data["tls.crt"], caSecret.Data["tls.key"])
	require.NoError(t, err)
	return &signedNetwork{a: a, name: network, ca: gridCA}
}

// issue is a site certificate and key of ca.
func issue(t *testing.T, ca *sitetrust.CA, site string) *tls.Certificate {
	t.Helper()
	chain, key, err := ca.Issue(site, time.Now(), time.Hour)
	require.NoError(t, err)
	p, err := tls.X509KeyPair(chain, key)
	require.NoError(t, err)
	return &p
}

// gridSite is another site of the network: a membership of its own with
// its certificate from the grid CA.
type gridSite struct {
	*membership.Runtime
	cert    *tls.Certificate
	gateway string
}

// startSite runs a site of the network that announces providers and
// joins the agent, and waits until the agent made a GridSite of it.
func (g *signedNetwork) startSite(t *testing.T, site string, providers []sites.Provider) *gridSite {
	t.Helper()
	ctx := context.Background()
	m, err := membership.New(ctx, membership.Config{Site: site, BindAddr: "127.0.0.1:0", EnvKey: g.a.key,
		ProbeInterval: time.Second, ProbeTimeout: 600 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	mctx, cancel := context.WithCancel(ctx)
	t.Cleanup(cancel)
	go func() { _ = m.Start(mctx) }()
	require.Eventually(t, func() bool { return m.Status().Running }, 10*time.Second, 20*time.Millisecond)
	s := &gridSite{Runtime: m, cert: issue(t, g.ca, site), gateway: testnet.FreeTCPUDPAddr(t)} // advertised, never dialled here
	roots := x509.NewCertPool()
	roots.AddCert(g.ca.Cert)
	m.SetGatewayAddress(s.gateway)
	m.SetIdentity(g.name, sites.Identity{Roots: roots, RootCerts: []*x509.Certificate{g.ca.Cert}, Signer: s.cert})
	require.NoError(t, m.Publish(g.name, "", providers))
	require.Empty(t, m.AnnounceSeeds(g.name, []string{g.a.swim}).Failed)
	var gs v1alpha1.GridSite
	require.Eventually(t, func() bool {
		return g.a.admin.Get(ctx, types.NamespacedName{Name: g.name + "-" + site}, &gs) == nil && gs.Spec.GatewayEndpoint != nil && gs.Spec.GatewayEndpoint.Address == s.gateway
	}, 20*time.Second, 50*time.Millisecond, "site %s was never discovered", site)
	return s
}

// remoteProviders is the network's count of other sites' providers, as
// the agent's status says.
func (g *signedNetwork) remoteProviders(ctx context.Context) int32 {
	var got v1alpha1.GridNetwork
	_ = g.a.admin.Get(ctx, types.NamespacedName{Name: g.name}, &got)
	return got.Status.RemoteProviderCount
}

// node is the agent as a memberlist node a key holder sends to.
func (a *swimAgent) node(t *testing.T) *memberlist.Node {
	t.Helper()
	host, port, err := net.SplitHostPort(a.swim)
	require.NoError(t, err)
	p, err := strconv.Atoi(port)
	require.NoError(t, err)
	return &memberlist.Node{Name: "agent", Addr: net.ParseIP(host), Port: uint16(p)}
}
