package certmanager

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/x509"
	"encoding/asn1"
	"encoding/pem"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/util/retry"

	"github.com/gridsync/gridsync/api/v1alpha1"
	"github.com/gridsync/gridsync/test/framework"
	"github.com/gridsync/gridsync/test/testgateway"
	"github.com/gridsync/gridsync/trust/sitetrust"
)

// issued is a leaf as cert-manager wrote it to the site Secret, and what
// the test learnt of it.
type issued struct {
	data map[string][]byte
	leaf *x509.Certificate
	// fingerprint is the leaf's SHA-256, as the grid names certificates.
	fingerprint string
	// critical are the extensions marked critical, by name.
	critical map[string]bool
}

var (
	oidBasicConstraints = asn1.ObjectIdentifier{2, 5, 29, 19}
	oidKeyUsage         = asn1.ObjectIdentifier{2, 5, 29, 15}
	oidExtKeyUsage      = asn1.ObjectIdentifier{2, 5, 29, 37}
	oidSubjectAltName   = asn1.ObjectIdentifier{2, 5, 29, 17}
)

// readIssued parses the site Secret cert-manager wrote and checks it
// against the profile the grid requires of site's certificate: trust
// /README.md's recipe asks for exactly that profile.
func readIssued(t *testing.T, data map[string][]byte, site string, ca *x509.Certificate) issued {
	t.Helper()
	chain, err := sitetrust.ParseCertificates(data[corev1.TLSCertKey])
	require.NoError(t, err)
	leaf := chain[0]
	held, err := sitetrust.ParseHeld(data[corev1.TLSCertKey], data[corev1.TLSPrivateKeyKey])
	require.NoError(t, err, "tls.crt and tls.key as the agent reads them")
	require.True(t, held.Leaf.Equal(leaf))
	caPEM, _ := pem.Decode(data["ca.crt"])
	require.NotNil(t, caPEM, "ca.crt")
	assert.Equal(t, ca.Raw, caPEM.Bytes, "ca.crt is the grid CA")
	roots := x509.NewCertPool()
	roots.AddCert(ca)
	_, err = leaf.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}})
	require.NoError(t, err, "the leaf chains to the grid CA")

	assert.Equal(t, []string{site}, leaf.Subject.Organization)
	require.Len(t, leaf.URIs, 1)
	assert.Equal(t, sitetrust.SPIFFEID(site), leaf.URIs[0].String())
	assert.Equal(t, []string{sitetrust.DNSName(site)}, leaf.DNSNames)
	assert.Empty(t, leaf.IPAddresses)
	assert.Empty(t, leaf.EmailAddresses)
	assert.Equal(t, x509.KeyUsageDigitalSignature, leaf.KeyUsage, "key usage: digital signature only")
	assert.ElementsMatch(t, []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}, leaf.ExtKeyUsage)
	assert.True(t, leaf.BasicConstraintsValid, "a basic constraints extension")
	assert.False(t, leaf.IsCA)
	pub, ok := leaf.PublicKey.(*ecdsa.PublicKey)
	require.True(t, ok, "an ECDSA key: %T", leaf.PublicKey)
	assert.Equal(t, elliptic.P256(), pub.Curve, "P-256")
	assert.Equal(t, 24*time.Hour, leaf.NotAfter.Sub(leaf.NotBefore), "the recipe's duration")

	names := map[string]asn1.ObjectIdentifier{"basicConstraints": oidBasicConstraints, "keyUsage": oidKeyUsage,
		"extKeyUsage": oidExtKeyUsage, "subjectAltName": oidSubjectAltName}
	critical := map[string]bool{}
	for name, oid := range names {
		for _, e := range leaf.Extensions {
			if e.Id.Equal(oid) {
				critical[name] = e.Critical
			}
		}
	}
	t.Logf("%s: leaf %s, serial %x, valid %s to %s, %d certificate(s) in tls.crt, extensions marked critical: %v", site, sitetrust.Fingerprint(leaf.Raw),
		leaf.SerialNumber, leaf.NotBefore.UTC().Format(time.RFC3339), leaf.NotAfter.UTC().Format(time.RFC3339), len(chain), critical)
	// Whether these two are critical decides SPIFFE mode (trust/README.md):
	// the peers' check of the SVID profile.
	assert.True(t, critical["basicConstraints"], "cert-manager marks CA:FALSE critical")
	assert.True(t, critical["keyUsage"], "cert-manager marks the key usage critical")
	require.NoError(t, sitetrust.CheckSVID(leaf, site), "the X.509-SVID site profile the peers check in SPIFFE mode")
	return issued{data: data, leaf: leaf, fingerprint: sitetrust.Fingerprint(leaf.Raw), critical: critical}
}

