package praxisconfig_test

import (
	"errors"
	"flag"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gridsync/gridsync/api/v1alpha1"
	"github.com/gridsync/gridsync/controller/praxisconfig"
	"github.com/gridsync/gridsync/shared/envelope"
)

var update = flag.Bool("update", false, "rewrite the golden files from what the renderer produces now")

func ptr[T any](v T) *T { return &v }

func mtls(cluster, address, sni string) v1alpha1.ClusterEndpoint {
	return v1alpha1.ClusterEndpoint{Cluster: cluster, Address: address, Transport: &v1alpha1.EndpointTransport{Mode: "mutual_tls", SNI: ptr(sni)}}
}

func plain(cluster, address string) v1alpha1.ClusterEndpoint {
	return v1alpha1.ClusterEndpoint{Cluster: cluster, Address: address, Transport: &v1alpha1.EndpointTransport{Mode: "plaintext"}}
}

func serverTLS(cluster, address, sni, caSecret string) v1alpha1.ClusterEndpoint {
	t := &v1alpha1.EndpointTransport{Mode: "tls", SNI: ptr(sni)}
	if caSecret != "" {
		t.CASecretRef = &v1alpha1.LocalSecretKeyRef{Name: caSecret}
	}
	return v1alpha1.ClusterEndpoint{Cluster: cluster, Address: address, Transport: t}
}

func candidate(model, site, cluster string) envelope.Candidate {
	return envelope.Candidate{Kind: envelope.CandidateKindInferenceModel, Name: model, Site: site, Cluster: cluster, Fresh: true}
}

func withToken(c envelope.Candidate, secret string) envelope.Candidate {
	c.Credential = &envelope.Credential{Strategy: "bearer_token", SecretRef: envelope.SecretRef{Name: secret, Namespace: "praxis-system", Key: "token"}}
	return c
}

// input is a gateway "inference-gw" of network "production" at site
// "east", whose cluster runs the providers named in local.
func input(spec v1alpha1.PraxisConfig, candidates []envelope.Candidate, local ...string) praxisconfig.Input {
	spec.Generate = true
	return praxisconfig.Input{
		Network: "production", Gateway: "inference-gw", Namespace: "praxis-system", LocalSite: "east",
		Spec: spec, Candidates: candidates,
		FinalHop: func(site string) bool { return site == "east" || slices.Contains(local, site) },
	}
}

