package attack

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"

	"github.com/gridsync/gridsync/api/v1alpha1"
	"github.com/gridsync/gridsync/controller"
	"github.com/gridsync/gridsync/controller/rbac"
	deliveryreport "github.com/gridsync/gridsync/delivery/report"
	membership "github.com/gridsync/gridsync/gossip"
	"github.com/gridsync/gridsync/gossip/sites"
	"github.com/gridsync/gridsync/signals"
	"github.com/gridsync/gridsync/signals/httpapi"
	"github.com/gridsync/gridsync/test/controlplane"
	"github.com/gridsync/gridsync/test/framework"
	"github.com/gridsync/gridsync/test/testnet"
	"github.com/gridsync/gridsync/test/testpki"
	"github.com/gridsync/gridsync/test/testproc"
	"github.com/gridsync/gridsync/trust/bundle"
	"github.com/gridsync/gridsync/trust/enrol"
	"github.com/gridsync/gridsync/trust/sitetrust"
)

// An issuer agent (SWIM, its signals listener, enrolment) and site C, a
// member of its network with a certificate of the grid CA, announcing a
// provider and holding a connection to the listener open. The issuer's
// operator evicts C. C keeps going with its still-valid certificate: it
// gossips fresh signed records, connects to the listener (its signals,
// its provider list, the delivery reports), renews. Held when nothing of
// it is taken: no record stored, no connection served, no certificate
// issued; its open connection closed, its GridSite Evicted, its provider
// gone from the network.
func TestEvictedSite(t *testing.T) {
	ctx := context.Background()
	a := startEvictionIssuer(t)
	pairC := a.enrol("site-c")
	c := a.startSite(t, "site-c", pairC, []sites.Provider{{Name: "prov-c", Models: []string{"model-c"}, Cluster: "c", Phase: "Available"}})
	require.Eventually(t, func() bool { return a.remoteProviders() == 1 }, 30*time.Second, 50*time.Millisecond, "C's provider never arrived")

	// Before: C is served, and renews.
	held := a.listenerClient(pairC)
	require.Equal(t, http.StatusOK, a.get(held, httpapi.ProvidersPath), "the listener serves C before the eviction")
	require.Equal(t, http.StatusNotFound, a.get(held, bundle.Path+"?network="+a.network), "no trust bundle before the eviction")
	renewed, err := a.renew(pairC)
	require.NoError(t, err, "C renews before the eviction")
	require.NotNil(t, renewed)

	evicted := time.Now()
	a.evict("site-c")
	require.Eventually(t, func() bool {
		var gs v1alpha1.GridSite
		return a.admin.Get(ctx, types.NamespacedName{Name: a.network + "-site-c"}, &gs) == nil && gs.Status.Phase == sitetrust.PhaseEvicted
	}, 30*time.Second, 20*time.Millisecond, "C's GridSite never Evicted")
	require.Eventually(t, func() bool { return a.remoteProviders() == 0 }, 30*time.Second, 20*time.Millisecond, "C's provider stayed")
	withdrawnMs := time.Since(evicted).Milliseconds()
	// The connection C held open is closed by the eviction itself (the
	// listener counts it), not found closed by a new dial.
	require.Eventually(t, func() bool {
		_, body := testproc.Get(t, "http://"+a.health+"/metrics")
		for _, line := range strings.Split(body, "\n") {
			if v, ok := strings.CutPrefix(line, `gridsync_signals_connection_closes_total{reason="evicted",transport="tcp"} `); ok && v != "0" {
				return true
			}
		}
		return false
	}, 30*time.Second, 50*time.Millisecond, "the open connection was never closed for the eviction")
	openClosed := a.get(held, httpapi.ProvidersPath) == 0

	// After: C keeps going, with its still-valid certificates (the one
	// it had and the one it renewed to).
	rounds := size(200, 20)
	holder := testnet.KeyHolder(t, a.key)
	to := a.node(t)
	outcomes := a.recordOutcomes()
	var served, issued, sent atomic.Int64
	for i := range rounds {
		cert := pairC
		if i%2 == 1 {
			cert = renewed
		}
		rec := membership.Record{Network: a.network, Site: "site-c", Kind: membership.KindProviders, Version: uint64(time.Now().UnixNano()),
			Providers: []sites.Provider{{Name: "prov-c", Models: []string{"model-c", fmt.Sprintf("model-%d", i)}, Cluster: "c", Phase: "Available"}}}
		require.NoError(t, rec.Sign(cert))
		msg, err := membership.DirectMessage([]membership.Record{rec})
		require.NoError(t, err)
		require.NoError(t, holder.SendReliable(to, msg))
		sent.Add(1)
		cl := a.listenerClient(cert)
		for _, path := range []string{httpapi.ProvidersPath, signals.Path, deliveryreport.Path, bundle.Path + "?network=" + a.network} {
			if a.get(cl, path) != 0 {
				served.Add(1)
			}
		}
		cl.CloseIdleConnections()
		if got, err := a.renew(cert); err == nil && got != nil {
			issued.Add(1)
		}
	}
	require.Eventually(t, func() bool {
		now := a.recordOutcomes()
		return now.refused+now.shed-outcomes.refused-outcomes.shed >= float64(sent.Load())
	}, 30*time.Second, 50*time.Millisecond, "the agent never accounted for C's records")
	time.Sleep(time.Second)
	stored := a.remoteProviders()
	stillGossiping := c.Status().Running // C never stopped: its own runtime kept announcing
	report(t, "evicted_site", openClosed && served.Load() == 0 && issued.Load() == 0 && stored == 0,
		figure{"rounds", rounds}, figure{"records_sent", sent.Load()}, figure{"records_stored", stored},
		figure{"requests_served", served.Load()}, figure{"renewals_issued", issued.Load()},
		figure{"open_connection_closed", openClosed}, figure{"c_still_gossiping", stillGossiping}, figure{"providers_withdrawn_ms", withdrawnMs})
}