// Site B's certificate comes from cert-manager, as trust/README.md's
// recipe issues it: the pinned cert-manager's controllers run on B's
// control plane with a CA Issuer holding the grid CA and the recipe's
// Certificate, and B's GridNetwork takes the Secret as provided. Site A,
// on its own control plane, holds the grid CA and issues its own
// certificate. In SPIFFE mode A trusts B: B's GridSite at A becomes Active
// through the mutual-TLS probe of B's gateway presenting cert-manager's
// certificate, and B's signed records bring B's provider to A's overlay.
// Then cert-manager renews B's certificate (rotationPolicy Always: a new
// key), triggered as `cmctl renew` triggers it; B's agent picks up the
// renewed Secret and signs with it, B's gateway presents it, and A still
// trusts B: the new leaf in A's GridSite, probes still verified, and a
// provider B adds afterwards reaches A.
func TestCertManagerIssuesAndRenewsASiteCertificateTheGridTrusts(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	tools(t) // before anything starts: without them the test fails at once
	key := newKey(t)
	a, b := newSite(t, clusters[0], "site-a"), newSite(t, clusters[1], "site-b")
	for _, s := range []*site{a, b} {
		s.secret("swim-key", "", map[string][]byte{"key": key})
	}
	// A's agent reads and writes its grid CA and site Secrets; B's reads
	// cert-manager's Secret only: the grid CA's key there is
	// cert-manager's, which B's agent never reads.
	require.NoError(t, a.CP.AgentTrustSecrets(ctx, a.AgentNS, a.Namespace(), "grid-ca", "site-cert"))
	require.NoError(t, b.CP.AgentTrustSecrets(ctx, b.AgentNS, b.Namespace(), "grid-site-cert"))

	// Site A: the grid CA is generated by its agent, which issues A's
	// certificate.
	a.network(&v1alpha1.GridTLS{
		CASecretRef:     &v1alpha1.NamespacedName{Name: "grid-ca", Namespace: a.Namespace()},
		SiteSecretRef:   &v1alpha1.NamespacedName{Name: "site-cert", Namespace: a.Namespace()},
		SiteCertificate: &v1alpha1.SiteCertificate{Mode: v1alpha1.SiteCertificateIssuer},
	})
	a.provider("prov-a", "model-a")
	agentA := a.start()
	var caData, siteA map[string][]byte
	framework.Eventually(t, 30*time.Second, "A's grid CA and site certificate", func() (bool, string) {
		caData, siteA = a.secretData("grid-ca"), a.secretData("site-cert")
		return len(caData["tls.key"]) > 0 && len(siteA["tls.key"]) > 0, a.identity()
	})
	caCerts, err := sitetrust.ParseCertificates(caData["tls.crt"])
	require.NoError(t, err)
	gridCA := caCerts[0]
	gatewayA, err := testgateway.Start(a.gateway)
	require.NoError(t, err)
	t.Cleanup(gatewayA.Close)
	_, err = gatewayA.PresentSecret(siteA)
	require.NoError(t, err)

	// Site B: the grid CA reaches B's cluster out of band, as the Issuer's
	// Secret; cert-manager issues the recipe's Certificate.
	b.secret("grid-ca", corev1.SecretTypeTLS, map[string][]byte{"tls.crt": caData["tls.crt"], "tls.key": caData["tls.key"]})
	cm := startCertManager(t, b.CP, b.Namespace())
	dyn, err := dynamic.NewForConfig(b.CP.AdminConfig())
	require.NoError(t, err)
	issuer, certificate := recipe(t, b.Namespace())
	_, err = dyn.Resource(issuers).Namespace(b.Namespace()).Create(ctx, issuer, metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = dyn.Resource(certificates).Namespace(b.Namespace()).Create(ctx, certificate, metav1.CreateOptions{})
	require.NoError(t, err)
	getCertificate := func() *unstructured.Unstructured {
		c, err := dyn.Resource(certificates).Namespace(b.Namespace()).Get(ctx, certificate.GetName(), metav1.GetOptions{})
		require.NoError(t, ignoreNotFound(err))
		return c
	}
	framework.Eventually(t, 30*time.Second, "cert-manager's Certificate Ready", func() (bool, string) {
		c := getCertificate()
		if c == nil {
			return false, "no Certificate"
		}
		status, reason, message := condition(c, "Ready")
		return status == "True", reason + ": " + message
	})
	secretName, _, _ := unstructured.NestedString(certificate.Object, "spec", "secretName")
	first := readIssued(t, b.secretData(secretName), b.Name, gridCA)
	gatewayB, err := testgateway.Start(b.gateway)
	require.NoError(t, err)
	t.Cleanup(gatewayB.Close)
	_, err = gatewayB.PresentSecret(first.data)
	require.NoError(t, err)

	// B's network takes cert-manager's Secret as provided, and the grid
	// CA's certificate alone from a ConfigMap.
	require.NoError(t, b.Admin.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "grid-ca", Namespace: b.Namespace()},
		Data: map[string]string{"ca.crt": string(caData["tls.crt"])}}))
	b.network(&v1alpha1.GridTLS{
		CAConfigMapRef:  &v1alpha1.NamespacedKeyRef{Name: "grid-ca", Namespace: b.Namespace(), Key: "ca.crt"},
		SiteSecretRef:   &v1alpha1.NamespacedName{Name: secretName, Namespace: b.Namespace()},
		SiteCertificate: &v1alpha1.SiteCertificate{Mode: v1alpha1.SiteCertificateProvided},
	}, a.SwimAddr)
	b.provider("prov-b", "model-b")
	b.start()

	// The grid forms: B Active at A through the probe of B's gateway, A at
	// B, and B's provider, whose records B signed with cert-manager's
	// certificate, in A's overlay.
	framework.Eventually(t, 30*time.Second, "B's identity provided", func() (bool, string) {
		r := b.identity()
		return strings.HasPrefix(r, "SiteCertificateProvided:"), r
	})
	active := func(s *site, name string, leaf *x509.Certificate) func() (bool, string) {
		return func() (bool, string) {
			gs := s.gridSite(name)
			if gs == nil {
				return false, "no GridSite " + name
			}
			cert, _ := pem.Decode([]byte(gs.Status.PublicCertPem))
			return gs.Status.Phase == sitetrust.PhaseActive && cert != nil && (leaf == nil || string(cert.Bytes) == string(leaf.Raw)),
				string(gs.Status.Phase) + "/" + gs.Status.Reason + ": " + gs.Status.Message
		}
	}
	framework.Eventually(t, 45*time.Second, "B Active at A with cert-manager's certificate", active(a, "grid-site-b", first.leaf))
	assert.Equal(t, sitetrust.ReasonTLSVerified, a.gridSite("grid-site-b").Status.Reason)
	framework.Eventually(t, 30*time.Second, "A Active at B", active(b, "grid-site-a", nil))
	framework.Eventually(t, 30*time.Second, "B's provider in A's overlay", func() (bool, string) { return a.routes("site-b", "model-b"), "not routed" })
	framework.Eventually(t, 30*time.Second, "A's provider in B's overlay", func() (bool, string) { return b.routes("site-a", "model-a"), "not routed" })

	// The renewal, triggered as `cmctl renew` does: the Certificate's
	// Issuing condition set True with reason ManuallyTriggered.
	revision := func() int64 {
		r, _, _ := unstructured.NestedInt64(getCertificate().Object, "status", "revision")
		return r
	}
	require.Equal(t, int64(1), revision())
	require.NoError(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		c := getCertificate()
		conds, _, _ := unstructured.NestedSlice(c.Object, "status", "conditions")
		conds = append(conds, map[string]any{"type": "Issuing", "status": "True", "reason": "ManuallyTriggered",
			"message": "Certificate re-issuance manually triggered", "lastTransitionTime": time.Now().UTC().Format(time.RFC3339),
			"observedGeneration": c.GetGeneration()})
		if err := unstructured.SetNestedSlice(c.Object, conds, "status", "conditions"); err != nil {
			return err
		}
		_, err := dyn.Resource(certificates).Namespace(b.Namespace()).UpdateStatus(ctx, c, metav1.UpdateOptions{})
		return err
	}))
	var renewedData map[string][]byte
	framework.Eventually(t, 30*time.Second, "cert-manager's renewal", func() (bool, string) {
		c := getCertificate()
		status, reason, message := condition(c, "Ready")
		renewedData = b.secretData(secretName)
		chain, err := sitetrust.ParseCertificates(renewedData[corev1.TLSCertKey])
		return err == nil && revision() == 2 && status == "True" && sitetrust.Fingerprint(chain[0].Raw) != first.fingerprint,
			reason + ": " + message
	})
	renewed := readIssued(t, renewedData, b.Name, gridCA)
	assert.NotEqual(t, first.fingerprint, renewed.fingerprint)
	assert.False(t, first.leaf.PublicKey.(*ecdsa.PublicKey).Equal(renewed.leaf.PublicKey), "rotationPolicy Always: a new key")
	assert.NotEqual(t, string(first.data[corev1.TLSPrivateKeyKey]), string(renewed.data[corev1.TLSPrivateKeyKey]))

	// B's gateway presents the renewed certificate, as its mounted Secret
	// would; B's agent reads the Secret at its next poll (a second) and
	// signs its records with it: A holds the new leaf, keeps B Active, and
	// every probe since verified it.
	verifiedBefore, refusedBefore := probes(t, agentA)
	_, err = gatewayB.PresentSecret(renewed.data)
	require.NoError(t, err)
	framework.Eventually(t, 30*time.Second, "A holds B's renewed certificate", active(a, "grid-site-b", renewed.leaf))
	framework.Eventually(t, 15*time.Second, "two probes of B's renewed gateway", func() (bool, string) {
		verified, _ := probes(t, agentA)
		return verified >= verifiedBefore+2, "no new verified probe"
	})
	_, refusedAfter := probes(t, agentA)
	assert.Equal(t, refusedBefore, refusedAfter, "A refused B's gateway across the renewal")
	gs := a.gridSite("grid-site-b")
	assert.Equal(t, sitetrust.PhaseActive, gs.Status.Phase)
	assert.Equal(t, sitetrust.ReasonTLSVerified, gs.Status.Reason)
	// Records B signs after the renewal, with the new key, are accepted.
	b.provider("prov-b2", "model-b2")
	framework.Eventually(t, 30*time.Second, "B's new provider in A's overlay", func() (bool, string) { return a.routes("site-b", "model-b2"), "not routed" })
	assert.True(t, a.routes("site-b", "model-b"), "B's first provider stays routed")
	require.True(t, cm.Running(), "cert-manager's controller exited:\n%s", cm.Log())
}
