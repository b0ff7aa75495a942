package multisite

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"

	"github.com/gridsync/gridsync/api/v1alpha1"
	"github.com/gridsync/gridsync/controller"
	membership "github.com/gridsync/gridsync/gossip"
	"github.com/gridsync/gridsync/gossip/sites"
	"github.com/gridsync/gridsync/test/framework"
	"github.com/gridsync/gridsync/test/testgateway"
	"github.com/gridsync/gridsync/test/testnet"
	"github.com/gridsync/gridsync/test/testpki"
	"github.com/gridsync/gridsync/trust/enrol"
	"github.com/gridsync/gridsync/trust/sitetrust"
)

// identityNetwork is a GridNetwork whose sites trust any site the grid CA
// signed (SPIFFE mode: no pins, so that renewed certificates need no
// operator), with the given way of obtaining the site certificate.
func (s *site) identityNetwork(name string, sc *v1alpha1.SiteCertificate, seeds ...string) {
	s.t.Helper()
	t := &v1alpha1.GridTLS{
		SwimKeySecretRef: &v1alpha1.NamespacedKeyRef{Name: "swim-key", Namespace: s.Namespace()},
		SiteSecretRef:    &v1alpha1.NamespacedName{Name: "site-cert", Namespace: s.Namespace()},
		SiteCertificate:  sc,
	}
	if sc.Mode == v1alpha1.SiteCertificateIssuer {
		t.CASecretRef = &v1alpha1.NamespacedName{Name: "grid-ca", Namespace: s.Namespace()}
	} else {
		t.CAConfigMapRef = &v1alpha1.NamespacedKeyRef{Name: "grid-ca", Namespace: s.Namespace()}
	}
	n := &v1alpha1.GridNetwork{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{controller.AutoDiscoverSitesLabel: "true"}},
		Spec: v1alpha1.GridNetworkSpec{
			Seeds:            seeds,
			ConsumerGateways: []v1alpha1.ConsumerGateway{{Name: "edge", Namespace: s.Namespace(), SiteName: s.Name}},
			TLS:              t,
			PeerTrust:        &v1alpha1.PeerTrust{Mode: "spiffe"},
		},
	}
	require.NoError(s.t, s.Admin.Create(context.Background(), n))
	s.t.Cleanup(func() { s.remove(n) })
}

