package multisite

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gridsync/gridsync/api/v1alpha1"
	membership "github.com/gridsync/gridsync/gossip"
	"github.com/gridsync/gridsync/gossip/sites"
	"github.com/gridsync/gridsync/test/framework"
	"github.com/gridsync/gridsync/test/testnet"
	"github.com/gridsync/gridsync/test/testproc"
	"github.com/gridsync/gridsync/trust/sitetrust"
)

// An issuer (A) and two enrolled sites (B, C) on three clusters. The
// issuer's operator evicts C with `gridsync-agent evict`: within seconds
// A and B set C's GridSite Evicted, drop C's records and provider, and
// refuse what C sends with its still-valid certificate (gossip records,
// a connection to the issuer's listener, a renewal). B, restarted while
// the issuer is down, still refuses C: the eviction is kept in B's own
// status. Lifting the eviction does not readmit C's old certificate; C
// comes back by enrolling again with a new token.
func TestAnEvictedSiteIsRefusedEverywhere(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	key := newKey(t)
	g := newIssuerGrid(t, ctx, key, []string{"site-a", "site-b", "site-c"},
		"--site-probe-interval", "1s", "--site-probe-timeout", "1s", "--site-cert-lifetime", "1h")
	a, b, c := g.sites[0], g.sites[1], g.sites[2]
	g.formed()
	for _, s := range []*site{a, b} {
		_, ok := s.candidate("grid", "site-c", "model-c")
		require.True(t, ok, "%s routes C's provider before the eviction", s.Name)
	}
	certC := c.secretData("site-cert")
	pairC, err := tls.X509KeyPair(certC["tls.crt"], certC["tls.key"])
	require.NoError(t, err)
	require.Equal(t, "served", listenerVerdict(t, g.issuer, &pairC), "the issuer's listener serves C before the eviction")

	out, _ := g.operator("evict", "--network", "grid", "--site", "site-c")
	assert.Contains(t, out, "evicted site site-c")

	for _, s := range []*site{a, b} {
		s.gridSite("grid-site-c", "Evicted", func(gs *v1alpha1.GridSite) bool {
			return gs.Status.Phase == sitetrust.PhaseEvicted && gs.Status.Reason == sitetrust.ReasonSiteEvicted
		})
		framework.Eventually(t, 30*time.Second, s.Name+" without C's provider", func() (bool, string) {
			_, ok := s.candidate("grid", "site-c", "model-c")
			return !ok, "still routed"
		})
		n := s.networkStatus("grid", 30*time.Second, func(n *v1alpha1.GridNetwork) bool {
			return n.Status.TrustBundle != nil && slices.Equal(n.Status.TrustBundle.EvictedSites, []string{"site-c"})
		})
		assert.NotEmpty(t, n.Status.TrustBundle.Signed, "%s keeps the signed bundle", s.Name)
		_, ok := s.candidate("grid", "site-b", "model-b")
		if s == a {
			assert.True(t, ok, "B stays routable at A")
		}
	}
	for i := range 2 {
		assert.Positive(t, g.agents[i].metric(`grid_swim_records_rejected_total{reason="evicted"}`), "%s dropped C's records", g.sites[i].Name)
	}

	// C, with its still-valid certificate: its newest records are refused,
	// its connection to the issuer's listener is closed, its renewal
	// refused.
	refusedAsEvicted(t, key, &pairC, g.agents[:2], []*site{a, b})
	assert.Equal(t, "closed", listenerVerdict(t, g.issuer, &pairC), "the issuer's listener serves C")

	// B restarts while the issuer is down: the eviction holds from B's
	// status alone.
	require.NoError(t, g.agents[0].Cmd.Process.Kill())
	require.NoError(t, g.agents[1].Cmd.Process.Kill())
	g.agents[1] = b.start(nil, g.flags...)
	// It leads, and runs SWIM, once the killed one's lease ran out.
	framework.Eventually(t, 30*time.Second, "B's new agent runs SWIM", func() (bool, string) {
		return g.agents[1].status().Swim.Running, "not yet"
	})
	// The new process refuses C's records (C reaches B directly: its
	// seed, the issuer, is down) and counts C's GridSite Evicted.
	refusedAsEvicted(t, key, &pairC, g.agents[1:2], []*site{b})
	framework.Eventually(t, 30*time.Second, "B counts C evicted after a restart", func() (bool, string) {
		v := g.agents[1].metric(`grid_sites{phase="Evicted"}`)
		return v == 1, fmt.Sprint(v)
	})
	_, ok := b.candidate("grid", "site-c", "model-c")
	assert.False(t, ok, "B routes C again after a restart")

	// The issuer back, and the eviction lifted: C's certificate from
	// before the eviction stays refused, at A and at B.
	g.agents[0] = a.start(nil, append(slices.Clone(g.flags), g.issuerFlags...)...)
	// B tries its seed, the issuer, again within half a minute.
	framework.Eventually(t, 60*time.Second, "B meets the issuer again", func() (bool, string) {
		m, ok := g.agents[1].member("site-a")
		return ok && m.State == sites.SiteAlive && m.Generation > 0, fmt.Sprintf("%+v", m)
	})
	out, _ = g.operator("evict", "--network", "grid", "--site", "site-c", "--lift", "--namespace", a.AgentNS)
	assert.Contains(t, out, "lifted the eviction of site site-c")
	assert.Contains(t, out, "released site site-c of network grid")
	for _, s := range []*site{a, b} {
		s.networkStatus("grid", 30*time.Second, func(n *v1alpha1.GridNetwork) bool {
			return n.Status.TrustBundle != nil && len(n.Status.TrustBundle.EvictedSites) == 0
		})
		gs := s.gridSite("grid-site-c", "judged again", func(gs *v1alpha1.GridSite) bool {
			return gs.Status.Phase != sitetrust.PhaseEvicted && gs.Status.Reason == sitetrust.ReasonSiteEvicted
		})
		assert.NotEqual(t, sitetrust.PhaseActive, gs.Status.Phase)
	}
	refusedAsEvicted(t, key, &pairC, g.agents[:2], []*site{a, b})
	assert.Equal(t, "closed", listenerVerdict(t, g.issuer, &pairC), "the issuer's listener serves C's old certificate after the lift")

	// C comes back by enrolling again, with a new token, under a new key:
	// Active at A and B, its provider routed.
	c.secret("enrol-token", map[string][]byte{"token": []byte(g.newToken("site-c", "10m"))})
	require.NoError(t, c.Admin.Delete(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "site-cert", Namespace: c.Namespace()}}))
	renewed := c.waitSecret("site-cert", func(d map[string][]byte) bool {
		return len(d["tls.key"]) > 0 && string(d["tls.crt"]) != string(certC["tls.crt"])
	})
	assert.NotEqual(t, string(certC["tls.key"]), string(renewed["tls.key"]), "a new key")
	for _, s := range []*site{a, b} {
		s.gridSite("grid-site-c", "Active again", func(gs *v1alpha1.GridSite) bool { return gs.Status.Phase == sitetrust.PhaseActive })
		framework.Eventually(t, 30*time.Second, s.Name+" routes C's provider again", func() (bool, string) {
			_, ok := s.candidate("grid", "site-c", "model-c")
			return ok, "not routed"
		})
	}
}

