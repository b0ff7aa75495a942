package multisite

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"

	"github.com/gridsync/gridsync/api/v1alpha1"
	"github.com/gridsync/gridsync/signals/httpapi"
	"github.com/gridsync/gridsync/test/framework"
	"github.com/gridsync/gridsync/trust/sitetrust"
)

// An issuer and two enrolled sites rotate the grid CA in its three stages
// with `gridsync-agent rotate-ca`, while the sites probe each other and
// gossip provider changes, and callers of the issuer's listener (the other
// sites' certificates, a client verifying it against the CAs its pod
// holds, as the sidecar's reporter does) keep connecting: no site leaves
// Active anywhere, no record is refused for its certificate, every change
// arrives, every connection is served. At the end every
// site holds a certificate of the new CA, trusts it alone, and a
// certificate of the old CA is refused.
func TestTheGridCARotatesWithoutAGap(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	key := newKey(t)
	// The issuer's listener reads its identity every half second: the
	// stages wait three seconds for it (--settle), as a grid waits for the
	// kubelet and its pods.
	g := newIssuerGrid(t, ctx, key, []string{"site-a", "site-b", "site-c"},
		"--site-probe-interval", "1s", "--site-probe-timeout", "1s", "--site-cert-lifetime", "1h", "--signals-identity-interval", "500ms")
	a, b, c := g.sites[0], g.sites[1], g.sites[2]
	g.formed()
	oldCA, err := sitetrust.ParseCA(g.caData["tls.crt"], g.caData["tls.key"])
	require.NoError(t, err)
	untrusted := func() (sum float64) {
		for _, ag := range g.agents {
			sum += max(ag.metric(`grid_swim_records_rejected_total{reason="untrusted_certificate"}`), 0)
		}
		return sum
	}
	refusedBefore := untrusted()

	// Throughout: every site Active at every other.
	var mu sync.Mutex
	var gaps []string
	stop := watch(100*time.Millisecond, func() {
		for _, s := range g.sites {
			for _, other := range g.sites {
				if other == s {
					continue
				}
				var gs v1alpha1.GridSite
				if s.Admin.Get(ctx, types.NamespacedName{Name: "grid-" + other.Name}, &gs) == nil && gs.Status.Phase != sitetrust.PhaseActive {
					mu.Lock()
					gaps = append(gaps, fmt.Sprintf("%s: %s %s (%s: %s)", s.Name, other.Name, gs.Status.Phase, gs.Status.Reason, gs.Status.Message))
					mu.Unlock()
				}
			}
		}
	})
	// And the issuer's listener, throughout: B and C, as their signals
	// polls do, present their current certificates and verify the
	// listener against the CAs their own Secret holds, and are served; a
	// client that verifies the listener against the CAs the issuer's pod
	// holds, read again for each connection as the sidecar's delivery
	// reporter does, connects.
	began := time.Now()
	for _, s := range []*site{b, c} {
		d := s.secretData("site-cert")
		pair, err := tls.X509KeyPair(d["tls.crt"], d["tls.key"])
		require.NoError(t, err)
		require.Equal(t, "served", listenerVerdict(t, g.issuer, &pair), "the issuer's listener serves %s before the rotation", s.Name)
	}
	stopListener := watch(200*time.Millisecond, func() {
		for _, s := range []*site{b, c} {
			d := s.secretData("site-cert")
			pair, err := tls.X509KeyPair(d["tls.crt"], d["tls.key"])
			if err != nil {
				continue
			}
			if v := pollVerdict(ctx, g.issuer, &pair, d["ca.crt"], sitetrust.DNSName(a.Name)); v != "served" {
				mu.Lock()
				gaps = append(gaps, fmt.Sprintf("%s: the issuer's listener and %s's certificate: %s", time.Since(began).Round(time.Millisecond), s.Name, v))
				mu.Unlock()
			}
		}
		if err := verifiedDial(ctx, g.issuer, g.issuerFiles.Path("ca.crt"), sitetrust.DNSName(a.Name)); err != nil {
			mu.Lock()
			gaps = append(gaps, "a reporter verifying the issuer's listener: "+err.Error())
			mu.Unlock()
		}
	})
	// And a change of B's providers reaches A and C after each stage.
	changes := 0
	changeB := func() {
		changes++
		model := fmt.Sprintf("model-b-%d", changes)
		require.NoError(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
			var p v1alpha1.InferenceProvider
			if err := b.Admin.Get(ctx, types.NamespacedName{Name: "prov-b"}, &p); err != nil {
				return err
			}
			p.Spec.Models = []v1alpha1.Model{{Name: model}}
			return b.Admin.Update(ctx, &p)
		}))
		for _, s := range []*site{a, c} {
			framework.Eventually(t, 30*time.Second, s.Name+" gets "+model, func() (bool, string) {
				_, ok := s.candidate("grid", "site-b", model)
				return ok, "not yet"
			})
		}
	}

	for _, stage := range []string{"add", "switch", "retire"} {
		var out string
		framework.Eventually(t, 30*time.Second, "rotate-ca --stage "+stage, func() (bool, string) {
			o, errOut, err := g.tryOperator("rotate-ca", "--network", "grid", "--stage", stage, "--timeout", "2m", "--settle", "3s")
			out = o
			return err == nil, errOut
		})
		t.Logf("%s: rotate-ca --stage %s: %s", time.Since(began).Round(time.Millisecond), stage, strings.ReplaceAll(strings.TrimSpace(out), "\n", "; "))
		changeB()
	}
	stop()
	stopListener()
	mu.Lock()
	assert.Empty(t, gaps, "a site left Active during the rotation")
	mu.Unlock()
	assert.Equal(t, refusedBefore, untrusted(), "records refused for their certificate during the rotation")

	// Every site: a certificate of the new CA, the new CA alone trusted.
	n := a.networkStatus("grid", 30*time.Second, func(n *v1alpha1.GridNetwork) bool {
		r := n.Status.TrustBundle.Rotation
		return r != nil && r.Stage == v1alpha1.CARotationRetired
	})
	newCA := n.Status.TrustBundle.Rotation.NewCA
	assert.NotEqual(t, sitetrust.Fingerprint(oldCA.Cert.Raw), newCA)
	for _, s := range g.sites {
		var d map[string][]byte
		framework.Eventually(t, 30*time.Second, s.Name+"'s Secret with the new CA alone", func() (bool, string) {
			d = s.secretData("site-cert")
			cas, _ := sitetrust.ParseCertificates(d["ca.crt"])
			return len(cas) == 1, fmt.Sprintf("%d CAs", len(cas))
		})
		certs, err := sitetrust.ParseCertificates(d["tls.crt"])
		require.NoError(t, err)
		cas, err := sitetrust.ParseCertificates(d["ca.crt"])
		require.NoError(t, err)
		assert.Equal(t, newCA, sitetrust.Fingerprint(cas[0].Raw), "%s trusts the new CA", s.Name)
		assert.NoError(t, certs[0].CheckSignatureFrom(cas[0]), "%s's certificate is the new CA's", s.Name)
		s.networkStatus("grid", 30*time.Second, func(n *v1alpha1.GridNetwork) bool {
			return n.Status.TrustBundle != nil && len(n.Status.TrustBundle.Roots) == 1 && n.Status.TrustBundle.Roots[0] == newCA
		})
	}

	// The old CA retired: a record signed with a certificate it issues is
	// refused.
	oldPair := issueWith(t, oldCA, "site-c")
	before := untrusted()
	sendAsC(t, key, oldPair, []*site{a, b})
	framework.Eventually(t, 30*time.Second, "A and B refuse a record of the retired CA", func() (bool, string) {
		now := untrusted()
		return now >= before+2, fmt.Sprintf("%v refused as untrusted, %v before", now, before)
	})
	for _, s := range []*site{a, b} {
		_, ok := s.candidate("grid", "site-c", "model-evicted")
		assert.False(t, ok, "%s took a record of the retired CA", s.Name)
	}
}

