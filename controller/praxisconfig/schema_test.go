package praxisconfig_test

import (
	"bytes"
	"fmt"
	"net"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"
)

// What Praxis accepts, as typed structs written from its config sources
// (praxis core's config, the AI filters' configs): every struct there
// refuses unknown fields, so a key the renderer misspells or invents makes
// the gateway refuse the file. The decode below refuses unknown fields
// too, and checks the rules Praxis validates at load.

type praxisFile struct {
	Listeners []struct {
		Name         string   `yaml:"name"`
		Address      string   `yaml:"address"`
		FilterChains []string `yaml:"filter_chains"`
	} `yaml:"listeners"`
	FilterChains []struct {
		Name    string      `yaml:"name"`
		Filters []yaml.Node `yaml:"filters"`
	} `yaml:"filter_chains"`
	Telemetry *struct {
		BatchIntervalSecs *uint64  `yaml:"batch_interval_secs"`
		BatchSize         *uint64  `yaml:"batch_size"`
		Environment       *string  `yaml:"environment"`
		OTLPEndpoint      *string  `yaml:"otlp_endpoint"`
		OTLPHeaders       any      `yaml:"otlp_headers"`
		SamplingRate      *float64 `yaml:"sampling_rate"`
		ServiceName       *string  `yaml:"service_name"`
		ServiceVersion    *string  `yaml:"service_version"`
	} `yaml:"telemetry"`
	Admin struct {
		Address string `yaml:"address"`
		Verbose bool   `yaml:"verbose"`
	} `yaml:"admin"`
	ShutdownTimeoutSecs int `yaml:"shutdown_timeout_secs"`
}

type filterHead struct {
	Filter string `yaml:"filter"`
}

type intelligentRoute struct {
	Filter               string   `yaml:"filter"`
	Candidates           any      `yaml:"candidates"`
	LocalSite            *string  `yaml:"local_site"`
	ModelHeader          string   `yaml:"model_header"`
	SkipPaths            []string `yaml:"skip_paths"`
	ManagementCluster    *string  `yaml:"management_cluster"`
	ProviderHopClusters  []string `yaml:"provider_hop_clusters"`
	ExpectedOverlayScope *struct {
		Network   string `yaml:"network"`
		Gateway   string `yaml:"gateway"`
		Namespace string `yaml:"namespace"`
		LocalSite string `yaml:"local_site"`
	} `yaml:"expected_overlay_scope"`
	OverlayFile string `yaml:"overlay_file"`
	Reload      *struct {
		Enabled    bool   `yaml:"enabled"`
		DebounceMS uint64 `yaml:"debounce_ms"`
	} `yaml:"reload"`
	SessionAffinity any `yaml:"session_affinity"`
	MatchClaims     any `yaml:"match_claims"`
}

type credentialInject struct {
	Filter      string `yaml:"filter"`
	Credentials []struct {
		Name      string `yaml:"name"`
		Namespace string `yaml:"namespace"`
		Key       string `yaml:"key"`
		Strategy  string `yaml:"strategy"`
		File      string `yaml:"file"`
	} `yaml:"credentials"`
	ProjectedCredentialMountBase *string `yaml:"projected_credential_mount_base"`
}

type loadBalancer struct {
	Filter   string `yaml:"filter"`
	Clusters []struct {
		Name string `yaml:"name"`
		TLS  *struct {
			CA *struct {
				CAPath string `yaml:"ca_path"`
			} `yaml:"ca"`
			ClientCert *struct {
				CertPath string `yaml:"cert_path"`
				KeyPath  string `yaml:"key_path"`
			} `yaml:"client_cert"`
			SNI    string `yaml:"sni"`
			Verify bool   `yaml:"verify"`
		} `yaml:"tls"`
		Endpoints []string `yaml:"endpoints"`
	} `yaml:"clusters"`
}

type jsonBodyField struct {
	Filter string `yaml:"filter"`
	Field  string `yaml:"field"`
	Header string `yaml:"header"`
}