// The matrix of whole configs, compared with golden files (go test
// ./controller/praxisconfig -update rewrites them; review the diff).
func TestGoldenConfigs(t *testing.T) {
	rate := 0.25
	cases := map[string]praxisconfig.Input{
		"plain-only": input(v1alpha1.PraxisConfig{ClusterEndpoints: []v1alpha1.ClusterEndpoint{
			plain("api-provider", "mock-api.default.svc:8080"), plain("vllm-a", "vllm-a.inference.svc:8000"),
		}}, []envelope.Candidate{candidate("llama-3-8b", "vllm-a", "vllm-a"), candidate("gpt-4o", "api-provider", "api-provider")}, "vllm-a", "api-provider"),

		// A local provider's credential and the gateway's own site's are
		// injected here; a remote site's never (it is its final hop).
		"credentials-static": input(v1alpha1.PraxisConfig{ClusterEndpoints: []v1alpha1.ClusterEndpoint{
			plain("api-provider", "mock-api.default.svc:8080"), mtls("west", "127.0.0.1:30443", "west.grid.internal"),
		}}, []envelope.Candidate{
			withToken(candidate("gpt-4o", "api-provider", "api-provider"), "openai-token"),
			withToken(candidate("gpt-4o-mini", "api-provider", "api-provider"), "openai-token"),
			withToken(candidate("claude", "east", "api-provider"), "anthropic-token"),
			withToken(candidate("gpt-4o", "west", "west"), "west-token"),
		}, "api-provider"),

		"projected": input(v1alpha1.PraxisConfig{EnableProjectedCredentials: true, SupportsProjectedCredentials: true,
			CredentialMountPath: "/var/run/grid/credentials",
			ClusterEndpoints:    []v1alpha1.ClusterEndpoint{plain("api-provider", "mock-api.default.svc:8080")},
		}, []envelope.Candidate{withToken(candidate("gpt-4o", "api-provider", "api-provider"), "openai-token")}, "api-provider"),

		"mixed-transports": func() praxisconfig.Input {
			in := input(v1alpha1.PraxisConfig{ListenerPort: 9080, ClusterEndpoints: []v1alpha1.ClusterEndpoint{
				mtls("site-a", "127.0.0.4:30080", "site-a.grid.internal"),
				plain("api-provider", "mock-api.default.svc:8080"),
				serverTLS("api-example", "api.example.internal:443", "api.example.internal", "api-provider-ca"),
				serverTLS("public-api", "api.openai.com:443", "api.openai.com", ""),
			}}, []envelope.Candidate{candidate("m1", "site-a", "site-a"), candidate("m2", "api-provider", "api-provider"), candidate("m3", "api-example", "api-example")}, "api-provider", "api-example")
			in.GridCA = &praxisconfig.SecretRef{Namespace: "grid-system", Name: "grid-ca"}
			in.Site = &praxisconfig.SecretRef{Namespace: "praxis-system", Name: "east-site-identity"}
			return in
		}(),

		"derived-topology": func() praxisconfig.Input {
			in := input(v1alpha1.PraxisConfig{
				ClusterEndpoints: []v1alpha1.ClusterEndpoint{plain("llama-3-8b", "llama.override.svc:9000")},
				DeriveTopology: &v1alpha1.DeriveTopology{
					FromProviders: []string{"qwen2-7b", "llama-3-8b", "mistral", "idle"},
					Transport:     &v1alpha1.EndpointTransport{Mode: "tls", SNI: ptr("inference-gateway.infra.svc.cluster.local"), CASecretRef: &v1alpha1.LocalSecretKeyRef{Name: "serving-gateway-ca"}},
				},
			}, []envelope.Candidate{
				candidate("qwen2", "qwen2-7b", "qwen2-7b"),
				candidate("llama3", "llama-3-8b", "llama-3-8b"),
				candidate("mistral", "mistral", "mistral"),
				candidate("phi", "not-allowlisted", "not-allowlisted"),
				candidate("gpt-4o", "west", "west"),
			}, "qwen2-7b", "llama-3-8b", "mistral", "not-allowlisted", "idle")
			in.Providers = []praxisconfig.Provider{
				{Identity: "qwen2-7b", Name: "qwen2-7b", Endpoint: "https://inference-gateway.infra.svc.cluster.local/qwen"},
				{Identity: "llama-3-8b", Name: "llama-3-8b", Endpoint: "https://ignored.example"},
				{Identity: "mistral", Name: "mistral", Endpoint: "grpc://mistral:9000"},
				{Identity: "not-allowlisted", Name: "not-allowlisted", Endpoint: "http://phi.svc:8000"},
				{Identity: "idle", Name: "idle", Endpoint: "https://inference-gateway.infra.svc.cluster.local/idle"}, // no candidate now: kept for restoration
			}
			return in
		}(),

		"telemetry": input(v1alpha1.PraxisConfig{
			ClusterEndpoints: []v1alpha1.ClusterEndpoint{plain("api-provider", "mock-api.default.svc:8080")},
			Telemetry: &v1alpha1.GatewayTelemetry{OTLPEndpoint: "http://otel-collector.observability:4317", SamplingRate: &rate,
				ServiceName: "praxis-consumer", ServiceVersion: "0.7.1", Environment: "production", BatchIntervalSecs: ptr[int64](5), BatchSize: ptr[int64](512)},
		}, []envelope.Candidate{candidate("gpt-4o", "api-provider", "api-provider")}, "api-provider"),

		// No candidate now: the route filter and every endpoint stay, so
		// that a later revision restores routing without a rollout.
		"empty-overlay": input(v1alpha1.PraxisConfig{ClusterEndpoints: []v1alpha1.ClusterEndpoint{
			mtls("west", "127.0.0.1:30443", "west.grid.internal"), plain("api-provider", "mock-api.default.svc:8080"),
		}}, []envelope.Candidate{}),
	}
	for name, in := range cases {
		t.Run(name, func(t *testing.T) {
			res, err := praxisconfig.Render(in)
			require.NoError(t, err)
			parsePraxis(t, res.YAML)
			doc, err := praxisconfig.Requirements(in, res)
			require.NoError(t, err)
			golden(t, name+".yaml", res.YAML)
			golden(t, name+".requirements.json", append(doc, '\n'))
		})
	}
}

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	file := filepath.Join("testdata", name)
	if *update {
		require.NoError(t, os.WriteFile(file, got, 0o644))
	}
	want, err := os.ReadFile(file)
	require.NoError(t, err, "no golden file: run go test ./controller/praxisconfig -update")
	assert.Equal(t, string(want), string(got), "rendered %s differs from its golden file", name)
}