// sendAsC signs a fresh record of C's with C's certificate and sends it
// straight to the sites' SWIM ports, as C's agent would.
func sendAsC(t *testing.T, key []byte, pair *tls.Certificate, to []*site) {
	t.Helper()
	ml := testnet.KeyHolder(t, key)
	rec := membership.Record{Network: "grid", Site: "site-c", Kind: membership.KindProviders, Version: uint64(time.Now().UnixNano()),
		Providers: []sites.Provider{{Name: "prov-evicted", Models: []string{"model-evicted"}, Cluster: "site-c", Phase: "Available"}}}
	require.NoError(t, rec.Sign(pair))
	msg, err := membership.DirectMessage([]membership.Record{rec})
	require.NoError(t, err)
	for _, s := range to {
		host, port, err := net.SplitHostPort(s.SwimAddr)
		require.NoError(t, err)
		p, _ := strconv.Atoi(port)
		require.NoError(t, ml.SendReliable(&memberlist.Node{Name: s.Name, Addr: net.ParseIP(host), Port: uint16(p)}, msg))
	}
}

// listenerVerdict connects to a signals listener with a client
// certificate and asks for the provider list: "served" when it answers,
// "closed" when the connection is closed unanswered, "no answer" when
// nothing came within the deadline.
func listenerVerdict(t *testing.T, addr string, pair *tls.Certificate) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	d := tls.Dialer{Config: &tls.Config{Certificates: []tls.Certificate{*pair}, InsecureSkipVerify: true, NextProtos: []string{"http/1.1"}}} //nolint:gosec // the verdict on the client is the question
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return "refused: " + err.Error()
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := fmt.Fprintf(conn, "GET /v1/grid/providers HTTP/1.1\r\nHost: %s\r\n\r\n", addr); err != nil {
		return "closed"
	}
	buf := make([]byte, 64)
	n, err := conn.Read(buf)
	switch {
	case n > 0 && strings.HasPrefix(string(buf[:n]), "HTTP/1.1 "):
		return "served"
	case errors.Is(err, os.ErrDeadlineExceeded):
		return "no answer"
	case err != nil:
		return "closed"
	}
	return "no answer"
}

