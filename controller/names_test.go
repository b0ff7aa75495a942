package controller_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gridsync/gridsync/controller/api/v1alpha1"
)

// aliasPair is one field upstream's earlier releases spell differently.
type aliasPair struct {
	kind     string
	old, cur string
	// a and b are two different values of the field.
	a, b any
	// object builds the object with fields placed where the pair lives.
	object func(e *env, name string, fields map[string]any) *unstructured.Unstructured
	// read is the value the agent reads, decoded by its typed client.
	read func(e *env, name string) any
	// readA is what read returns when the field holds a.
	readA any
	// oneOnly: the schema cannot compare the two (CEL has no equality
	// between objects of two declared types, and these hold lists and
	// free-form objects), so both names are refused even when equal.
	oneOnly bool
}

func gridObject(kind, name string, spec map[string]any) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": v1alpha1.GroupVersion.String(), "kind": kind,
		"metadata": map[string]any{"name": name},
		"spec":     spec,
	}}
}

func merged(base, fields map[string]any) map[string]any {
	for k, v := range fields {
		base[k] = v
	}
	return base
}

// networkWithGateway places fields in a network's one gateway entry.
func networkWithGateway(e *env, name string, fields map[string]any) *unstructured.Unstructured {
	gw := merged(map[string]any{"name": "edge", "namespace": e.gwNS}, fields)
	return gridObject("GridNetwork", name, map[string]any{"consumerGateways": []any{gw}})
}

// networkWithPraxisConfig places fields in a gateway's praxisConfig.
func networkWithPraxisConfig(e *env, name string, fields map[string]any) *unstructured.Unstructured {
	return networkWithGateway(e, name, map[string]any{"praxisConfig": merged(map[string]any{"configMapName": "praxis-consumer-config"}, fields)})
}

func providerSpec(network string) map[string]any {
	return map[string]any{"gridNetworkRef": network, "providerKind": "vllm", "backendKind": "openai_compatible",
		"endpoint": "https://east.example", "models": []any{map[string]any{"name": "m"}}}
}

func readNetwork(e *env, name string) *v1alpha1.GridNetwork {
	var n v1alpha1.GridNetwork
	require.NoError(e.t, e.admin.Get(e.ctx, client.ObjectKey{Name: name}, &n))
	return &n
}

func readProvider(e *env, name string) *v1alpha1.InferenceProvider {
	var p v1alpha1.InferenceProvider
	require.NoError(e.t, e.admin.Get(e.ctx, client.ObjectKey{Name: name}, &p))
	return &p
}

func aliasPairs() []aliasPair {
	ref := func(name string) map[string]any { return map[string]any{"name": name, "namespace": "grid-system"} }
	return []aliasPair{
		{
			kind: "GridNetwork", old: "gatewayRefs", cur: "consumerGateways",
			a: []any{map[string]any{"name": "edge-a", "namespace": "praxis"}}, b: []any{map[string]any{"name": "edge-b", "namespace": "praxis"}},
			object: func(_ *env, name string, f map[string]any) *unstructured.Unstructured {
				return gridObject("GridNetwork", name, f)
			},
			read: func(e *env, name string) any {
				gws := readNetwork(e, name).Spec.ConsumerGateways
				if len(gws) != 1 {
					return gws
				}
				return gws[0].Name
			},
			readA:   "edge-a",
			oneOnly: true,
		},
		{
			kind: "GridNetwork", old: "localSiteName", cur: "siteName", a: "east", b: "west",
			object: networkWithGateway,
			read:   func(e *env, name string) any { return readNetwork(e, name).Spec.ConsumerGateways[0].SiteName },
			readA:  "east",
		},
		{
			kind: "GridNetwork", old: "consumerConfig", cur: "praxisConfig",
			a: map[string]any{"configMapName": "config-a"}, b: map[string]any{"configMapName": "config-b"},
			object: networkWithGateway,
			read: func(e *env, name string) any {
				pc := readNetwork(e, name).Spec.ConsumerGateways[0].PraxisConfig
				if pc == nil {
					return nil
				}
				return pc.ConfigMapName
			},
			readA:   "config-a",
			oneOnly: true,
		},
		{
			kind: "GridNetwork", old: "enabled", cur: "generate", a: true, b: false,
			object: networkWithPraxisConfig,
			read: func(e *env, name string) any {
				return readNetwork(e, name).Spec.ConsumerGateways[0].PraxisConfig.Generate
			},
			readA: true,
		},
		{
			kind: "GridNetwork", old: "credentialMountBase", cur: "credentialMountPath", a: "/run/a", b: "/run/b",
			object: networkWithPraxisConfig,
			read: func(e *env, name string) any {
				return readNetwork(e, name).Spec.ConsumerGateways[0].PraxisConfig.CredentialMountPath
			},
			readA: "/run/a",
		},
		{
			kind: "GridNetwork", old: "swimKeyRef", cur: "swimKeySecretRef", a: ref("key-a"), b: ref("key-b"),
			object: func(_ *env, name string, f map[string]any) *unstructured.Unstructured {
				return gridObject("GridNetwork", name, map[string]any{"tls": f})
			},
			read: func(e *env, name string) any {
				t := readNetwork(e, name).Spec.TLS
				if t == nil || t.SwimKeySecretRef == nil {
					return nil
				}
				return t.SwimKeySecretRef.Name
			},
			readA: "key-a",
		},
		{
			kind: "GridSite", old: "egress", cur: "gatewayEndpoint",
			a: map[string]any{"address": "east.example:8443"}, b: map[string]any{"address": "west.example:8443"},
			object: func(_ *env, name string, f map[string]any) *unstructured.Unstructured {
				return gridObject("GridSite", name, merged(map[string]any{"gridNetworkRef": "production"}, f))
			},
			read: func(e *env, name string) any {
				var s v1alpha1.GridSite
				require.NoError(e.t, e.admin.Get(e.ctx, client.ObjectKey{Name: name}, &s))
				if s.Spec.GatewayEndpoint == nil {
					return nil
				}
				return s.Spec.GatewayEndpoint.Address
			},
			readA: "east.example:8443",
		},
		{
			kind: "InferenceProvider", old: "routingClusterRef", cur: "clusterName", a: "cluster-a", b: "cluster-b",
			object: func(_ *env, name string, f map[string]any) *unstructured.Unstructured {
				return gridObject("InferenceProvider", name, merged(providerSpec("production"), f))
			},
			read:  func(e *env, name string) any { return readProvider(e, name).Spec.ClusterName },
			readA: "cluster-a",
		},
		{
			kind: "InferenceProvider", old: "manual", cur: "credentialsManagedExternally", a: true, b: false,
			object: func(_ *env, name string, f map[string]any) *unstructured.Unstructured {
				return gridObject("InferenceProvider", name, merged(providerSpec("production"), map[string]any{
					"auth": merged(map[string]any{"strategy": "api_key"}, f)}))
			},
			read:  func(e *env, name string) any { return readProvider(e, name).Spec.Auth.CredentialsManagedExternally },
			readA: true,
		},
		{
			kind: "InferenceProvider", old: "metricsEndpoint", cur: "endpoint", a: "http://127.0.0.1:9000", b: "http://127.0.0.1:9001",
			object: func(_ *env, name string, f map[string]any) *unstructured.Unstructured {
				return gridObject("InferenceProvider", name, merged(providerSpec("production"), map[string]any{"metricsConfig": f}))
			},
			read: func(e *env, name string) any {
				m := readProvider(e, name).Spec.MetricsConfig
				if m == nil {
					return nil
				}
				return m.MetricsEndpoint
			},
			readA: "http://127.0.0.1:9000",
		},
	}
}