// Each fail-closed rule, with the reference's reason.
func TestRenderFailsClosed(t *testing.T) {
	withTransport := func(ep v1alpha1.ClusterEndpoint, tr *v1alpha1.EndpointTransport) v1alpha1.ClusterEndpoint {
		ep.Transport = tr
		return ep
	}
	base := plain("api-provider", "mock-api:8080")
	tests := []struct {
		name      string
		endpoints []v1alpha1.ClusterEndpoint
		mutate    func(*praxisconfig.Input)
		reason    string
		mentions  string
	}{
		{"no transport", []v1alpha1.ClusterEndpoint{withTransport(base, nil)}, nil, praxisconfig.ReasonMissingTransport, "api-provider"},
		{"unknown mode", []v1alpha1.ClusterEndpoint{withTransport(base, &v1alpha1.EndpointTransport{Mode: "h2c"})}, nil, praxisconfig.ReasonMissingTransport, "h2c"},
		{"mutual_tls without sni", []v1alpha1.ClusterEndpoint{withTransport(base, &v1alpha1.EndpointTransport{Mode: "mutual_tls"})}, nil, praxisconfig.ReasonMissingSni, "api-provider"},
		{"mutual_tls with a blank sni", []v1alpha1.ClusterEndpoint{withTransport(base, &v1alpha1.EndpointTransport{Mode: "mutual_tls", SNI: ptr("  ")})}, nil, praxisconfig.ReasonMissingSni, "api-provider"},
		{"tls without sni", []v1alpha1.ClusterEndpoint{withTransport(base, &v1alpha1.EndpointTransport{Mode: "tls"})}, nil, praxisconfig.ReasonMissingSni, "tls"},
		{"plaintext with sni", []v1alpha1.ClusterEndpoint{withTransport(base, &v1alpha1.EndpointTransport{Mode: "plaintext", SNI: ptr("x.internal")})}, nil, praxisconfig.ReasonPlaintextWithSni, "api-provider"},
		{"plaintext with a CA", []v1alpha1.ClusterEndpoint{withTransport(base, &v1alpha1.EndpointTransport{Mode: "plaintext", CASecretRef: &v1alpha1.LocalSecretKeyRef{Name: "ca"}})}, nil, praxisconfig.ReasonPraxisConfigRenderFailed, "caSecretRef"},
		{"mutual_tls with its own CA", []v1alpha1.ClusterEndpoint{withTransport(base, &v1alpha1.EndpointTransport{Mode: "mutual_tls", SNI: ptr("a"), CASecretRef: &v1alpha1.LocalSecretKeyRef{Name: "ca"}})}, nil, praxisconfig.ReasonPraxisConfigRenderFailed, "grid CA"},
		{"a CA key that is no Secret key", []v1alpha1.ClusterEndpoint{withTransport(base, &v1alpha1.EndpointTransport{Mode: "tls", SNI: ptr("a"), CASecretRef: &v1alpha1.LocalSecretKeyRef{Name: "ca", Key: "../etc"}})}, nil, praxisconfig.ReasonPraxisConfigRenderFailed, "caSecretRef"},
		{"candidate without an endpoint", []v1alpha1.ClusterEndpoint{base}, func(in *praxisconfig.Input) {
			in.Candidates = append(in.Candidates, candidate("m", "other", "other-cluster"))
		}, praxisconfig.ReasonMissingClusterEndpoint, "other-cluster"},
		{"no endpoint at all", nil, nil, praxisconfig.ReasonMissingClusterEndpoint, "no cluster endpoints"},
		{"address without a port", []v1alpha1.ClusterEndpoint{plain("a", "mock-api")}, nil, praxisconfig.ReasonPraxisConfigRenderFailed, "host:port"},
		{"address with port 0", []v1alpha1.ClusterEndpoint{plain("a", "mock-api:0")}, nil, praxisconfig.ReasonPraxisConfigRenderFailed, "host:port"},
		{"two entries for a cluster", []v1alpha1.ClusterEndpoint{base, base}, nil, praxisconfig.ReasonPraxisConfigRenderFailed, "two"},
		{"blank cluster", []v1alpha1.ClusterEndpoint{plain(" ", "a:1")}, nil, praxisconfig.ReasonPraxisConfigRenderFailed, "blank cluster"},
		{"a candidate with a blank cluster", []v1alpha1.ClusterEndpoint{base}, func(in *praxisconfig.Input) {
			in.Candidates = append(in.Candidates, candidate("m", "s", ""))
		}, praxisconfig.ReasonPraxisConfigRenderFailed, "blank cluster"},
		{"relative credential path", []v1alpha1.ClusterEndpoint{base}, func(in *praxisconfig.Input) {
			in.Spec.CredentialMountPath = "run/secrets"
		}, praxisconfig.ReasonPraxisConfigRenderFailed, "credentialMountPath"},
		{"credential path with ..", []v1alpha1.ClusterEndpoint{base}, func(in *praxisconfig.Input) {
			in.Spec.CredentialMountPath = "/run/../etc"
		}, praxisconfig.ReasonPraxisConfigRenderFailed, "credentialMountPath"},
		{"TLS files at the root", []v1alpha1.ClusterEndpoint{base}, func(in *praxisconfig.Input) {
			in.Spec.TLSCertMountPath = "/tls"
		}, praxisconfig.ReasonPraxisConfigRenderFailed, "tlsCertMountPath"},
		{"no site", []v1alpha1.ClusterEndpoint{base}, func(in *praxisconfig.Input) { in.LocalSite = "" }, praxisconfig.ReasonPraxisConfigRenderFailed, "siteName"},
		{"a site that is no DNS label (a network's name with a dot)", []v1alpha1.ClusterEndpoint{base}, func(in *praxisconfig.Input) {
			in.LocalSite = "grid.east"
		}, praxisconfig.ReasonPraxisConfigRenderFailed, `"grid.east"`},
		{"a site in capitals", []v1alpha1.ClusterEndpoint{base}, func(in *praxisconfig.Input) { in.LocalSite = "East" }, praxisconfig.ReasonPraxisConfigRenderFailed, "siteName"},
		{"sampling rate above 1", []v1alpha1.ClusterEndpoint{base}, func(in *praxisconfig.Input) {
			in.Spec.Telemetry = &v1alpha1.GatewayTelemetry{SamplingRate: ptr(1.5)}
		}, praxisconfig.ReasonPraxisConfigRenderFailed, "samplingRate"},
		{"collector credentials in the endpoint", []v1alpha1.ClusterEndpoint{base}, func(in *praxisconfig.Input) {
			in.Spec.Telemetry = &v1alpha1.GatewayTelemetry{OTLPEndpoint: "https://user:s3cret@collector:4317"}
		}, praxisconfig.ReasonPraxisConfigRenderFailed, "otlpEndpoint"},
		{"derived transport that is not tls", []v1alpha1.ClusterEndpoint{base}, func(in *praxisconfig.Input) {
			in.Spec.DeriveTopology = &v1alpha1.DeriveTopology{FromProviders: []string{"x"}, Transport: &v1alpha1.EndpointTransport{Mode: "plaintext"}}
		}, praxisconfig.ReasonPraxisConfigRenderFailed, "must be tls"},
		{"derived transport without sni", []v1alpha1.ClusterEndpoint{base}, func(in *praxisconfig.Input) {
			in.Spec.DeriveTopology = &v1alpha1.DeriveTopology{FromProviders: []string{"x"}, Transport: &v1alpha1.EndpointTransport{Mode: "tls"}}
		}, praxisconfig.ReasonMissingSni, "deriveTopology"},
		{"two credentials at one path", []v1alpha1.ClusterEndpoint{base}, func(in *praxisconfig.Input) {
			a := withToken(candidate("a", "east", "api-provider"), "x")
			b := withToken(candidate("b", "east", "api-provider"), "x")
			b.Credential.Strategy = "api_key" // the same Secret key, two strategies: one file
			in.Candidates = append(in.Candidates, a, b)
			in.Spec.CredentialMountPath = "/run/secrets/grid-credentials"
		}, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := input(v1alpha1.PraxisConfig{ClusterEndpoints: tt.endpoints}, nil)
			if tt.mutate != nil {
				tt.mutate(&in)
			}
			res, err := praxisconfig.Render(in)
			if tt.reason == "" {
				require.NoError(t, err, "the same Secret key read by two strategies is one file, not a conflict")
				parsePraxis(t, res.YAML)
				return
			}
			var e *praxisconfig.Error
			require.True(t, errors.As(err, &e), "want a %s failure, got %v", tt.reason, err)
			assert.Equal(t, tt.reason, e.Reason)
			assert.Contains(t, e.Message, tt.mentions)
			assert.Nil(t, res.YAML, "nothing rendered")
		})
	}
}