// project keeps a site's certificate where the kubelet and the gateway
// would: the Secret's current content in files (for the signals
// listener) and presented by the site's gateway, as it changes (its
// certificate, or the CAs it trusts).
func (s *site) project(ctx context.Context, files *testpki.Projection, gw *testgateway.Gateway) {
	var last []byte
	for {
		d := s.secretData("site-cert")
		if now := append(slices.Clip(d["tls.crt"]), d["ca.crt"]...); len(d["tls.key"]) > 0 && !bytes.Equal(now, last) {
			if files != nil {
				files.Publish(map[string][]byte{"tls.crt": d["tls.crt"], "tls.key": d["tls.key"], "ca.crt": d["ca.crt"]})
			}
			if _, err := gw.PresentSecret(d); err == nil {
				last = now
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func (s *site) identityReason(network string) string {
	var n v1alpha1.GridNetwork
	if err := s.Admin.Get(context.Background(), types.NamespacedName{Name: network}, &n); err != nil {
		return ""
	}
	for _, c := range n.Status.Conditions {
		if c.Type == controller.ConditionSiteIdentity {
			return c.Reason + ": " + c.Message
		}
	}
	return ""
}

// An issuer and two enrolled sites on three clusters. The grid CA's key
// exists only in the issuer's cluster; B and C hold its certificate and
// enrol with one-time tokens made by `gridsync-agent enroll-token`; the
// grid forms and every site is Active at the others. A key holder with no
// certificate for C forges C's records (the end of time, a forged
// gateway, an injected provider), signs them with another CA's
// certificate or another site's, and invents sites: nothing of it reaches
// any site. B renews with its current certificate; the issuer refuses
// C's renewal, and C leaves every site once its certificate expires.
func TestSitesEnrolWithTheIssuerAndNoSiteSpeaksForAnother(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	key := newKey(t)
	// Certificates of a minute: renewed at about forty seconds, so that a
	// renewal and an expiry happen within the test. Once C has enrolled,
	// the issuer will refuse C's renewal (revocation short of rotating the
	// CA): C leaves the grid when its first certificate expires.
	g := newIssuerGrid(t, ctx, key, []string{"site-a", "site-b", "site-c"},
		"--site-probe-interval", "1s", "--site-probe-timeout", "1s", "--site-cert-lifetime", "60s")
	all, agents, caData, tokens, newToken := g.sites, g.agents, g.caData, g.tokens, g.newToken
	a, b, c := all[0], all[1], all[2]
	firstOfB := string(b.secretData("site-cert")["tls.crt"])

	// What a token does not allow, asked of the issuer's listener as a
	// site without a certificate asks: each refused with its reason.
	caRoots := x509.NewCertPool()
	caRoots.AppendCertsFromPEM(caData["ca.crt"])
	ask := func(site, token string, subject pkix.Name) ([]byte, error) {
		key, _, err := enrol.NewKey()
		require.NoError(t, err)
		der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{Subject: subject}, key)
		require.NoError(t, err)
		return (&enrol.Client{}).Request(ctx, enrol.Issuer{Address: g.issuer, Site: "site-a"}, caRoots,
			enrol.Request{Network: "grid", Site: site, Token: token, CSR: string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}))}, nil, key)
	}
	refusal := func(_ []byte, err error) string {
		var r *enrol.RefusedError
		if errors.As(err, &r) {
			return r.Reason + ": " + r.Message
		}
		return fmt.Sprint(err)
	}
	assert.Contains(t, refusal(ask("site-c", tokens["site-c"], pkix.Name{})), "was used already", "a reused token")
	assert.Contains(t, refusal(ask("site-e", newToken("site-d", "10m"), pkix.Name{})), "another site", "a token for another site")
	expiring := newToken("site-f", "1s")
	time.Sleep(800 * time.Millisecond)
	assert.Contains(t, refusal(ask("site-f", expiring, pkix.Name{})), "expired", "an expired token")
	chain, err := ask("site-g", newToken("site-g", "10m"), pkix.Name{Organization: []string{"site-a"}, CommonName: "site-a"})
	require.NoError(t, err, "a request asking for another organization is answered for the token's site")
	issued, err := sitetrust.ParseCertificates(chain)
	require.NoError(t, err)
	assert.Equal(t, []string{"site-g"}, issued[0].Subject.Organization)
	assert.Equal(t, "spiffe://grid.internal/site/site-g", issued[0].URIs[0].String())

	// The issuer's operator lists C: C neither renews nor enrols again,
	// whatever token it holds.
	require.NoError(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var n v1alpha1.GridNetwork
		if err := a.Admin.Get(ctx, types.NamespacedName{Name: "grid"}, &n); err != nil {
			return err
		}
		n.Spec.TLS.SiteCertificate.RefuseRenewal = []string{"site-c"}
		return a.Admin.Update(ctx, &n)
	}))
	assert.Contains(t, refusal(ask("site-c", newToken("site-c", "10m"), pkix.Name{})), "neither renews nor enrols", "a listed site with a new token")

	// The grid forms: every site Active at the two others.
	g.formed()

	// The CA's key is in the issuer's cluster only.
	caKey := strings.Split(strings.TrimSpace(string(caData["tls.key"])), "\n")[1]
	for _, s := range []*site{b, c} {
		var secrets corev1.SecretList
		require.NoError(t, s.Admin.List(ctx, &secrets))
		for _, sec := range secrets.Items {
			for k, v := range sec.Data {
				assert.NotContains(t, string(v), caKey, "%s: Secret %s/%s key %s holds the grid CA's key", s.Name, sec.Namespace, sec.Name, k)
			}
		}
	}

	// A key holder without C's certificate speaks for C.
	gatewayOfC := a.gridSite("grid-site-c", "known", func(*v1alpha1.GridSite) bool { return true }).Spec.GatewayEndpoint.Address
	forge(t, key, caData, []*site{a, b})
	time.Sleep(3 * time.Second)
	for _, s := range []*site{a, b} {
		s.networkStatus("grid", 10*time.Second, counts(v1alpha1.NetworkActive, 2, 2))
		gs := s.gridSite("grid-site-c", "unchanged", func(gs *v1alpha1.GridSite) bool { return gs.Status.Phase == sitetrust.PhaseActive })
		assert.Equal(t, gatewayOfC, gs.Spec.GatewayEndpoint.Address, "%s took a forged gateway address", s.Name)
		var gsl v1alpha1.GridSiteList
		require.NoError(t, s.Admin.List(ctx, &gsl))
		for _, g := range gsl.Items {
			assert.NotContains(t, g.Name, "inv-", "%s: a GridSite for an invented site", s.Name)
		}
		cand, ok := s.candidate("grid", "site-c", "gpt-evil")
		assert.False(t, ok, "%s routes an injected provider: %+v", s.Name, cand)
	}
	for _, reason := range []string{"from_future", "unsigned", "untrusted_certificate", "wrong_site"} {
		assert.Positive(t, agents[0].metric(fmt.Sprintf("grid_swim_records_rejected_total{reason=%q}", reason)), reason)
	}

	// Renewal: B renews with its current certificate, no token; the
	// issuer refuses C's, and C's certificate expires.
	framework.Eventually(t, 60*time.Second, "B renewed", func() (bool, string) {
		d := b.secretData("site-cert")
		return d != nil && string(d["tls.crt"]) != firstOfB, b.identityReason("grid")
	})
	assert.Positive(t, agents[1].metric(`grid_site_identity_rotations_total{result="rotated"}`), "B's renewal counted")
	framework.Eventually(t, 90*time.Second, "C's identity expired", func() (bool, string) {
		r := c.identityReason("grid")
		return strings.HasPrefix(r, controller.ReasonIdentityExpired), r
	})
	assert.Positive(t, agents[2].metric(`grid_site_identity_rotations_total{result="refused"}`), "C's refused renewal counted")
	// C's certificate expires: C is Active nowhere, its provider gone.
	for _, s := range []*site{a, b} {
		s.gridSite("grid-site-c", "no longer Active", func(gs *v1alpha1.GridSite) bool { return gs.Status.Phase != sitetrust.PhaseActive })
		framework.Eventually(t, 30*time.Second, s.Name+" without C's provider", func() (bool, string) {
			_, ok := s.candidate("grid", "site-c", "model-c")
			return !ok, "still routed"
		})
	}
	_, ok := a.candidate("grid", "site-b", "model-b")
	assert.True(t, ok, "B, renewed, stays routable at A")
}

