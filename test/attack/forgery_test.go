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

	"github.com/gridsync/gridsync/agent/membership"
	"github.com/gridsync/gridsync/controller"
	"github.com/gridsync/gridsync/controller/api/v1alpha1"
	"github.com/gridsync/gridsync/controller/sites"
	"github.com/gridsync/gridsync/controller/sitetrust"
	"github.com/gridsync/gridsync/test/testnet"
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
	network := fmt.Sprintf("forge-%d", seq.Add(1))
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
	pair := func(ca *sitetrust.CA, site string) *tls.Certificate {
		chain, key, err := ca.Issue(site, time.Now(), time.Hour)
		require.NoError(t, err)
		p, err := tls.X509KeyPair(chain, key)
		require.NoError(t, err)
		return &p
	}

	// Site C, honest: a membership of its own with its certificate from
	// the grid CA, one provider, its gateway.
	roots := x509.NewCertPool()
	roots.AddCert(gridCA.Cert)
	c, err := membership.New(ctx, membership.Config{Site: "site-c", BindAddr: "127.0.0.1:0", EnvKey: a.key,
		ProbeInterval: time.Second, ProbeTimeout: 600 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	cctx, cancel := context.WithCancel(ctx)
	t.Cleanup(cancel)
	go func() { _ = c.Start(cctx) }()
	require.Eventually(t, func() bool { return c.Status().Running }, 10*time.Second, 20*time.Millisecond)
	gatewayC := testnet.FreeTCPUDPAddr(t) // advertised, never dialled here
	c.SetGatewayAddress(gatewayC)
	c.SetIdentity(network, sites.Identity{Roots: roots, Signer: pair(gridCA, "site-c")})
	require.NoError(t, c.Publish(network, "", []sites.Provider{{Name: "prov-c", Models: []string{"model-c"}, Cluster: "c", Phase: "Available"}}))
	require.Empty(t, c.AnnounceSeeds(network, []string{a.swim}).Failed)
	gsC := network + "-site-c"
	var gs v1alpha1.GridSite
	require.Eventually(t, func() bool {
		return a.admin.Get(ctx, types.NamespacedName{Name: gsC}, &gs) == nil && gs.Spec.GatewayEndpoint != nil && gs.Spec.GatewayEndpoint.Address == gatewayC
	}, 20*time.Second, 50*time.Millisecond, "site C was never discovered")
	remoteProviders := func() int32 {
		var got v1alpha1.GridNetwork
		_ = a.admin.Get(ctx, types.NamespacedName{Name: network}, &got)
		return got.Status.RemoteProviderCount
	}
	require.Eventually(t, func() bool { return remoteProviders() == 1 }, 20*time.Second, 50*time.Millisecond)

	// The forgeries, from a key holder.
	holder := testnet.KeyHolder(t, a.key)
	host, port, err := net.SplitHostPort(a.swim)
	require.NoError(t, err)
	p, _ := strconv.Atoi(port)
	to := &memberlist.Node{Name: "agent", Addr: net.ParseIP(host), Port: uint16(p)}
	now := uint64(time.Now().UnixNano())
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
	require.NoError(t, holder.SendReliable(to, msg))
	require.Eventually(t, func() bool { return a.metric("grid_swim_records_rejected_total") >= float64(len(forged)) }, 10*time.Second, 50*time.Millisecond)
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
		figure{"rejected", int(a.metric("grid_swim_records_rejected_total"))}, figure{"invented_sites", invented})
}