// deriveTopology: an explicit entry wins whole; only allowlisted
// providers are derived; a candidate that cannot be routed is withdrawn
// from this gateway and named, instead of failing the render.
func TestDerivedTopology(t *testing.T) {
	tlsCA := &v1alpha1.EndpointTransport{Mode: "tls", SNI: ptr("gw.infra.svc"), CASecretRef: &v1alpha1.LocalSecretKeyRef{Name: "serving-ca"}}
	in := input(v1alpha1.PraxisConfig{
		ClusterEndpoints: []v1alpha1.ClusterEndpoint{plain("explicit", "explicit.svc:8080")},
		DeriveTopology:   &v1alpha1.DeriveTopology{FromProviders: []string{"explicit", "secure", "insecure", "no-transport-https"}, Transport: tlsCA},
	}, []envelope.Candidate{
		candidate("a", "explicit", "explicit"), candidate("b", "secure", "secure"), candidate("c", "insecure", "insecure"),
		candidate("d", "unlisted", "unlisted"), candidate("e", "west", "west"),
	})
	in.Providers = []praxisconfig.Provider{
		{Identity: "explicit", Name: "explicit", Endpoint: "https://would-be-derived.example"},
		{Identity: "secure", Name: "secure", Endpoint: "https://gw.infra.svc/v1"},
		{Identity: "insecure", Name: "insecure", Endpoint: "http://127.0.0.9:8000"},
		{Identity: "unlisted", Name: "unlisted", Endpoint: "http://unlisted.svc"},
	}
	res, err := praxisconfig.Render(in)
	require.NoError(t, err)
	p := parsePraxis(t, res.YAML)
	byName := map[string]string{}
	for _, c := range p.lb.Clusters {
		byName[c.Name] = c.Endpoints[0]
		if c.Name == "explicit" {
			assert.Nil(t, c.TLS, "the explicit entry wins whole: its plaintext, not the derived tls")
		}
		if c.Name == "secure" {
			require.NotNil(t, c.TLS)
			assert.Equal(t, "gw.infra.svc", c.TLS.SNI)
			assert.Equal(t, "/run/secrets/grid-backend-ca/serving-ca/ca.crt", c.TLS.CA.CAPath)
		}
	}
	assert.Equal(t, map[string]string{"explicit": "explicit.svc:8080", "secure": "gw.infra.svc:443"}, byName)
	var kept []string
	for _, c := range res.Candidates {
		kept = append(kept, c.Name)
	}
	assert.Equal(t, []string{"a", "b"}, kept)
	require.Len(t, res.Withdrawn, 3)
	// An allowlisted provider at a plain http URL is not made plaintext:
	// only the gateway's owner declares plaintext, in an explicit entry.
	assert.Equal(t, "insecure", res.Withdrawn[0].Cluster)
	assert.Contains(t, res.Withdrawn[0].Why, "plaintext is never derived")
	assert.Equal(t, "unlisted", res.Withdrawn[1].Cluster)
	assert.Contains(t, res.Withdrawn[1].Why, "fromProviders")
	assert.Equal(t, "west", res.Withdrawn[2].Cluster)

	// Removing a provider from the list withdraws its derived endpoint on
	// the next render.
	in.Spec.DeriveTopology.FromProviders = []string{"explicit"}
	res, err = praxisconfig.Render(in)
	require.NoError(t, err)
	assert.NotContains(t, string(res.YAML), "gw.infra.svc:443")
	assert.Len(t, res.Withdrawn, 4)

	// An https provider without deriveTopology.transport cannot be derived.
	in.Spec.DeriveTopology = &v1alpha1.DeriveTopology{FromProviders: []string{"secure"}}
	res, err = praxisconfig.Render(in)
	require.NoError(t, err)
	assert.Contains(t, withdrawal(res, "secure"), "deriveTopology.transport")
}

