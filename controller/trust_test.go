package controller_test

import (
	"context"
	"crypto/x509"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
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
	"github.com/gridsync/gridsync/controller/probe"
	membership "github.com/gridsync/gridsync/gossip"
	"github.com/gridsync/gridsync/gossip/sites"
	"github.com/gridsync/gridsync/shared/envelope"
	"github.com/gridsync/gridsync/shared/tlsidentity"
	"github.com/gridsync/gridsync/signals"
	"github.com/gridsync/gridsync/test/testgateway"
	"github.com/gridsync/gridsync/test/testpki"
	"github.com/gridsync/gridsync/trust/sitetrust"
)

// grantTrustSecrets gives the agent what the chart's trust.secrets gives:
// get, create and patch on the named Secrets of the credential namespace.
func (e *env) grantTrustSecrets(names ...string) {
	e.t.Helper()
	require.NoError(e.t, e.cp.AgentTrustSecrets(e.ctx, e.agentNS, e.credNS, names...))
}

// logOnFailure prints the agent's log when the test failed.
func (e *env) logOnFailure() {
	e.t.Cleanup(func() {
		if e.t.Failed() {
			e.t.Log(e.logs.String())
		}
	})
}

func withSiteTrust(site string, lifetime, probeInterval time.Duration) agentOption {
	return func(o *controller.ManagerOptions) {
		o.SiteName = site
		o.SiteCertLifetime = lifetime
		o.SiteProbeInterval = probeInterval
		o.SiteProbeTimeout = time.Second
		o.SwimKeyPollInterval = 500 * time.Millisecond
		// A failed attempt at the site certificate is tried again soon.
		o.SiteRenewalRetry, o.SiteRenewalRetryMax = 500*time.Millisecond, 2*time.Second
		// The test's gateways listen on loopback, which site probes (as
		// health probes) never dial unless a CIDR allows it.
		o.ProbeDestinations = probe.Destinations{AllowCIDRs: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}
	}
}

func (e *env) secretData(name string) map[string][]byte {
	var s corev1.Secret
	if err := e.admin.Get(e.ctx, types.NamespacedName{Namespace: e.credNS, Name: name}, &s); err != nil {
		return nil
	}
	return s.Data
}

func leafOf(t *testing.T, chain []byte) *x509.Certificate {
	t.Helper()
	certs, err := sitetrust.ParseCertificates(chain)
	require.NoError(t, err)
	return certs[0]
}

// keyBodies are the base64 bodies of the private keys in Secrets, for the
// search of every status, event and log line.
func keyBodies(keys ...[]byte) []string {
	var out []string
	for _, k := range keys {
		lines := strings.Split(strings.TrimSpace(string(k)), "\n")
		if len(lines) > 2 {
			out = append(out, lines[1]) // the first line of the body
		}
	}
	return out
}

// assertNoKeys searches the agent's logs, the namespace's Events, and the
// status of every Grid object of the test for the private keys' bytes.
func (e *env) assertNoKeys(keys ...[]byte) {
	e.t.Helper()
	var haystack strings.Builder
	haystack.WriteString(e.logs.String())
	var events corev1.EventList
	require.NoError(e.t, e.admin.List(e.ctx, &events, client.InNamespace(e.agentNS)))
	for _, ev := range events.Items {
		haystack.WriteString(ev.Message + ev.Reason)
	}
	var networks v1alpha1.GridNetworkList
	require.NoError(e.t, e.admin.List(e.ctx, &networks))
	var sites v1alpha1.GridSiteList
	require.NoError(e.t, e.admin.List(e.ctx, &sites))
	fmt.Fprintf(&haystack, "%+v%+v", networks.Items, sites.Items)
	require.NotEmpty(e.t, keyBodies(keys...))
	for _, body := range keyBodies(keys...) {
		assert.NotContains(e.t, haystack.String(), body, "a private key in a log line, an Event or a status")
	}
	assert.NotContains(e.t, haystack.String(), "PRIVATE KEY")
}