// evictionIssuer is an agent that issues its network's certificates,
// runs SWIM in it and serves its signals listener: every port an evicted
// site could reach.
type evictionIssuer struct {
	*swimAgent
	network string
	signals string
	ca      *sitetrust.CA
	roots   *x509.CertPool
}

func startEvictionIssuer(t *testing.T) *evictionIssuer {
	t.Helper()
	ctx := context.Background()
	site := framework.NewSite(t, cp, framework.SiteOptions{Prefix: "attack", Name: listenerSite, Swim: true})
	a := &evictionIssuer{swimAgent: &swimAgent{t: t, swim: site.SwimAddr, agentNS: site.AgentNS, resNS: site.Namespace(), admin: site.Admin},
		network: fmt.Sprintf("evict-%d", site.ID), signals: testproc.FreeAddr(t)}
	a.key = make([]byte, 32)
	_, _ = rand.Read(a.key)
	pki := testpki.NewSite(t, listenerSite)
	var err error
	a.ca, err = sitetrust.ParseCA(pki.CACert, pki.CAKey)
	require.NoError(t, err)
	a.roots = pki.Roots
	require.NoError(t, cp.Grant(ctx, a.agentNS, controlplane.AgentServiceAccount, "gridsync-agent-enrollment", a.agentNS, rbac.EnrollmentTokenRules(enrol.DefaultTokenSecret)))
	require.NoError(t, cp.AgentTrustSecrets(ctx, a.agentNS, a.resNS, "grid-ca", "site-cert"))
	require.NoError(t, a.admin.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "grid-ca", Namespace: a.resNS}, Type: corev1.SecretTypeTLS,
		Data: map[string][]byte{corev1.TLSCertKey: pki.CACert, corev1.TLSPrivateKeyKey: pki.CAKey}}))
	n := &v1alpha1.GridNetwork{
		ObjectMeta: metav1.ObjectMeta{Name: a.network, Labels: map[string]string{controller.AutoDiscoverSitesLabel: "true"}},
		Spec: v1alpha1.GridNetworkSpec{
			ConsumerGateways: []v1alpha1.ConsumerGateway{{Name: "edge", Namespace: a.resNS, SiteName: listenerSite}},
			TLS: &v1alpha1.GridTLS{
				CASecretRef:     &v1alpha1.NamespacedName{Name: "grid-ca", Namespace: a.resNS},
				SiteSecretRef:   &v1alpha1.NamespacedName{Name: "site-cert", Namespace: a.resNS},
				SiteCertificate: &v1alpha1.SiteCertificate{Mode: v1alpha1.SiteCertificateIssuer},
			}},
	}
	require.NoError(t, a.admin.Create(ctx, n))
	t.Cleanup(func() { _ = a.admin.Delete(context.Background(), n) })
	agent := site.StartAgent(t, framework.AgentOptions{Timings: framework.Fast, Loopback: true,
		Env:  []string{"GRID_SWIM_ENCRYPT_KEY=" + hex.EncodeToString(a.key)},
		Args: append([]string{"--gateway-address", testproc.FreeAddr(t), "--signals-addr", a.signals}, pki.AgentArgs()...)})
	a.Proc, a.health = agent.Proc, agent.Health
	require.Eventually(t, func() bool { return a.status().Swim.Running }, 20*time.Second, 50*time.Millisecond, "SWIM never ran")
	return a
}