// A candidate without an explicit entry: deriveTopology absent fails the
// render (MissingClusterEndpoint: the gateway's owner never asked for
// withdrawals); deriveTopology with an empty fromProviders derives
// nothing, not every provider, and withdraws the candidate.
func TestDeriveTopologyAbsentFailsAndAnEmptyListDerivesNothing(t *testing.T) {
	transport := &v1alpha1.EndpointTransport{Mode: "tls", SNI: ptr("gw.infra.svc")}
	in := input(v1alpha1.PraxisConfig{ClusterEndpoints: []v1alpha1.ClusterEndpoint{plain("explicit", "explicit.svc:8080")}},
		[]envelope.Candidate{candidate("a", "explicit", "explicit"), candidate("b", "derivable", "derivable")})
	in.Providers = []praxisconfig.Provider{{Identity: "derivable", Name: "derivable", Endpoint: "https://derivable.svc/v1"}}

	_, err := praxisconfig.Render(in)
	var e *praxisconfig.Error
	require.True(t, errors.As(err, &e), "%v", err)
	assert.Equal(t, praxisconfig.ReasonMissingClusterEndpoint, e.Reason)
	assert.Contains(t, e.Message, "derivable")

	for _, list := range [][]string{nil, {}} {
		in.Spec.DeriveTopology = &v1alpha1.DeriveTopology{FromProviders: list, Transport: transport}
		res, err := praxisconfig.Render(in)
		require.NoError(t, err)
		assert.NotContains(t, string(res.YAML), "derivable.svc", "an empty list derives nothing")
		assert.Contains(t, withdrawal(res, "derivable"), "fromProviders")
		require.Len(t, res.Candidates, 1)
		assert.Equal(t, "a", res.Candidates[0].Name)
	}

	// The provider is derivable: the list alone kept it out.
	in.Spec.DeriveTopology.FromProviders = []string{"derivable"}
	res, err := praxisconfig.Render(in)
	require.NoError(t, err)
	assert.Contains(t, string(res.YAML), "derivable.svc:443")
	assert.Empty(t, res.Withdrawn)
}