// parsed is a generated config decoded the way Praxis decodes it.
type parsed struct {
	file   praxisFile
	route  intelligentRoute
	inject *credentialInject
	lb     loadBalancer
	order  []string // the filters, in order
}

func strictDecode(data []byte, into any) error {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	return dec.Decode(into)
}

func strictNode(n *yaml.Node, into any) error {
	var buf bytes.Buffer
	if err := yaml.NewEncoder(&buf).Encode(n); err != nil {
		return err
	}
	return strictDecode(buf.Bytes(), into)
}

// parsePraxis decodes a generated config with Praxis's schema and checks
// its load-time rules; it fails the test on any violation.
func parsePraxis(t *testing.T, data []byte) parsed {
	t.Helper()
	var p parsed
	require.NoError(t, strictDecode(data, &p.file), "the config decodes with Praxis's keys only")
	f := p.file
	require.Len(t, f.Listeners, 1)
	require.Len(t, f.FilterChains, 1)
	chain := f.FilterChains[0]
	require.Equal(t, []string{chain.Name}, f.Listeners[0].FilterChains, "the listener names the chain")
	_, _, err := net.SplitHostPort(f.Listeners[0].Address)
	require.NoError(t, err)
	host, _, err := net.SplitHostPort(f.Admin.Address)
	require.NoError(t, err)
	require.True(t, net.ParseIP(host).IsLoopback(), "Praxis refuses a non-loopback admin address")
	require.Positive(t, f.ShutdownTimeoutSecs)
	if tel := f.Telemetry; tel != nil {
		require.Nil(t, tel.OTLPHeaders, "collector headers never go into the ConfigMap")
		if tel.SamplingRate != nil {
			require.True(t, *tel.SamplingRate >= 0 && *tel.SamplingRate <= 1)
		}
	}
	for i := range chain.Filters {
		n := &chain.Filters[i]
		var head filterHead
		require.NoError(t, n.Decode(&head))
		p.order = append(p.order, head.Filter)
		switch head.Filter {
		case "intelligent_route":
			require.NoError(t, strictNode(n, &p.route), "intelligent_route")
		case "credential_inject":
			p.inject = &credentialInject{}
			require.NoError(t, strictNode(n, p.inject), "credential_inject")
		case "load_balancer":
			require.NoError(t, strictNode(n, &p.lb), "load_balancer")
		case "json_body_field":
			var j jsonBodyField
			require.NoError(t, strictNode(n, &j), "json_body_field")
		case "trace_context":
			require.NoError(t, strictNode(n, &filterHead{}), "trace_context takes no settings")
		default:
			t.Fatalf("filter %q is not one the consumer chain uses", head.Filter)
		}
	}
	// Overlay mode: no inline candidates, the scope pinned, reload on.
	require.Nil(t, p.route.Candidates, "routes come from the overlay file, never inline")
	require.Equal(t, "/etc/praxis/routing/routing-overlay.json", p.route.OverlayFile)
	require.NotNil(t, p.route.ExpectedOverlayScope)
	require.NotNil(t, p.route.Reload)
	require.True(t, p.route.Reload.Enabled)
	clusters := map[string]bool{}
	for _, c := range p.lb.Clusters {
		require.False(t, clusters[c.Name], "cluster %s twice", c.Name)
		clusters[c.Name] = true
		require.NotEmpty(t, c.Endpoints)
		if c.TLS != nil {
			require.NotEmpty(t, strings.TrimSpace(c.TLS.SNI), "a TLS cluster has an SNI")
			require.True(t, c.TLS.Verify, "TLS is verified")
		}
	}
	for _, hop := range p.route.ProviderHopClusters {
		require.True(t, clusters[hop], "provider hop %s is a load_balancer cluster", hop)
	}
	require.Equal(t, "load_balancer", p.order[len(p.order)-1], "load_balancer ends the chain")
	if p.inject != nil {
		for _, c := range p.inject.Credentials {
			require.True(t, strings.HasPrefix(c.File, "/"), "credentials are file references")
		}
	}
	return p
}

func (p parsed) String() string { return fmt.Sprint(p.order) }