// The first site of a grid: the agent generates the grid CA into the CA
// Secret that does not exist, issues its site certificate into the site
// Secret with the SVID profile, renews it at two thirds of a short
// lifetime without touching the CA, and the sidecar's identity sync
// publishes the renewed generation from a kubelet-style projection of the
// Secret without a restart. No key reaches a status, an Event or a log.
func TestSiteIdentityIsIssuedAndRenewed(t *testing.T) {
	e := newEnv(t)
	e.logOnFailure()
	e.grantTrustSecrets("grid-ca", "site-cert")
	network := e.network(e.gateway("edge", "east"))
	network.Spec.TLS = &v1alpha1.GridTLS{
		CASecretRef:   &v1alpha1.NamespacedName{Name: "grid-ca", Namespace: e.credNS},
		SiteSecretRef: &v1alpha1.NamespacedName{Name: "site-cert", Namespace: e.credNS},
	}
	e.create(network)
	e.startAgent(withSiteTrust("east", 6*time.Second, time.Second))

	ca, caData := e.gridCA()
	assert.Equal(t, caData["tls.crt"], caData["ca.crt"])
	var first map[string][]byte
	e.eventually("the site certificate", func() (bool, string) {
		first = e.secretData("site-cert")
		return first != nil, "not yet"
	})

	held, err := sitetrust.ParseHeld(first["tls.crt"], first["tls.key"])
	require.NoError(t, err)
	require.NoError(t, sitetrust.CheckSVID(held.Leaf, "east"))
	assert.Equal(t, sitetrust.EncodeCertificate(ca.Cert), first["ca.crt"])
	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert)
	_, err = held.Leaf.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
	require.NoError(t, err)
	var secret corev1.Secret
	require.NoError(t, e.admin.Get(e.ctx, types.NamespacedName{Namespace: e.credNS, Name: "site-cert"}, &secret))
	assert.Equal(t, corev1.SecretTypeTLS, secret.Type)
	var caSecret corev1.Secret
	require.NoError(t, e.admin.Get(e.ctx, types.NamespacedName{Namespace: e.credNS, Name: "grid-ca"}, &caSecret))

	// SiteIdentity is membership's; Ready, which says the fields not
	// acted on, is the overlay reconcile's: both are waited for, so that
	// the check below reads a Ready that was written.
	got := e.networkStatus(network, "SiteIdentity true, and Ready written", func(n *v1alpha1.GridNetwork) (bool, string) {
		c, ready := condition(n, controller.ConditionSiteIdentity), condition(n, "Ready")
		return c.Status == metav1.ConditionTrue && ready.Reason != "", c.Reason + ": " + c.Message + "; Ready " + ready.Reason
	})
	assert.Empty(t, unsupported(got), "site trust fields are acted on")

	// The sidecar's identity sync, from the Secret as the kubelet projects it.
	proj := testpki.NewProjection(t)
	proj.Publish(first)
	out := t.TempDir()
	reloader, err := tlsidentity.New(tlsidentity.Options{
		CertFile: proj.Path("tls.crt"), KeyFile: proj.Path("tls.key"), CAFile: proj.Path("ca.crt"),
		RequireServerAuth: true, OnChange: tlsidentity.PublishTo(out),
	})
	require.NoError(t, err)
	published := func() *x509.Certificate {
		b, err := os.ReadFile(filepath.Join(out, "tls.crt"))
		require.NoError(t, err)
		return leafOf(t, b)
	}
	assert.Equal(t, held.Leaf.SerialNumber, published().SerialNumber)

	// Renewed at two thirds of six seconds, with the same CA.
	var renewed map[string][]byte
	e.eventually("a renewed site certificate", func() (bool, string) {
		renewed = e.secretData("site-cert")
		return renewed != nil && leafOf(t, renewed["tls.crt"]).SerialNumber.Cmp(held.Leaf.SerialNumber) != 0, "not yet"
	})
	next := leafOf(t, renewed["tls.crt"])
	// Certificate times have whole seconds, and a leaf starts a little
	// before it is issued.
	assert.False(t, next.NotBefore.Before(sitetrust.RenewAt(held.Leaf).Add(-2*time.Second)), "renewed near two thirds, not at once")
	require.NoError(t, sitetrust.CheckSVID(next, "east"))
	var caAfter corev1.Secret
	require.NoError(t, e.admin.Get(e.ctx, types.NamespacedName{Namespace: e.credNS, Name: "grid-ca"}, &caAfter))
	assert.Equal(t, caSecret.ResourceVersion, caAfter.ResourceVersion, "the CA is never rewritten")

	proj.Publish(renewed)
	reloader.Poll()
	assert.Equal(t, next.SerialNumber, published().SerialNumber, "the renewed generation is published with no restart")
	assert.Equal(t, sitetrust.Fingerprint(next.Raw), reloader.Current().Fingerprint)

	e.assertNoKeys(caData["tls.key"], first["tls.key"], renewed["tls.key"])
}