func withdrawal(res praxisconfig.Result, cluster string) string {
	for _, w := range res.Withdrawn {
		if w.Cluster == cluster {
			return w.Why
		}
	}
	return ""
}

// Projected credentials: an empty table resolving under the projected
// root; a credential-bearing overlay is held until the gateway attests
// support, and only a credential this gateway injects holds it.
func TestProjectedCredentials(t *testing.T) {
	endpoints := []v1alpha1.ClusterEndpoint{plain("api-provider", "mock-api:8080"), mtls("west", "127.0.0.1:30443", "west.grid.internal")}
	local := withToken(candidate("gpt-4o", "api-provider", "api-provider"), "openai-token")
	remote := withToken(candidate("gpt-4o", "west", "west"), "west-token")
	tests := []struct {
		name                string
		enable, supports    bool
		candidates          []envelope.Candidate
		wantHold, wantTable bool
	}{
		{"static table", false, false, []envelope.Candidate{local}, false, true},
		{"enabled, not yet supported", true, false, []envelope.Candidate{local}, true, false},
		{"enabled and supported", true, true, []envelope.Candidate{local}, false, false},
		{"enabled with nothing to inject here", true, false, []envelope.Candidate{remote}, false, false},
		{"enabled with no credential at all", true, false, []envelope.Candidate{candidate("m", "api-provider", "api-provider")}, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := input(v1alpha1.PraxisConfig{ClusterEndpoints: endpoints, EnableProjectedCredentials: tt.enable, SupportsProjectedCredentials: tt.supports},
				tt.candidates, "api-provider")
			res, err := praxisconfig.Render(in)
			require.NoError(t, err)
			p := parsePraxis(t, res.YAML)
			assert.Equal(t, tt.wantHold, res.HoldCredentials)
			if tt.enable {
				require.NotNil(t, p.inject, "projected mode always has the filter")
				assert.Empty(t, p.inject.Credentials)
				require.NotNil(t, p.inject.ProjectedCredentialMountBase)
				assert.Equal(t, "/run/secrets/grid-credentials", *p.inject.ProjectedCredentialMountBase)
				return
			}
			require.Equal(t, tt.wantTable, p.inject != nil)
			assert.Equal(t, "/run/secrets/grid-credentials/praxis-system/openai-token/token", p.inject.Credentials[0].File)
		})
	}
}

