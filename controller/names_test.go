package controller_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gridsync/gridsync/api/v1alpha1"
	"github.com/gridsync/gridsync/charts/gridsync-agent/files/crds"
	"github.com/gridsync/gridsync/internal/cli/convert"
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

// withGroup is obj with its API group set to the current one and nothing
// else changed.
func withGroup(obj *unstructured.Unstructured) *unstructured.Unstructured {
	out := obj.DeepCopy()
	if gv := out.GetAPIVersion(); strings.HasPrefix(gv, convert.EarlierGroup+"/") {
		out.SetAPIVersion(convert.Group + strings.TrimPrefix(gv, convert.EarlierGroup))
	}
	return out
}

// Upstream's manifests of its earlier releases (its samples, examples,
// chart templates and fixtures, in their shapes) apply as they are, their
// group aside, with strict field validation and without, and read back
// with nothing pruned; what the agent reads of them is what they say.
// Converted by gridsync-agent convert, they apply strictly too, and the
// reference's manifests (the current generation) convert to themselves.
func TestUpstreamManifestsApplyWithNothingPrunedAndConvert(t *testing.T) {
	e := newEnv(t)
	schemas, err := convert.LoadSchemas(crds.Manifests)
	require.NoError(t, err)
	apply := func(obj *unstructured.Unstructured, validation string) *unstructured.Unstructured {
		t.Helper()
		what := obj.GetKind() + " " + obj.GetName() + " (" + validation + ")"
		require.NoError(t, e.admin.Create(e.ctx, obj, client.FieldValidation(validation)), what)
		got := &unstructured.Unstructured{}
		got.SetGroupVersionKind(obj.GroupVersionKind())
		require.NoError(t, e.admin.Get(e.ctx, client.ObjectKeyFromObject(obj), got), what)
		return got
	}
	remove := func(obj *unstructured.Unstructured) {
		require.NoError(t, e.admin.Delete(e.ctx, obj))
		require.Eventually(t, func() bool {
			got := &unstructured.Unstructured{}
			got.SetGroupVersionKind(obj.GroupVersionKind())
			return apierrors.IsNotFound(e.admin.Get(e.ctx, client.ObjectKeyFromObject(obj), got))
		}, 10*time.Second, 20*time.Millisecond)
	}

	upstream := readManifests(t, "testdata/upstream-manifests.yaml")
	require.Len(t, upstream, 7)
	for _, obj := range upstream {
		obj.SetName(obj.GetName() + "-" + e.id)
		e.label(obj)
		for _, validation := range []string{"Strict", "Ignore"} {
			want := withGroup(obj)
			got := apply(want.DeepCopy(), validation)
			assert.Empty(t, missingFields(want.GetKind()+" "+want.GetName(), want.Object["spec"], got.Object["spec"]), "fields pruned or changed (%s)", validation)
			remove(want)
		}

		converted := obj.DeepCopy()
		require.NoError(t, convert.Object(converted.Object, schemas), obj.GetName())
		assert.Equal(t, convert.Group+"/v1alpha1", converted.GetAPIVersion())
		got := apply(converted.DeepCopy(), "Strict")
		assert.Empty(t, missingFields(converted.GetName(), converted.Object["spec"], got.Object["spec"]), "converted fields pruned or changed")
		for _, old := range []string{"gatewayRefs", "egress", "routingClusterRef"} {
			assert.NotContains(t, converted.Object["spec"], old)
		}
		remove(converted)
	}

	// What the agent reads is the same under both generations' names.
	net := withGroup(upstream[1])
	apply(net, "Strict")
	n := readNetwork(e, net.GetName())
	require.Len(t, n.Spec.ConsumerGateways, 1)
	gw := n.Spec.ConsumerGateways[0]
	assert.Equal(t, "east-a", gw.SiteName)
	require.NotNil(t, gw.PraxisConfig)
	assert.True(t, gw.PraxisConfig.Generate)
	assert.Equal(t, "/run/secrets/grid-credentials", gw.PraxisConfig.CredentialMountPath)
	assert.Equal(t, "grid-swim-key", n.Spec.TLS.SwimKeySecretRef.Name)
	assert.Equal(t, "8c7f0a36-7d55-4a0c-9a8e-2f1a6b0b5d11", n.Spec.GridID)
	prov := withGroup(upstream[5])
	apply(prov, "Strict")
	p := readProvider(e, prov.GetName())
	assert.Equal(t, "east-b", p.Spec.ClusterName)
	assert.True(t, p.Spec.Auth.CredentialsManagedExternally)
	assert.Equal(t, "http://vllm-pool-epp.east-b.svc:9090", p.Spec.MetricsConfig.MetricsEndpoint)

	// The current generation converts to itself.
	for _, obj := range readManifests(t, "testdata/reference-manifests.yaml") {
		converted := obj.DeepCopy()
		require.NoError(t, convert.Object(converted.Object, schemas), obj.GetName())
		assert.Equal(t, obj.Object, converted.Object, "%s %s", obj.GetKind(), obj.GetName())
	}

	// What has no equivalent is refused by name, not pruned.
	hc := upstream[4].DeepCopy()
	require.NoError(t, unstructured.SetNestedField(hc.Object, "200", "spec", "healthCheck", "expectedStatus"))
	err = convert.Object(hc.Object, schemas)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "spec.healthCheck.expectedStatus has no equivalent")
	tool := &unstructured.Unstructured{Object: map[string]any{"apiVersion": convert.EarlierGroup + "/v1alpha1", "kind": "AgentToolProvider",
		"metadata": map[string]any{"name": "tools"}, "spec": map[string]any{}}}
	err = convert.Object(tool.Object, schemas)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "AgentToolProvider has no equivalent")
}

