package praxisconfig_test

import (
	"fmt"
	"testing"

	"github.com/gridsync/gridsync/api/v1alpha1"
	"github.com/gridsync/gridsync/controller/praxisconfig"
	"github.com/gridsync/gridsync/shared/envelope"
)

// BenchmarkRender renders the config of one gateway of the controller
// benchmark's fleet: 40 admitted providers derived as tls endpoints (half
// with a credential), 4 models each, one mutual_tls hop.
func BenchmarkRender(b *testing.B) {
	var admitted []string
	var providers []praxisconfig.Provider
	var candidates []envelope.Candidate
	for p := range 40 {
		name := fmt.Sprintf("bench-net-00-provider-%03d", p)
		admitted = append(admitted, name)
		providers = append(providers, praxisconfig.Provider{Identity: name, Name: name, Endpoint: fmt.Sprintf("https://provider-%03d.example", p)})
		for m := range 4 {
			c := candidate(fmt.Sprintf("model-%d", m), name, name)
			if p%2 == 0 {
				c = withToken(c, fmt.Sprintf("token-%d", p%10))
			}
			candidates = append(candidates, c)
		}
	}
	in := input(v1alpha1.PraxisConfig{
		ClusterEndpoints: []v1alpha1.ClusterEndpoint{mtls("west", "127.0.0.1:30443", "west.grid.internal")},
		DeriveTopology: &v1alpha1.DeriveTopology{FromProviders: admitted, Transport: &v1alpha1.EndpointTransport{
			Mode: "tls", SNI: ptr("inference-gateway.example"), CASecretRef: &v1alpha1.LocalSecretKeyRef{Name: "serving-ca"},
		}},
	}, candidates, admitted...)
	in.Providers = providers
	b.ReportAllocs()
	for b.Loop() {
		res, err := praxisconfig.Render(in)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := praxisconfig.Requirements(in, res); err != nil {
			b.Fatal(err)
		}
	}
}