// The same inputs in any order give the same bytes: an idle cluster sees
// no write.
func TestDeterministicBytes(t *testing.T) {
	endpoints := []v1alpha1.ClusterEndpoint{
		mtls("west", "127.0.0.1:1", "west.grid.internal"), plain("a", "a:1"), plain("b", "b:1"),
		serverTLS("c", "c:443", "c.example", "c-ca"), mtls("north", "127.0.0.2:1", "north.grid.internal"),
	}
	candidates := []envelope.Candidate{
		withToken(candidate("m1", "a", "a"), "t1"), withToken(candidate("m2", "b", "b"), "t2"),
		withToken(candidate("m3", "a", "a"), "t1"), candidate("m4", "west", "west"), candidate("m5", "c", "c"),
	}
	providers := []praxisconfig.Provider{{Identity: "d", Name: "d", Endpoint: "https://d"}, {Identity: "e", Name: "e", Endpoint: "https://e:81"}}
	render := func(r *rand.Rand) []byte {
		in := input(v1alpha1.PraxisConfig{
			ClusterEndpoints: shuffled(r, endpoints),
			DeriveTopology: &v1alpha1.DeriveTopology{FromProviders: shuffled(r, []string{"d", "e"}),
				Transport: &v1alpha1.EndpointTransport{Mode: "tls", SNI: ptr("serving.internal")}},
		}, shuffled(r, candidates), "a", "b", "c", "d", "e")
		in.Providers = shuffled(r, providers)
		res, err := praxisconfig.Render(in)
		require.NoError(t, err)
		doc, err := praxisconfig.Requirements(in, res)
		require.NoError(t, err)
		return append(res.YAML, doc...)
	}
	want := render(rand.New(rand.NewPCG(1, 1)))
	for seed := range uint64(50) {
		require.Equal(t, string(want), string(render(rand.New(rand.NewPCG(seed, 7)))), "seed %d", seed)
	}
}