// A CA Secret that exists is used as it is, never replaced; one without
// its key cannot issue, and the network says so.
func TestAnExistingGridCAIsKept(t *testing.T) {
	e := newEnv(t)
	e.logOnFailure()
	e.grantTrustSecrets("grid-ca", "site-cert")
	root := testpki.NewRoot(t, "operator-ca")
	e.create(e.secret("grid-ca", map[string][]byte{"tls.crt": root.PEM}))
	network := e.network(e.gateway("edge", "east"))
	network.Spec.TLS = &v1alpha1.GridTLS{
		CASecretRef:   &v1alpha1.NamespacedName{Name: "grid-ca", Namespace: e.credNS},
		SiteSecretRef: &v1alpha1.NamespacedName{Name: "site-cert", Namespace: e.credNS},
	}
	e.create(network)
	e.startAgent(withSiteTrust("east", time.Hour, time.Second))
	// Membership writes the identity condition; the overlay reconcile
	// folds it into Ready after it, so both are waited for.
	e.networkStatus(network, "SiteCertificateMissing, and not Ready", func(n *v1alpha1.GridNetwork) (bool, string) {
		c, ready := condition(n, controller.ConditionSiteIdentity), condition(n, "Ready")
		return c.Reason == controller.ReasonSiteCertificateMissing && ready.Status == metav1.ConditionFalse,
			c.Reason + ": " + c.Message + "; Ready " + string(ready.Status)
	})
	assert.Equal(t, root.PEM, e.secretData("grid-ca")["tls.crt"])
	assert.Nil(t, e.secretData("site-cert"), "nothing issued without the CA's key")
}

