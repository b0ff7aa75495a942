package overlay

import (
	"github.com/gridsync/gridsync/api/v1alpha1"
	"github.com/gridsync/gridsync/controller/praxisconfig"
	assess "github.com/gridsync/gridsync/controller/providerpolicy"
	"github.com/gridsync/gridsync/controller/render"
)

// OfflinePraxisConfig is one gateway's Praxis config rendered from
// manifests, without a cluster.
type OfflinePraxisConfig struct {
	Gateway, Namespace, ConfigMapName string
	// Result is the rendered config; Err says why there is none.
	Result       praxisconfig.Result
	Requirements []byte
	Err          error
}

// RenderPraxisConfigs renders the Praxis config of every gateway of a
// network that asks for one, with the code the agent runs, as the agent
// would render it with every provider of the network Available, every
// Secret a provider names present, and no remote site: what a change to
// the manifests does to the generated files, before it is applied.
func RenderPraxisConfigs(network *v1alpha1.GridNetwork, providers []v1alpha1.InferenceProvider) []OfflinePraxisConfig {
	var items []v1alpha1.InferenceProvider
	secrets := offlineSecrets{}
	for _, p := range providers {
		if p.Spec.GridNetworkRef != network.Name {
			continue
		}
		items = append(items, p)
		if a := p.Spec.Auth; a != nil && a.SecretRef != nil {
			key := [2]string{a.SecretRef.Namespace, a.SecretRef.Name}
			if secrets[key] == nil {
				secrets[key] = assess.SecretShape{}
			}
			secrets[key][a.SecretRef.Key] = true
		}
	}
	var rendered []render.Provider
	for i := range items {
		v, err := assess.Assess(&items[i], assess.Options{Secrets: secrets, SecretNamespaceWatched: func(string) bool { return true }})
		if err != nil || v.Phase == v1alpha1.ProviderUnavailable {
			continue // not routable however it is deployed
		}
		v.Provider.Phase = v1alpha1.ProviderAvailable
		rendered = append(rendered, v.Provider)
	}
	in := newPraxisInputs(network, items)
	var out []OfflinePraxisConfig
	for _, gw := range gateways(network) {
		spec := praxisSpec(network, gw)
		if spec == nil {
			continue
		}
		input := praxisInputFor(network, gw, spec, render.Overlay(network.Name, gw, rendered), in)
		o := OfflinePraxisConfig{Gateway: gw.Name, Namespace: gw.Namespace, ConfigMapName: praxisconfig.ConfigMapName(*spec)}
		o.Result, o.Err = praxisconfig.Render(input)
		if o.Err == nil {
			o.Requirements, o.Err = praxisconfig.Requirements(input, o.Result)
		}
		out = append(out, o)
	}
	return out
}

// offlineSecrets has every key a provider names.
type offlineSecrets map[[2]string]assess.SecretShape

func (s offlineSecrets) SecretShape(namespace, name string) (assess.SecretShape, bool, error) {
	shape, ok := s[[2]string{namespace, name}]
	return shape, ok, nil
}