func shuffled[T any](r *rand.Rand, in []T) []T {
	out := slices.Clone(in)
	r.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	return out
}

// Scalars that YAML would read as something else stay strings, and
// nothing a name holds can open a new key.
func TestScalarsStayStrings(t *testing.T) {
	in := input(v1alpha1.PraxisConfig{ClusterEndpoints: []v1alpha1.ClusterEndpoint{plain("yes", "null:80"), plain("a: b\nc", "x:1")}},
		[]envelope.Candidate{candidate("m", "on", "yes")})
	in.Network, in.Gateway = "true", "0x10"
	res, err := praxisconfig.Render(in)
	require.NoError(t, err)
	p := parsePraxis(t, res.YAML)
	assert.Equal(t, "true", p.route.ExpectedOverlayScope.Network)
	assert.Equal(t, "0x10", p.route.ExpectedOverlayScope.Gateway)
	var names []string
	for _, c := range p.lb.Clusters {
		names = append(names, c.Name)
	}
	assert.ElementsMatch(t, []string{"yes", "a: b\nc"}, names)
	assert.False(t, strings.Contains(string(res.YAML), "\nc:"), "a name never opens a key")
}

// A sampling rate of 1 is written as a float, 1.0, as Praxis reads it.
func TestFloatsStayFloats(t *testing.T) {
	in := input(v1alpha1.PraxisConfig{ClusterEndpoints: []v1alpha1.ClusterEndpoint{plain("a", "a:1")},
		Telemetry: &v1alpha1.GatewayTelemetry{SamplingRate: ptr(1.0)}}, nil)
	res, err := praxisconfig.Render(in)
	require.NoError(t, err)
	assert.Contains(t, string(res.YAML), "\n  sampling_rate: 1.0\n")
	p := parsePraxis(t, res.YAML)
	assert.Equal(t, 1.0, *p.file.Telemetry.SamplingRate)

	in.Spec.Telemetry = &v1alpha1.GatewayTelemetry{}
	res, err = praxisconfig.Render(in)
	require.NoError(t, err)
	assert.Contains(t, string(res.YAML), "\ntelemetry: {}\n", "telemetry asked for with no settings: the block and trace_context, nothing else")
	assert.Equal(t, []string{"trace_context", "json_body_field", "intelligent_route", "load_balancer"}, parsePraxis(t, res.YAML).order)
}

func TestRequirementsConfigMapName(t *testing.T) {
	// The reference's rule (the first 16 hex of SHA-256 of the config's
	// ConfigMap name), computed here by sha256sum: a tool that follows the
	// rule finds the document.
	name := praxisconfig.RequirementsConfigMapName("praxis-consumer-config")
	assert.Equal(t, "grid-mount-requirements-d2add1bf9ccf5ecb", name)
	assert.NotEqual(t, name, praxisconfig.RequirementsConfigMapName("praxis-consumer-config-2"))
}