// A remote site's providers reach the local gateway's overlay only while
// its GridSite is Active: not on gossip alone (Connecting,
// TrustMaterialMissing), after the mutual-TLS probe passes with a pin,
// not after the gateway presents an unpinned leaf (PinMismatch, withdrawn
// in the next revision), back with the next pin added (rotation; a
// gossiped copy outside the pins is only a diagnostic), and not once the
// gateway is gone (Unreachable).
func TestRemoteProvidersOnlyWhileTheSiteIsTrusted(t *testing.T) {
	e := newEnv(t)
	e.logOnFailure()
	e.grantTrustSecrets("grid-ca", "site-cert")
	key := swimKey(t)
	e.create(e.secret("swim-key", map[string][]byte{"key": key}))
	gw := e.gateway("edge", "site-a")
	network := e.network(gw)
	network.Labels[controller.AutoDiscoverSitesLabel] = "true"
	network.Spec.TLS = &v1alpha1.GridTLS{
		SwimKeySecretRef: &v1alpha1.NamespacedKeyRef{Name: "swim-key", Namespace: e.credNS},
		CASecretRef:      &v1alpha1.NamespacedName{Name: "grid-ca", Namespace: e.credNS},
		SiteSecretRef:    &v1alpha1.NamespacedName{Name: "site-cert", Namespace: e.credNS},
	}

	// Site B: its gateway, and its membership gossiping one provider.
	stub, err := testgateway.Start("127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(stub.Close)
	remote := startSwimSite(t, "site-b", membership.Config{EnvKey: key}).running(t)
	remote.SetGatewayAddress(stub.Addr)
	remoteProviders := []sites.Provider{{Name: "remote-1", Models: []string{"m-remote"}, Cluster: "b", Phase: "Available"}}
	require.NoError(t, remote.Publish(network.Name, "", remoteProviders))
	network.Spec.Seeds = []string{"site-b.grid.test:" + portOf(remote.AdvertiseAddr())}
	e.create(network)
	e.create(e.provider("local", network.Name, "m-local"))

	site := startSwimSite(t, "site-a", membership.Config{RequireKey: true})
	store := signals.NewStore(nil)
	e.startAgent(withMembership(site, seedNames{"site-b.grid.test": "127.0.0.1"}), withSiteTrust("site-a", time.Hour, time.Second), withSignals(store))

	// The grid CA reaches site B out of band; B's gateway certificate is
	// issued from it.
	ca, caData := e.gridCA()
	// B signs its records with its site certificate: until it has one,
	// nothing of it is announced.
	remote.signsWith(t, network.Name, ca)
	// B's gateway presents a new leaf, and B gossips it.
	present := func() (pin, chain string) { return presentIssued(t, stub, ca, "site-b") }
	first, firstChain := present()
	require.NoError(t, remote.Publish(network.Name, firstChain, remoteProviders))

	gsKey := types.NamespacedName{Name: network.Name + "-site-b"}
	site1 := e.gridSite(gsKey, "Connecting without pins", func(gs *v1alpha1.GridSite) bool {
		return gs.Status.Phase == sitetrust.PhaseConnecting && gs.Status.Reason == sitetrust.ReasonTrustMaterialMissing
	})
	t.Cleanup(func() { _ = e.admin.Delete(context.Background(), site1) })
	assert.Contains(t, site1.Status.Message, "serverName")
	localOnly := func(r envelope.Result) bool { return r.CandidateCount == 1 }
	e.overlayOf(network, gw, localOnly)

	// The operator pins B's gateway certificate, checked out of band.
	update(e, site1, func(gs *v1alpha1.GridSite) {
		gs.Spec.GatewayEndpoint.TLS = &v1alpha1.GatewayTLS{Mode: "Mutual", ServerName: "site-b.grid.internal"}
		gs.Spec.Trust = &v1alpha1.SiteTrust{CanonicalFingerprints: []string{first}}
	})
	active := e.gridSite(gsKey, "Active", func(gs *v1alpha1.GridSite) bool { return gs.Status.Phase == sitetrust.PhaseActive })
	assert.Equal(t, sitetrust.ReasonTLSVerified, active.Status.Reason)
	require.NotNil(t, active.Status.LastProbeTime)
	withRemote := func(r envelope.Result) bool { return r.CandidateCount == 2 }
	cm, _ := e.overlayOf(network, gw, withRemote)
	var remoteCandidate *candidate
	for _, c := range candidatesOf(t, cm) {
		if c.Site == "site-b" {
			remoteCandidate = &c
		}
	}
	require.NotNil(t, remoteCandidate)
	assert.Equal(t, []any{"m-remote", "site-b", "site-b", true, (*envelope.Credential)(nil)},
		[]any{remoteCandidate.Name, remoteCandidate.Site, remoteCandidate.Cluster, remoteCandidate.Fresh, remoteCandidate.Credential},
		"the remote site and its gateway (the provider hop), no credential")

	// Site B gossips its provider unready (signalTransport gossip, the
	// default): the candidate stays, not fresh; ready again, fresh again.
	remoteFresh := func(fresh bool) func(envelope.Result) bool {
		return func(r envelope.Result) bool {
			if r.CandidateCount != 2 {
				return false
			}
			cm, _ := e.overlayOf(network, gw, anyRevision)
			for _, c := range candidatesOf(t, cm) {
				if c.Site == "site-b" {
					return c.Fresh == fresh
				}
			}
			return false
		}
	}
	require.NoError(t, remote.PublishSignals(network.Name, []sites.Signal{{Provider: "remote-1", Metric: signals.MetricReady, Value: 0}}))
	e.overlayOf(network, gw, remoteFresh(false))
	ready, known := store.Ready("site-b", "remote-1")
	assert.True(t, known && !ready)
	require.NoError(t, remote.PublishSignals(network.Name, []sites.Signal{{Provider: "remote-1", Metric: signals.MetricReady, Value: 1}}))
	e.overlayOf(network, gw, remoteFresh(true))

	// B's gateway presents a reissued leaf outside the pins: demoted, and
	// the next overlay revision withdraws B's provider.
	second, secondChain := present()
	e.gridSite(gsKey, "PinMismatch", func(gs *v1alpha1.GridSite) bool {
		return gs.Status.Phase == sitetrust.PhaseConnecting && gs.Status.Reason == sitetrust.ReasonPinMismatch
	})
	e.overlayOf(network, gw, localOnly)

	// Rotation: the next pin added beside the current one.
	update(e, site1, func(gs *v1alpha1.GridSite) {
		gs.Spec.Trust.CanonicalFingerprints = append(gs.Spec.Trust.CanonicalFingerprints, second)
	})
	e.gridSite(gsKey, "Active again", func(gs *v1alpha1.GridSite) bool {
		return gs.Status.Phase == sitetrust.PhaseActive && gs.Status.Reason == sitetrust.ReasonTLSVerified
	})
	e.overlayOf(network, gw, withRemote)

	// The old pin removed before B gossips its new certificate: the
	// gossiped copy matches no pin, a diagnostic that leaves the site
	// Active (gossip is not trust material); B's gossip catches up.
	update(e, site1, func(gs *v1alpha1.GridSite) { gs.Spec.Trust.CanonicalFingerprints = []string{second} })
	e.gridSite(gsKey, "AdvertisedCertMismatch", func(gs *v1alpha1.GridSite) bool {
		return gs.Status.Phase == sitetrust.PhaseActive && gs.Status.Reason == sitetrust.ReasonAdvertisedCertMismatch
	})
	e.overlayOf(network, gw, withRemote)
	require.NoError(t, remote.Publish(network.Name, secondChain, remoteProviders))
	e.gridSite(gsKey, "gossip converged", func(gs *v1alpha1.GridSite) bool {
		return gs.Status.Phase == sitetrust.PhaseActive && gs.Status.Reason == sitetrust.ReasonTLSVerified && gs.Status.PublicCertPem == secondChain
	})

	// The gateway goes away: Unreachable, withdrawn.
	stub.Close()
	e.gridSite(gsKey, "Unreachable", func(gs *v1alpha1.GridSite) bool {
		return gs.Status.Phase == sitetrust.PhaseUnreachable && gs.Status.Reason == sitetrust.ReasonConnectionFailed
	})
	e.overlayOf(network, gw, localOnly)

	var events corev1.EventList
	require.NoError(t, e.admin.List(e.ctx, &events, client.InNamespace(e.agentNS)))
	var reasons []string
	for _, ev := range events.Items {
		if ev.InvolvedObject.Kind == "GridSite" {
			reasons = append(reasons, ev.Type+"/"+ev.Reason)
		}
	}
	assert.Contains(t, reasons, "Normal/TlsVerified")
	assert.Contains(t, reasons, "Warning/PinMismatch")
	assert.Contains(t, reasons, "Warning/ConnectionFailed")
	e.assertNoKeys(caData["tls.key"], e.secretData("site-cert")["tls.key"])
	assert.NotContains(t, remote.logs.String()+site.logs.String(), "PRIVATE KEY")
}

func (e *env) gridSite(key types.NamespacedName, what string, ok func(*v1alpha1.GridSite) bool) *v1alpha1.GridSite {
	e.t.Helper()
	var gs v1alpha1.GridSite
	e.eventually(what, func() (bool, string) {
		if err := e.admin.Get(e.ctx, key, &gs); err != nil {
			return false, err.Error()
		}
		return ok(&gs), string(gs.Status.Phase) + "/" + gs.Status.Reason + ": " + gs.Status.Message
	})
	return &gs
}

// gridCA waits for the grid CA the agent generates, with its key, and
// returns it and its Secret's data.
func (e *env) gridCA() (*sitetrust.CA, map[string][]byte) {
	e.t.Helper()
	var data map[string][]byte
	e.eventually("the grid CA", func() (bool, string) {
		data = e.secretData("grid-ca")
		return data != nil, "not yet"
	})
	ca, err := sitetrust.ParseCA(data["tls.crt"], data["tls.key"])
	require.NoError(e.t, err, "the generated CA has its key")
	return ca, data
}

// presentIssued has gw present a certificate ca issues now for site, and
// returns its pin and chain.
func presentIssued(t *testing.T, gw *testgateway.Gateway, ca *sitetrust.CA, site string) (pin, chain string) {
	t.Helper()
	chainPEM, key, err := ca.Issue(site, time.Now(), time.Hour)
	require.NoError(t, err)
	leaf, err := gw.PresentSecret(map[string][]byte{"tls.crt": chainPEM, "tls.key": key, "ca.crt": sitetrust.EncodeCertificate(ca.Cert)})
	require.NoError(t, err)
	return sitetrust.Fingerprint(leaf.Raw), string(chainPEM)
}

func unsupported(n *v1alpha1.GridNetwork) string {
	if c := condition(n, "Ready"); c.Reason == controller.ReasonFieldNotSupported {
		return c.Message
	}
	return ""
}

// spiffeNetwork is a network in SPIFFE mode, its gateway edge at site,
// whose grid CA and site certificate the agent generates.
func (e *env) spiffeNetwork(site string) *v1alpha1.GridNetwork {
	e.t.Helper()
	e.grantTrustSecrets("grid-ca", "site-cert")
	network := e.network(e.gateway("edge", site))
	network.Spec.TLS = &v1alpha1.GridTLS{
		CASecretRef:   &v1alpha1.NamespacedName{Name: "grid-ca", Namespace: e.credNS},
		SiteSecretRef: &v1alpha1.NamespacedName{Name: "site-cert", Namespace: e.credNS},
	}
	network.Spec.PeerTrust = &v1alpha1.PeerTrust{Mode: "spiffe"}
	return network
}

// seedSite starts another site's SWIM runtime and its gateway, which it
// advertises, and makes it the network's seed (site-b.grid.test, which
// seedNames resolves to loopback).
func (e *env) seedSite(network *v1alpha1.GridNetwork, site string, cfg membership.Config) (*swimSite, *testgateway.Gateway) {
	e.t.Helper()
	gw, err := testgateway.Start("127.0.0.1:0")
	require.NoError(e.t, err)
	e.t.Cleanup(gw.Close)
	remote := startSwimSite(e.t, site, cfg).running(e.t)
	remote.SetGatewayAddress(gw.Addr)
	network.Spec.Seeds = []string{site + ".grid.test:" + portOf(remote.AdvertiseAddr())}
	return remote, gw
}

// handWrittenSite creates the GridSite of site at the gateway address, as
// an operator writes one (SPIFFE mode makes it Active on its SVID).
func (e *env) handWrittenSite(network *v1alpha1.GridNetwork, site, address string) *v1alpha1.GridSite {
	e.t.Helper()
	gs := &v1alpha1.GridSite{ObjectMeta: metav1.ObjectMeta{Name: network.Name + "-" + site, Labels: map[string]string{"test": e.id}},
		Spec: v1alpha1.GridSiteSpec{GridNetworkRef: network.Name, GatewayEndpoint: &v1alpha1.GatewayEndpoint{Address: address}}}
	e.create(gs)
	return gs
}

// SPIFFE mode reads no pins: a GridSite written by hand (its site named by
// its name after "<network>-") becomes Active on the SVID of its site from
// the grid CA, and not on a certificate of another site; Plaintext mode
// reaches the same gateway and is never Active.
func TestSPIFFEModeAndPlaintextMode(t *testing.T) {
	e := newEnv(t)
	e.logOnFailure()
	network := e.spiffeNetwork("east")
	e.create(network)
	e.startAgent(withSiteTrust("east", time.Hour, time.Second))
	ca, _ := e.gridCA()
	gw, err := testgateway.Start("127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(gw.Close)
	presentIssued(t, gw, ca, "north")

	key := client.ObjectKeyFromObject(e.handWrittenSite(network, "north", gw.Addr))
	e.gridSite(key, "Active without pins", func(gs *v1alpha1.GridSite) bool {
		return gs.Status.Phase == sitetrust.PhaseActive && gs.Status.Reason == sitetrust.ReasonTLSVerified
	})
	presentIssued(t, gw, ca, "south")
	got := e.gridSite(key, "IdentityMismatch", func(gs *v1alpha1.GridSite) bool {
		return gs.Status.Phase == sitetrust.PhaseConnecting && gs.Status.Reason == sitetrust.ReasonIdentityMismatch
	})
	assert.Contains(t, got.Status.Message, "north.grid.internal")

	plain := &v1alpha1.GridSite{ObjectMeta: metav1.ObjectMeta{Name: network.Name + "-plain", Labels: map[string]string{"test": e.id}}, Spec: v1alpha1.GridSiteSpec{
		GridNetworkRef:  network.Name,
		GatewayEndpoint: &v1alpha1.GatewayEndpoint{Address: gw.Addr, TLS: &v1alpha1.GatewayTLS{Mode: "Plaintext"}},
	}}
	e.create(plain)
	e.gridSite(client.ObjectKeyFromObject(plain), "reachable, never Active", func(gs *v1alpha1.GridSite) bool {
		return gs.Status.Phase == sitetrust.PhaseConnecting && gs.Status.Reason == sitetrust.ReasonIdentityVerificationRequired
	})
}

// A site that gossips a PEM with no certificate in it is
// TrustMaterialInvalid in its GridSite's status.reason, as the
// reference's public certificate exchange records it: Active (gossip is
// no trust material and changes no phase) and, its gateway gone,
// Unreachable, the probe's reason then in Connected and the message. A
// certificate gossiped again clears it.
func TestAGossipedPEMWithoutACertificateIsTrustMaterialInvalid(t *testing.T) {
	e := newEnv(t)
	e.logOnFailure()
	network := e.spiffeNetwork("site-a")
	remote, stub := e.seedSite(network, "site-b", membership.Config{})
	e.create(network)
	site := startSwimSite(t, "site-a", membership.Config{RequireKey: true})
	e.startAgent(withMembership(site, seedNames{"site-b.grid.test": "127.0.0.1"}), withSiteTrust("site-a", time.Hour, time.Second))
	ca, _ := e.gridCA()
	remote.signsWith(t, network.Name, ca)
	_, chain := presentIssued(t, stub, ca, "site-b")
	require.NoError(t, remote.Publish(network.Name, "-----BEGIN NOT A CERTIFICATE-----\nAAAA\n-----END NOT A CERTIFICATE-----\n", nil))

	key := client.ObjectKeyFromObject(e.handWrittenSite(network, "site-b", stub.Addr))
	got := e.gridSite(key, "Active, TrustMaterialInvalid", func(gs *v1alpha1.GridSite) bool {
		return gs.Status.Phase == sitetrust.PhaseActive && gs.Status.Reason == sitetrust.ReasonTrustMaterialInvalid
	})
	assert.Empty(t, got.Status.PublicCertPem, "nothing stored of a PEM that failed the structural check")
	assert.Contains(t, got.Status.Message, "no certificate in it")

	stub.Close()
	got = e.gridSite(key, "Unreachable, still TrustMaterialInvalid", func(gs *v1alpha1.GridSite) bool {
		return gs.Status.Phase == sitetrust.PhaseUnreachable && gs.Status.Reason == sitetrust.ReasonTrustMaterialInvalid
	})
	connected := meta.FindStatusCondition(got.Status.Conditions, controller.ConditionConnected)
	require.NotNil(t, connected)
	assert.Equal(t, sitetrust.ReasonConnectionFailed, connected.Reason, "the probe's own reason")

	require.NoError(t, remote.Publish(network.Name, chain, nil))
	e.gridSite(key, "the certificate stored, the probe's reason back", func(gs *v1alpha1.GridSite) bool {
		return gs.Status.PublicCertPem == chain && gs.Status.Reason == sitetrust.ReasonConnectionFailed
	})
}

// A grid CA given as a ConfigMap (caConfigMapRef, the certificate alone)
// verifies; malformed, it is TrustMaterialInvalid until it is fixed, which
// the agent notices without a restart. The site certificate is provided:
// without the CA's key nothing is issued.
func TestTrustMaterialFromACAConfigMap(t *testing.T) {
	e := newEnv(t)
	e.logOnFailure()
	caPEM, caKey, err := sitetrust.NewCA(time.Now(), time.Hour)
	require.NoError(t, err)
	ca, err := sitetrust.ParseCA(caPEM, caKey)
	require.NoError(t, err)
	chain, key, err := ca.Issue("east", time.Now(), time.Hour)
	require.NoError(t, err)
	e.create(e.secret("site-cert", map[string][]byte{"tls.crt": chain, "tls.key": key, "ca.crt": caPEM}))
	caMap := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "grid-ca", Namespace: e.credNS}, Data: map[string]string{"ca.crt": "-----BEGIN CERTIFICATE-----\nbm90IGEgY2VydA==\n-----END CERTIFICATE-----\n"}}
	require.NoError(t, e.admin.Create(e.ctx, caMap))

	network := e.network(e.gateway("edge", "east"))
	network.Spec.TLS = &v1alpha1.GridTLS{
		CAConfigMapRef: &v1alpha1.NamespacedKeyRef{Name: "grid-ca", Namespace: e.credNS},
		SiteSecretRef:  &v1alpha1.NamespacedName{Name: "site-cert", Namespace: e.credNS},
	}
	e.create(network)
	gw, err := testgateway.Start("127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(gw.Close)
	westPin, _ := presentIssued(t, gw, ca, "west")
	west := &v1alpha1.GridSite{ObjectMeta: metav1.ObjectMeta{Name: network.Name + "-west", Labels: map[string]string{"test": e.id}}, Spec: v1alpha1.GridSiteSpec{
		GridNetworkRef:  network.Name,
		GatewayEndpoint: &v1alpha1.GatewayEndpoint{Address: gw.Addr, TLS: &v1alpha1.GatewayTLS{Mode: "Mutual", ServerName: "west.grid.internal"}},
		Trust:           &v1alpha1.SiteTrust{CanonicalFingerprints: []string{westPin}},
	}}
	e.create(west)
	e.startAgent(withSiteTrust("east", time.Hour, time.Second))

	westKey := client.ObjectKeyFromObject(west)
	got := e.gridSite(westKey, "TrustMaterialInvalid", func(gs *v1alpha1.GridSite) bool {
		return gs.Status.Phase == sitetrust.PhaseConnecting && gs.Status.Reason == sitetrust.ReasonTrustMaterialInvalid
	})
	assert.Contains(t, got.Status.Message, "caConfigMapRef")
	n := e.networkStatus(network, "the provided certificate", func(n *v1alpha1.GridNetwork) (bool, string) {
		c := condition(n, controller.ConditionSiteIdentity)
		return c.Reason == controller.ReasonSiteCertificateGiven, c.Reason + ": " + c.Message
	})
	assert.Equal(t, metav1.ConditionTrue, condition(n, controller.ConditionSiteIdentity).Status)

	caMap.Data["ca.crt"] = string(caPEM)
	require.NoError(t, e.admin.Update(e.ctx, caMap))
	e.gridSite(westKey, "Active once the CA is fixed", func(gs *v1alpha1.GridSite) bool { return gs.Status.Phase == sitetrust.PhaseActive })
	assert.Equal(t, chain, e.secretData("site-cert")["tls.crt"], "a provided certificate is never rewritten")
}

// Two networks with two grid CAs naming one site Secret do not reissue
// it in turn: the first keeps it, the second says why; a third network
// with the first one's CA shares it.
func TestASiteSecretNamedByTwoNetworks(t *testing.T) {
	e := newEnv(t)
	e.logOnFailure()
	e.grantTrustSecrets("ca-one", "ca-two", "site-cert")
	one := e.network(e.gateway("edge", "east"))
	one.Spec.TLS = &v1alpha1.GridTLS{
		CASecretRef:   &v1alpha1.NamespacedName{Name: "ca-one", Namespace: e.credNS},
		SiteSecretRef: &v1alpha1.NamespacedName{Name: "site-cert", Namespace: e.credNS},
	}
	e.create(one)
	a := e.startAgent(withSiteTrust("east", time.Hour, time.Second))
	e.networkStatus(one, "issued", func(n *v1alpha1.GridNetwork) (bool, string) {
		c := condition(n, controller.ConditionSiteIdentity)
		return c.Status == metav1.ConditionTrue, c.Reason
	})
	issued := e.secretData("site-cert")["tls.crt"]

	two := e.network(e.gateway("edge-two", "east"))
	two.ObjectMeta = e.meta("net-two")
	two.Spec.TLS = &v1alpha1.GridTLS{
		CASecretRef:   &v1alpha1.NamespacedName{Name: "ca-two", Namespace: e.credNS},
		SiteSecretRef: &v1alpha1.NamespacedName{Name: "site-cert", Namespace: e.credNS},
	}
	e.create(two)
	got := e.networkStatus(two, "SiteSecretConflict", func(n *v1alpha1.GridNetwork) (bool, string) {
		c := condition(n, controller.ConditionSiteIdentity)
		return c.Reason == controller.ReasonSiteSecretConflict, c.Reason + ": " + c.Message
	})
	assert.Contains(t, condition(got, controller.ConditionSiteIdentity).Message, one.Name)

	three := e.network(e.gateway("edge-three", "east"))
	three.ObjectMeta = e.meta("net-three")
	three.Spec.TLS = one.Spec.TLS.DeepCopy()
	e.create(three)
	e.networkStatus(three, "shared", func(n *v1alpha1.GridNetwork) (bool, string) {
		c := condition(n, controller.ConditionSiteIdentity)
		return c.Status == metav1.ConditionTrue && c.Reason == controller.ReasonSiteCertificateCurrent, c.Reason + ": " + c.Message
	})

	// Several resyncs later, the Secret was written once.
	start := a.requests.count()
	time.Sleep(5 * time.Second)
	for _, w := range a.requests.since(start) {
		assert.NotContains(t, w, "/secrets/site-cert", "no write to the site Secret while two networks name it")
	}
	assert.Equal(t, issued, e.secretData("site-cert")["tls.crt"])
}
