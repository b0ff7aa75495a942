package evict

import (
	"context"
	"io"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/gridsync/gridsync/api/v1alpha1"
)

func network(name string, t *v1alpha1.GridTLS) *v1alpha1.GridNetwork {
	return &v1alpha1.GridNetwork{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1alpha1.GridNetworkSpec{TLS: t}}
}

// The spec is what the command changes: a site listed once, in order;
// listed again, nothing written; lifted, taken off; refused where this is
// not the issuer's cluster.
func TestTheCommandListsAndLiftsAtTheIssuerOnly(t *testing.T) {
	scheme := runtime.NewScheme()
	require.NoError(t, v1alpha1.AddToScheme(scheme))
	ca := &v1alpha1.NamespacedName{Name: "grid-ca", Namespace: "grid"}
	require.NoError(t, corev1.AddToScheme(scheme))
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "grid-ca", Namespace: "grid"}, Data: map[string][]byte{corev1.TLSPrivateKeyKey: []byte("key")}},
		network("issued", &v1alpha1.GridTLS{CASecretRef: ca}),
		network("keyless", &v1alpha1.GridTLS{CASecretRef: &v1alpha1.NamespacedName{Name: "ca-cert-only", Namespace: "grid"}}),
		network("enrolled", &v1alpha1.GridTLS{CASecretRef: ca, SiteCertificate: &v1alpha1.SiteCertificate{Mode: v1alpha1.SiteCertificateEnrolled}}),
		network("open", nil),
	).Build()
	ctx := context.Background()
	listed := func() []string {
		var n v1alpha1.GridNetwork
		require.NoError(t, c.Get(ctx, types.NamespacedName{Name: "issued"}, &n))
		return n.Spec.TLS.SiteCertificate.EvictedSites
	}

	for _, site := range []string{"site-c", "site-b"} {
		changed, err := write(ctx, c, Options{Network: "issued", Site: site})
		require.NoError(t, err)
		assert.True(t, changed)
	}
	assert.Equal(t, []string{"site-b", "site-c"}, listed())
	changed, err := write(ctx, c, Options{Network: "issued", Site: "site-b"})
	require.NoError(t, err)
	assert.False(t, changed, "listed already")

	changed, err = write(ctx, c, Options{Network: "issued", Site: "site-c", Lift: true})
	require.NoError(t, err)
	assert.True(t, changed)
	assert.Equal(t, []string{"site-b"}, listed())

	_, err = write(ctx, c, Options{Network: "enrolled", Site: "site-b"})
	assert.ErrorContains(t, err, "evict the site at the issuing site's cluster")
	_, err = write(ctx, c, Options{Network: "keyless", Site: "site-b"})
	assert.ErrorContains(t, err, `secrets "ca-cert-only" not found`, "no mode, no CA Secret here: the read's own error")
	assert.ErrorContains(t, err, "evict the site at the issuing site's cluster")
	_, err = write(ctx, c, Options{Network: "open", Site: "site-b"})
	assert.ErrorContains(t, err, "has no grid CA")
	assert.Error(t, Run(ctx, c, Options{Network: "issued", Site: "Not A Site", Out: io.Discard}), "a name that is no site name")
}