// forge has a key holder with no certificate for site-c send C's records
// to the given sites in four ways, and records for fifty invented sites.
func forge(t *testing.T, key []byte, caData map[string][]byte, to []*site) {
	t.Helper()
	ml := testnet.KeyHolder(t, key)

	now := uint64(time.Now().UnixNano())
	evil := []sites.Provider{{Name: "gpt-evil", Models: []string{"gpt-evil"}, Cluster: "site-c", Phase: "Available"}}
	siteRec := membership.Record{Network: "grid", Site: "site-c", Kind: membership.KindSite, Version: now, GatewayAddress: "127.9.9.9:443"}
	provRec := membership.Record{Network: "grid", Site: "site-c", Kind: membership.KindProviders, Version: now, Providers: evil}
	atTheEnd := func(r membership.Record) membership.Record { r.Version = math.MaxUint64; return r }
	signed := func(c *tls.Certificate, r membership.Record) membership.Record {
		require.NoError(t, r.Sign(c))
		return r
	}
	// Another CA's certificate for site-c, and the grid CA's for site-x
	// (the key holder is a site of the grid after all).
	otherCAPEM, otherCAKey, err := sitetrust.NewCA(time.Now(), time.Hour)
	require.NoError(t, err)
	otherCA, err := sitetrust.ParseCA(otherCAPEM, otherCAKey)
	require.NoError(t, err)
	gridCA, err := sitetrust.ParseCA(caData["tls.crt"], caData["tls.key"])
	require.NoError(t, err)
	pair := func(ca *sitetrust.CA, site string) *tls.Certificate {
		chain, k, err := ca.Issue(site, time.Now(), time.Hour)
		require.NoError(t, err)
		p, err := tls.X509KeyPair(chain, k)
		require.NoError(t, err)
		return &p
	}
	foreign, other := pair(otherCA, "site-c"), pair(gridCA, "site-x")
	records := []membership.Record{atTheEnd(siteRec), atTheEnd(provRec), siteRec, provRec,
		signed(foreign, siteRec), signed(foreign, provRec), signed(other, siteRec), signed(other, provRec)}
	for i := range 50 {
		records = append(records, membership.Record{Network: "grid", Site: "inv-" + strconv.Itoa(i), Kind: membership.KindSite, Version: now, GatewayAddress: "127.9.9.9:443"})
	}
	msg, err := membership.DirectMessage(records)
	require.NoError(t, err)
	var wg sync.WaitGroup
	for _, s := range to {
		host, port, err := net.SplitHostPort(s.SwimAddr)
		require.NoError(t, err)
		p, _ := strconv.Atoi(port)
		node := &memberlist.Node{Name: s.Name, Addr: net.ParseIP(host), Port: uint16(p)}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 3 {
				assert.NoError(t, ml.SendReliable(node, msg))
			}
		}()
	}
	wg.Wait()
}