func issueWith(t *testing.T, ca *sitetrust.CA, site string) *tls.Certificate {
	t.Helper()
	chain, key, err := ca.Issue(site, time.Now(), time.Hour)
	require.NoError(t, err)
	pair, err := tls.X509KeyPair(chain, key)
	require.NoError(t, err)
	return &pair
}

// verifiedDial completes a TLS handshake with addr, verifying it against
// the CA bundle in caFile for serverName, the file read for this
// connection.
func verifiedDial(ctx context.Context, addr, caFile, serverName string) error {
	pemData, err := os.ReadFile(caFile)
	if err != nil {
		return err
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(pemData)
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	d := tls.Dialer{Config: &tls.Config{RootCAs: roots, ServerName: serverName, MinVersion: tls.VersionTLS12}}
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	return conn.Close()
}

// pollVerdict asks a signals listener for the provider list as a peer's
// poll does: presenting pair, verifying the listener against the CAs of
// caPEM for serverName. "served" when it answers.
func pollVerdict(ctx context.Context, addr string, pair *tls.Certificate, caPEM []byte, serverName string) string {
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(caPEM)
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{Certificates: []tls.Certificate{*pair}, RootCAs: roots, ServerName: serverName, MinVersion: tls.VersionTLS12}}}
	defer c.CloseIdleConnections()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+addr+httpapi.ProvidersPath, nil)
	if err != nil {
		return err.Error()
	}
	resp, err := c.Do(req)
	if err != nil {
		return err.Error()
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != http.StatusOK {
		return resp.Status
	}
	return "served"
}
