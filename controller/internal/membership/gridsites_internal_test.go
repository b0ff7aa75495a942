package membership

import (
	"context"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/gridsync/gridsync/api/v1alpha1"
	"github.com/gridsync/gridsync/controller/internal/base"
	"github.com/gridsync/gridsync/gossip/sites"
)

// A site's advertisement replaces the GridSite's endpoint only when it is
// newer; an older one, one of the same generation naming another address,
// or an ambiguous one leaves the endpoint as it is.
func TestANewerAdvertisedEndpointReplacesAnOlderOneNeverTheReverse(t *testing.T) {
	current := &v1alpha1.GatewayEndpoint{Address: "10.0.0.4:8443", Host: "10.0.0.4", Port: 8443, Generation: 100,
		TLS: &v1alpha1.GatewayTLS{Mode: "Mutual", ServerName: "b.grid.internal"}}
	kept := map[string]any{"address": "10.0.0.4:8443", "host": "10.0.0.4", "port": int64(8443), "generation": int64(100)}
	tests := []struct {
		name     string
		current  *v1alpha1.GatewayEndpoint
		site     sites.Site
		want     map[string]any
		replaced bool
	}{
		{name: "first advertisement", site: sites.Site{GatewayAddress: "[2001:db8::1]:443", GatewayGeneration: 7},
			want: map[string]any{"address": "[2001:db8::1]:443", "host": "2001:db8::1", "port": int64(443), "generation": int64(7)}, replaced: true},
		{name: "newer", current: current, site: sites.Site{GatewayAddress: "10.0.0.5:8443", GatewayGeneration: 101},
			want: map[string]any{"address": "10.0.0.5:8443", "host": "10.0.0.5", "port": int64(8443), "generation": int64(101)}, replaced: true},
		{name: "older", current: current, site: sites.Site{GatewayAddress: "10.0.0.5:8443", GatewayGeneration: 99}, want: kept},
		{name: "same generation, another address", current: current, site: sites.Site{GatewayAddress: "10.0.0.5:8443", GatewayGeneration: 100}, want: kept},
		{name: "the same endpoint signed again", current: current, site: sites.Site{GatewayAddress: "10.0.0.4:8443", GatewayGeneration: 500}, want: kept, replaced: true},
		{name: "ambiguous, newer", current: current, site: sites.Site{GatewayInvalid: true, GatewayGeneration: 500}, want: kept},
		{name: "withdrawn by an older record", current: current, site: sites.Site{GatewayGeneration: 50}, want: kept},
		{name: "withdrawn by a newer record", current: current, site: sites.Site{GatewayGeneration: 500}, want: nil, replaced: true},
		{name: "an address written by hand, without generation", current: &v1alpha1.GatewayEndpoint{Address: "provider.example.com:8443"},
			site: sites.Site{GatewayAddress: "10.0.0.5:8443", GatewayGeneration: 3},
			want: map[string]any{"address": "10.0.0.5:8443", "host": "10.0.0.5", "port": int64(8443), "generation": int64(3)}, replaced: true},
		{name: "ambiguous, nothing before", site: sites.Site{GatewayInvalid: true, GatewayGeneration: 3}, want: nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, replaced := advertisedEndpoint(tt.current, tt.site)
			assert.Equal(t, tt.want, got)
			assert.Equal(t, tt.replaced, replaced)
		})
	}
}

// An advertisement kept back as not newer than the GridSite's endpoint is
// looked at again, and written, when the same address is signed later at a
// higher generation.
func TestAKeptAdvertisementIsWrittenOnceSignedAtAHigherGeneration(t *testing.T) {
	current := v1alpha1.GridSite{ObjectMeta: metav1.ObjectMeta{Name: "net-b"}, Spec: v1alpha1.GridSiteSpec{
		GridNetworkRef:  "net",
		GatewayEndpoint: &v1alpha1.GatewayEndpoint{Address: "10.0.0.4:8443", Host: "10.0.0.4", Port: 8443, Generation: 100},
	}}
	var applied []map[string]any
	c := interceptor.NewClient(fake.NewClientBuilder().Build(), interceptor.Funcs{
		Get: func(_ context.Context, _ client.WithWatch, _ client.ObjectKey, obj client.Object, _ ...client.GetOption) error {
			current.DeepCopyInto(obj.(*v1alpha1.GridSite))
			return nil
		},
		Apply: func(_ context.Context, _ client.WithWatch, obj runtime.ApplyConfiguration, _ ...client.ApplyOption) error {
			u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
			require.NoError(t, err)
			endpoint, _, _ := unstructured.NestedMap(u, "spec", "gatewayEndpoint")
			applied = append(applied, endpoint)
			return nil
		},
	})
	r := &Member{Env: &base.Env{Client: c, Opts: base.Config{Producer: "gridsync", Logger: slog.New(slog.DiscardHandler)}}}
	ctx := context.Background()

	require.NoError(t, r.syncGridSite(ctx, "net", sites.Site{Name: "b", GatewayAddress: "10.0.0.5:8443", GatewayGeneration: 99}))
	require.Len(t, applied, 1)
	assert.Equal(t, "10.0.0.4:8443", applied[0]["address"], "an older advertisement keeps the endpoint")

	require.NoError(t, r.syncGridSite(ctx, "net", sites.Site{Name: "b", GatewayAddress: "10.0.0.5:8443", GatewayGeneration: 99}))
	assert.Len(t, applied, 1, "the same advertisement again writes nothing")

	require.NoError(t, r.syncGridSite(ctx, "net", sites.Site{Name: "b", GatewayAddress: "10.0.0.5:8443", GatewayGeneration: 101}))
	require.Len(t, applied, 2, "the same address at a higher generation is looked at again")
	assert.Equal(t, "10.0.0.5:8443", applied[1]["address"])
	assert.Equal(t, int64(101), applied[1]["generation"])
}