// Every field upstream's earlier releases spell differently is accepted
// under either name, alone or with the other holding the same value,
// under strict field validation and without it; the field reads back as
// written (nothing pruned), and the agent reads it under the one name it
// acts on. Both names with different values are refused, naming both.
func TestEveryFieldIsAcceptedUnderItsEarlierAndItsCurrentName(t *testing.T) {
	e := newEnv(t)
	for i, p := range aliasPairs() {
		t.Run(p.kind+"/"+p.old, func(t *testing.T) {
			cases := []struct {
				name   string
				fields map[string]any
				strict bool
			}{
				{"earlier name alone", map[string]any{p.old: p.a}, true},
				{"earlier name alone, no strict validation", map[string]any{p.old: p.a}, false},
				{"current name alone", map[string]any{p.cur: p.a}, true},
			}
			if !p.oneOnly {
				cases = append(cases, struct {
					name   string
					fields map[string]any
					strict bool
				}{"both names, equal", map[string]any{p.old: p.a, p.cur: p.a}, true})
			}
			for j, c := range cases {
				name := fmt.Sprintf("alias-%s-%d-%d", e.id, i, j)
				obj := p.object(e, name, c.fields)
				want := obj.DeepCopy()
				validation := client.FieldValidation("Ignore")
				if c.strict {
					validation = client.FieldValidation("Strict")
				}
				require.NoError(t, e.admin.Create(e.ctx, obj, validation), c.name)
				t.Cleanup(func() { _ = e.admin.Delete(e.ctx, obj) })
				got := &unstructured.Unstructured{}
				got.SetGroupVersionKind(obj.GroupVersionKind())
				require.NoError(t, e.admin.Get(e.ctx, client.ObjectKey{Name: name}, got))
				assert.Empty(t, missingFields(c.name, want.Object["spec"], got.Object["spec"]), "fields pruned or changed")
				assert.Equal(t, p.readA, p.read(e, name), c.name)
			}

			refused := []map[string]any{{p.old: p.a, p.cur: p.b}}
			if p.oneOnly {
				refused = append(refused, map[string]any{p.old: p.a, p.cur: p.a})
			}
			for k, fields := range refused {
				name := fmt.Sprintf("alias-%s-%d-refused-%d", e.id, i, k)
				err := e.admin.Create(e.ctx, p.object(e, name, fields), client.FieldValidation("Strict"))
				require.Error(t, err, "both names (%v) must be refused", fields)
				assert.True(t, apierrors.IsInvalid(err), "%v", err)
				assert.Contains(t, err.Error(), p.old)
				assert.Contains(t, err.Error(), p.cur)
			}
		})
	}
}

// peerTrust.mode takes upstream's pin as well as pinned, and the agent
// reads both as pinned.
func TestPeerTrustModePinIsPinned(t *testing.T) {
	e := newEnv(t)
	for _, mode := range []string{"pin", "pinned", "spiffe"} {
		name := fmt.Sprintf("trust-%s-%s", mode, e.id)
		obj := gridObject("GridNetwork", name, map[string]any{"peerTrust": map[string]any{"mode": mode}})
		require.NoError(t, e.admin.Create(e.ctx, obj, client.FieldValidation("Strict")), mode)
		t.Cleanup(func() { _ = e.admin.Delete(e.ctx, obj) })
		want := map[string]string{"pin": "pinned", "pinned": "pinned", "spiffe": "spiffe"}[mode]
		assert.Equal(t, want, readNetwork(e, name).Spec.PeerTrust.Mode, mode)
	}
	err := e.admin.Create(e.ctx, gridObject("GridNetwork", "trust-bad-"+e.id, map[string]any{"peerTrust": map[string]any{"mode": "pinning"}}))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "spec.peerTrust.mode")
}