// refusedAsEvicted sends a fresh record signed with pair (C's
// certificate) to the sites, and waits until each of their agents
// counted it refused as evicted.
func refusedAsEvicted(t *testing.T, key []byte, pair *tls.Certificate, agents []*agent, to []*site) {
	t.Helper()
	const series = `grid_swim_records_rejected_total{reason="evicted"}`
	before := make([]float64, len(agents))
	for i, a := range agents {
		before[i] = max(a.metric(series), 0)
	}
	sendAsC(t, key, pair, to)
	for i, a := range agents {
		framework.Eventually(t, 30*time.Second, a.site.Name+" refuses C's record as evicted", func() (bool, string) {
			v := a.metric(series)
			return v > before[i], fmt.Sprintf("%v refused, %v before", v, before[i])
		})
	}
	// The count also moves for C's own records, which its running agent
	// keeps gossiping: what was sent must also be in no site's overlay.
	for _, s := range to {
		_, ok := s.candidate("grid", "site-c", "model-evicted")
		assert.False(t, ok, "%s routes the evicted site's forged provider", s.Name)
	}
}

// A site that runs no SWIM hears no gossip: it takes its issuer's
// evictions from the issuer's listener, where it fetches the network's
// trust bundle at every poll of its Secrets, and keeps them in its status.
func TestASiteWithoutGossipTakesTheEvictionFromItsIssuer(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	g := newIssuerGrid(t, ctx, newKey(t), []string{"site-a"}, "--site-probe-interval", "1s", "--site-probe-timeout", "1s")
	cp := clusters[1]
	b := &site{Site: framework.NewSite(t, cp, framework.SiteOptions{Prefix: "grid", Name: "site-b"}), t: t, gateway: testproc.FreeAddr(t)}
	require.NoError(t, cp.AgentTrustSecrets(ctx, b.AgentNS, b.Namespace(), "grid-ca", "site-cert"))
	b.secret("swim-key", map[string][]byte{"key": newKey(t)})
	require.NoError(t, b.Admin.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "grid-ca", Namespace: b.Namespace()},
		Data: map[string]string{"ca.crt": string(g.caData["ca.crt"])}}))
	b.secret("enrol-token", map[string][]byte{"token": []byte(g.newToken("site-b", "10m"))})
	b.identityNetwork("grid", &v1alpha1.SiteCertificate{Mode: v1alpha1.SiteCertificateEnrolled,
		Issuer:                   &v1alpha1.EnrollmentIssuer{Address: g.issuer, Site: "site-a"},
		EnrollmentTokenSecretRef: &v1alpha1.NamespacedKeyRef{Name: "enrol-token", Namespace: b.Namespace()}})
	b.start(nil, "--site-probe-interval", "1s", "--site-probe-timeout", "1s")
	b.waitSecret("site-cert", func(d map[string][]byte) bool { return len(d["tls.key"]) > 0 })

	g.operator("evict", "--network", "grid", "--site", "site-x")
	n := b.networkStatus("grid", 20*time.Second, func(n *v1alpha1.GridNetwork) bool {
		return n.Status.TrustBundle != nil && slices.Equal(n.Status.TrustBundle.EvictedSites, []string{"site-x"})
	})
	assert.Equal(t, v1alpha1.NetworkPending, n.Status.Phase, "B runs no SWIM")
}
