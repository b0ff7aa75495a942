package controller_test

import (
	"crypto/x509"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gridsync/gridsync/api/v1alpha1"
	"github.com/gridsync/gridsync/controller"
	"github.com/gridsync/gridsync/trust/enrol"
	"github.com/gridsync/gridsync/trust/sitetrust"
)

// With no lifetime set, the site certificates an issuer issues, its own
// and its enrolled sites', live a day in a SPIFFE network and 90 days in
// a network whose sites pin each other's leaves (every renewal changes
// the leaf a pin names); a lifetime set wins in both.
func TestSiteCertificatesLiveByTheNetworksPeerTrust(t *testing.T) {
	e := newEnv(t)
	e.logOnFailure()
	e.grantTrustSecrets("ca-spiffe", "site-spiffe", "ca-pinned", "site-pinned")
	networks := map[string]*v1alpha1.GridNetwork{}
	for _, mode := range []string{"spiffe", "pinned"} {
		n := e.network()
		n.Name += "-" + mode
		n.Spec.PeerTrust = &v1alpha1.PeerTrust{Mode: mode}
		n.Spec.TLS = &v1alpha1.GridTLS{
			CASecretRef:     &v1alpha1.NamespacedName{Name: "ca-" + mode, Namespace: e.credNS},
			SiteSecretRef:   &v1alpha1.NamespacedName{Name: "site-" + mode, Namespace: e.credNS},
			SiteCertificate: &v1alpha1.SiteCertificate{Mode: v1alpha1.SiteCertificateIssuer},
		}
		e.create(n)
		networks[mode] = n
	}
	e.startAgent(withSiteTrust("east", 0, time.Second))

	want := map[string]time.Duration{"spiffe": 24 * time.Hour, "pinned": 90 * 24 * time.Hour}
	lifetime := func(leaf *x509.Certificate) time.Duration {
		// Backdated a minute: the lifetime counts from the issue.
		return leaf.NotAfter.Sub(leaf.NotBefore.Add(time.Minute)).Round(time.Minute)
	}
	for mode, n := range networks {
		var data map[string][]byte
		e.eventually("the site certificate of "+n.Name, func() (bool, string) {
			data = e.secretData("site-" + mode)
			return len(data["tls.crt"]) > 0, "not yet"
		})
		assert.Equal(t, want[mode], lifetime(leafOf(t, data["tls.crt"])), "%s: the site's own certificate", mode)

		// Enrolled sites of the same network, as the agent's enrolment
		// server answers them: no lifetime of its own, then one set.
		ca, err := sitetrust.ParseCA(e.secretData("ca-" + mode)["tls.crt"], e.secretData("ca-" + mode)["tls.key"])
		require.NoError(t, err)
		roots := x509.NewCertPool()
		roots.AddCert(ca.Cert)
		tokens := &enrol.Tokens{API: e.admin, Namespace: e.credNS, Name: "tokens-" + mode}
		for i, set := range []time.Duration{0, 36 * time.Hour} {
			// A name of its own each time: the register enrols a name under
			// one key.
			site := fmt.Sprintf("site-b%d", i)
			srv, err := enrol.NewServer(controller.EnrolmentAuthority(e.admin, nil), tokens, set, slog.New(slog.DiscardHandler), nil)
			require.NoError(t, err)
			addr := serveEnrolment(t, ca, srv)
			token, err := tokens.Add(e.ctx, n.Name, site, time.Hour, time.Now())
			require.NoError(t, err)
			key, _, err := enrol.NewKey()
			require.NoError(t, err)
			csr, err := enrol.CertificateRequest(key)
			require.NoError(t, err)
			chain, err := (&enrol.Client{}).Request(e.ctx, enrol.Issuer{Address: addr, Site: "site-hub"}, roots,
				enrol.Request{Network: n.Name, Site: site, Token: token, CSR: string(csr)}, nil, key)
			require.NoError(t, err)
			expected := want[mode]
			if set > 0 {
				expected = set
			}
			assert.Equal(t, expected, lifetime(leafOf(t, chain)), "%s: an enrolled site's certificate, server lifetime %s", mode, set)
		}
	}
}