// kubectl's habits find the Grid resources: upstream's short names beside
// ours, the grid category (kubectl get grid), and a Ready column read from
// the Ready condition.
func TestShortNamesCategoriesAndReadyColumn(t *testing.T) {
	e := newEnv(t)
	dc, err := discovery.NewDiscoveryClientForConfig(e.cp.AdminConfig())
	require.NoError(t, err)
	list, err := dc.ServerResourcesForGroupVersion(v1alpha1.GroupVersion.String())
	require.NoError(t, err)
	byName := map[string]metav1.APIResource{}
	for _, r := range list.APIResources {
		byName[r.Name] = r
	}
	for resource, short := range map[string][]string{"gridnetworks": {"gnet", "gnw"}, "inferenceproviders": {"iprov", "infpvd"}, "gridsites": {"gs"}} {
		r, ok := byName[resource]
		require.True(t, ok, resource)
		assert.ElementsMatch(t, short, r.ShortNames, resource)
		assert.Equal(t, []string{"grid"}, r.Categories, resource)
	}

	// The Ready column, as kubectl get prints it.
	n := e.network()
	e.create(n)
	n.Status.Conditions = []metav1.Condition{{Type: "Ready", Status: metav1.ConditionTrue, Reason: "AllOverlaysDistributed", LastTransitionTime: metav1.Now()}}
	n.Status.GridID = "grid-one"
	require.NoError(t, e.admin.Status().Update(e.ctx, n))
	rc, err := rest.RESTClientFor(tableConfig(e.cp.AdminConfig()))
	require.NoError(t, err)
	var table metav1.Table
	require.NoError(t, rc.Get().AbsPath("/apis", v1alpha1.GroupVersion.Group, v1alpha1.GroupVersion.Version, "gridnetworks", n.Name).
		SetHeader("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io").Do(e.ctx).Into(&table))
	require.Len(t, table.Rows, 1)
	cells := map[string]any{}
	for i, c := range table.ColumnDefinitions {
		cells[c.Name] = table.Rows[0].Cells[i]
	}
	assert.Equal(t, "True", cells["Ready"])
	assert.Equal(t, "grid-one", cells["Grid ID"])
}

// tableConfig is cfg for a REST client that decodes meta.k8s.io Tables.
func tableConfig(cfg *rest.Config) *rest.Config {
	out := rest.CopyConfig(cfg)
	out.GroupVersion = &metav1.SchemeGroupVersion
	out.APIPath = "/apis"
	out.NegotiatedSerializer = scheme.Codecs.WithoutConversion()
	return out
}