// enrol enrols site with a one-time token, as an enrolling agent does.
func (a *evictionIssuer) enrol(site string) *tls.Certificate {
	tokens := &enrol.Tokens{API: a.admin, Namespace: a.agentNS}
	var pair *tls.Certificate
	require.Eventually(a.t, func() bool {
		token, err := tokens.Add(context.Background(), a.network, site, time.Hour, time.Now())
		require.NoError(a.t, err)
		pair, err = a.request(enrol.Request{Network: a.network, Site: site, Token: token}, nil)
		return err == nil
	}, 30*time.Second, 300*time.Millisecond, "site %s never enrolled", site)
	return pair
}

// startSite runs site as a member of the network that joins the agent.
func (a *evictionIssuer) startSite(t *testing.T, site string, cert *tls.Certificate, providers []sites.Provider) *membership.Runtime {
	t.Helper()
	m, err := membership.New(context.Background(), membership.Config{Site: site, BindAddr: "127.0.0.1:0", EnvKey: a.key,
		ProbeInterval: time.Second, ProbeTimeout: 600 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	mctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go func() { _ = m.Start(mctx) }()
	require.Eventually(t, func() bool { return m.Status().Running }, 10*time.Second, 20*time.Millisecond)
	roots := x509.NewCertPool()
	roots.AddCert(a.ca.Cert)
	m.SetGatewayAddress(testnet.FreeTCPUDPAddr(t)) // advertised, never dialled here
	m.SetIdentity(a.network, sites.Identity{Roots: roots, RootCerts: []*x509.Certificate{a.ca.Cert}, Signer: cert})
	require.NoError(t, m.Publish(a.network, "", providers))
	require.Empty(t, m.AnnounceSeeds(a.network, []string{a.swim}).Failed)
	return m
}

func (a *evictionIssuer) remoteProviders() int32 {
	var n v1alpha1.GridNetwork
	_ = a.admin.Get(context.Background(), types.NamespacedName{Name: a.network}, &n)
	return n.Status.RemoteProviderCount
}

// evict lists site in the network's evictedSites, as `gridsync-agent
// evict` does.
func (a *evictionIssuer) evict(site string) {
	require.NoError(a.t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var n v1alpha1.GridNetwork
		if err := a.admin.Get(context.Background(), types.NamespacedName{Name: a.network}, &n); err != nil {
			return err
		}
		sc := n.Spec.TLS.SiteCertificate
		if !slices.Contains(sc.EvictedSites, site) {
			sc.EvictedSites = append(sc.EvictedSites, site)
		}
		return a.admin.Update(context.Background(), &n)
	}))
}

// listenerClient is an HTTPS client of the listener presenting cert, on
// connections it keeps open.
func (a *evictionIssuer) listenerClient(cert *tls.Certificate) *http.Client {
	return &http.Client{Timeout: 3 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{Certificates: []tls.Certificate{*cert}, RootCAs: a.roots, ServerName: sitetrust.DNSName(listenerSite), MinVersion: tls.VersionTLS12},
	}}
}

// get is the status of a GET of path, 0 when no answer came (the
// connection closed).
func (a *evictionIssuer) get(c *http.Client, path string) int {
	req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, "https://"+a.signals+path, nil)
	require.NoError(a.t, err)
	resp, err := c.Do(req)
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode
}

// renew asks the issuer for a certificate of a new key with current, as
// a renewing site does.
func (a *evictionIssuer) renew(current *tls.Certificate) (*tls.Certificate, error) {
	return a.request(enrol.Request{Network: a.network, Site: "site-c"}, current)
}

func (a *evictionIssuer) request(req enrol.Request, current *tls.Certificate) (*tls.Certificate, error) {
	key, csr, err := enrol.NewKey()
	require.NoError(a.t, err)
	req.CSR = string(csr)
	chain, err := (&enrol.Client{Timeout: 5 * time.Second}).Request(context.Background(), enrol.Issuer{Address: a.signals, Site: listenerSite}, a.roots, req, current, key)
	if err != nil {
		return nil, err
	}
	return pairOf(a.t, chain, key), nil
}
