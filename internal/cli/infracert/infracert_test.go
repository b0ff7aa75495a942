package infracert

import (
	"bytes"
	"context"
	"crypto/tls"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/gridsync/gridsync/api/v1alpha1"
	"github.com/gridsync/gridsync/trust/sitetrust"
)

// The command signs with the network's grid CA, where its key is, into a
// kubernetes.io/tls Secret: a certificate with no organization and no
// SPIFFE SAN, its key beside it and never printed. It reissues into a
// Secret it wrote, and leaves any other alone (a site's certificate
// Secret), as it does a network whose CA's key is not in this cluster.
func TestTheCommandIssuesAnInfrastructureCertificateIntoItsOwnSecret(t *testing.T) {
	caPEM, caKey, err := sitetrust.NewCA(time.Now(), time.Hour*24*365)
	require.NoError(t, err)
	scheme := runtime.NewScheme()
	require.NoError(t, v1alpha1.AddToScheme(scheme))
	require.NoError(t, corev1.AddToScheme(scheme))
	network := func(name, caSecret string) *v1alpha1.GridNetwork {
		return &v1alpha1.GridNetwork{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1alpha1.GridNetworkSpec{TLS: &v1alpha1.GridTLS{
			CASecretRef: &v1alpha1.NamespacedName{Name: caSecret, Namespace: "grid"}}}}
	}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "grid-ca", Namespace: "grid"}, Data: map[string][]byte{corev1.TLSCertKey: caPEM, corev1.TLSPrivateKeyKey: caKey}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "ca-cert-only", Namespace: "grid"}, Data: map[string][]byte{corev1.TLSCertKey: caPEM}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "grid-site-cert", Namespace: "db"}, Type: corev1.SecretTypeTLS, Data: map[string][]byte{"tls.crt": []byte("site")}},
		network("issuer", "grid-ca"), network("enrolled", "ca-cert-only"),
		&v1alpha1.GridNetwork{ObjectMeta: metav1.ObjectMeta{Name: "open"}},
	).Build()
	ctx := context.Background()
	var out bytes.Buffer
	opts := func(networkName, secret string) Options {
		return Options{Network: networkName, DNSNames: []string{"postgres.db.svc.cluster.local"}, Secret: types.NamespacedName{Namespace: "db", Name: secret}, Out: &out}
	}
	read := func(name string) *corev1.Secret {
		var s corev1.Secret
		require.NoError(t, c.Get(ctx, types.NamespacedName{Namespace: "db", Name: name}, &s))
		return &s
	}

	require.NoError(t, Run(ctx, c, opts("issuer", "postgres-tls")))
	s := read("postgres-tls")
	assert.Equal(t, corev1.SecretTypeTLS, s.Type)
	assert.Equal(t, LabelValue, s.Labels[Label])
	pair, err := tls.X509KeyPair(s.Data[corev1.TLSCertKey], s.Data[corev1.TLSPrivateKeyKey])
	require.NoError(t, err, "the certificate and its key make a pair")
	chain, err := sitetrust.ParseCertificates(s.Data[corev1.TLSCertKey])
	require.NoError(t, err)
	require.Len(t, chain, 2, "leaf then CA")
	leaf := chain[0]
	assert.Empty(t, leaf.Subject.Organization, "no organization")
	assert.Empty(t, leaf.URIs, "no SPIFFE SAN")
	assert.Equal(t, []string{"postgres.db.svc.cluster.local"}, leaf.DNSNames)
	assert.Equal(t, caPEM, s.Data["ca.crt"])
	assert.Equal(t, pair.Certificate[0], leaf.Raw)
	assert.Contains(t, out.String(), "no organization, no SPIFFE ID")
	assert.NotContains(t, out.String(), "PRIVATE KEY")

	// Issued again: the Secret it wrote holds a new certificate.
	require.NoError(t, Run(ctx, c, opts("issuer", "postgres-tls")))
	again, err := sitetrust.ParseCertificates(read("postgres-tls").Data[corev1.TLSCertKey])
	require.NoError(t, err)
	assert.NotEqual(t, leaf.SerialNumber, again[0].SerialNumber)

	err = Run(ctx, c, opts("issuer", "grid-site-cert"))
	assert.ErrorContains(t, err, "is not an infrastructure certificate's Secret")
	assert.Equal(t, []byte("site"), read("grid-site-cert").Data["tls.crt"], "a Secret it did not write is left alone")
	assert.ErrorContains(t, Run(ctx, c, opts("enrolled", "x")), "the grid CA's key is not in this cluster's Secret grid/ca-cert-only")
	assert.ErrorContains(t, Run(ctx, c, opts("open", "x")), "has no grid CA Secret")
	bad := opts("issuer", "x")
	bad.DNSNames = []string{"west.grid.internal"}
	assert.ErrorContains(t, Run(ctx, c, bad), "in the sites' domain")
}
