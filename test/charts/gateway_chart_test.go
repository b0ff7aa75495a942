package charts

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/gridsync/gridsync/shared/envelope"
	"github.com/gridsync/gridsync/shared/overlaysync"
)

const gatewayChart = "praxis-gateway"

func sidecarValues(extra map[string]any) map[string]any {
	sidecar := map[string]any{"enabled": true, "expectedNetwork": "glb-demo", "expectedGateway": "edge-gateway", "expectedLocalSite": "east-edge"}
	for k, v := range extra {
		sidecar[k] = v
	}
	// overlay.enabled is left out on purpose: the sidecar alone gives the
	// gateway its overlay.
	return map[string]any{"overlay": map[string]any{"sidecar": sidecar}}
}

var gatewayCases = []valueCase{
	{name: "upstream-fallback", release: "praxis", namespace: "gw-fallback", values: map[string]any{
		"config":  map[string]any{"existingConfigMap": "praxis-config"},
		"overlay": map[string]any{"enabled": true, "items": []map[string]string{{"key": "routing-overlay.json", "path": "routing-overlay.json"}}, "sidecar": map[string]any{"expectedNetwork": "glb-demo", "expectedGateway": "edge-gateway"}},
	}},
	{name: "sidecar", release: "praxis", namespace: "gw-sidecar", values: func() map[string]any {
		v := sidecarValues(nil)
		v["config"] = map[string]any{"existingConfigMap": "praxis-config"}
		v["tls"] = map[string]any{"enabled": true, "secretName": "praxis-tls"}
		v["credentials"] = []map[string]string{{"secretName": "east-token", "mountPath": "/var/run/praxis/credentials/east"}}
		return v
	}()},
	{name: "native-sidecar", release: "praxis", namespace: "gw-native", values: sidecarValues(map[string]any{"native": true, "expireAfter": "5m"})},
	{name: "long-names", release: "praxis", namespace: "gw-long", values: sidecarValues(map[string]any{
		"expectedNetwork": "production-network-east", "expectedGateway": "inference-edge-gateway-primary-01",
	})},
	{name: "identity-and-monitoring", release: "praxis", namespace: "gw-observed", values: func() map[string]any {
		v := sidecarValues(map[string]any{"identity": map[string]any{"enabled": true, "secretName": "gateway-tls"}})
		v["metrics"] = map[string]any{
			"serviceMonitor": map[string]any{"enabled": true}, "podMonitor": map[string]any{"enabled": true},
			"prometheusRule": map[string]any{"enabled": true}, "dashboard": map[string]any{"enabled": true},
		}
		return v
	}()},
	{name: "defaults", release: "praxis", namespace: "gw-defaults", values: map[string]any{}},
}

func TestGatewayChartLintsAndMatchesItsGoldenFiles(t *testing.T) {
	for _, c := range gatewayCases {
		t.Run(c.name, func(t *testing.T) {
			lint(t, gatewayChart, c)
			checkGolden(t, gatewayChart, c.name, render(t, gatewayChart, c))
		})
	}
}

// The chart derives the overlay ConfigMap's name with the controller's
// rule, FNV-1a hash of long names included.
func TestGatewayChartDerivesTheControllersConfigMapName(t *testing.T) {
	for _, names := range [][2]string{
		{"net", "gw"},
		{strings.Repeat("a", 50), strings.Repeat("b", 50)},
		{"production-network-east", "inference-edge-gateway-primary-01"},
		{"a.b-c", "gateway-with-a-name-long-enough-to-cross-the-limit-0123456789"},
	} {
		c := valueCase{name: "names", release: "r", namespace: "ns", values: sidecarValues(map[string]any{"expectedNetwork": names[0], "expectedGateway": names[1]})}
		objs := objects(t, render(t, gatewayChart, c))
		role := ofKind(objs, "Role")[0]
		assert.Equal(t, []string{envelope.ConfigMapName(names[0], names[1])}, rulesOf(t, role)[0].ResourceNames, "%v", names)
	}
}

func deploymentOf(t *testing.T, rendered string) *appsv1.Deployment {
	t.Helper()
	var d appsv1.Deployment
	require.NoError(t, runtime.DefaultUnstructuredConverter.FromUnstructured(ofKind(objects(t, rendered), "Deployment")[0].UnstructuredContent(), &d))
	return &d
}

func TestGatewayChartWiresTheSyncContainersAndKeepsTheGatewayTokenless(t *testing.T) {
	for _, c := range gatewayCases[1:5] {
		t.Run(c.name, func(t *testing.T) {
			d := deploymentOf(t, render(t, gatewayChart, c))
			pod := d.Spec.Template.Spec
			require.NotNil(t, pod.AutomountServiceAccountToken)
			assert.False(t, *pod.AutomountServiceAccountToken)
			var gateway corev1.Container
			var sync []corev1.Container
			for _, ctr := range append(append([]corev1.Container{}, pod.InitContainers...), pod.Containers...) {
				if ctr.Name == "gateway" {
					gateway = ctr
				} else {
					sync = append(sync, ctr)
				}
			}
			for _, m := range gateway.VolumeMounts {
				assert.NotEqual(t, "overlay-sync-token", m.Name, "the gateway has no API token")
				if m.Name == "routing-overlay" {
					assert.True(t, m.ReadOnly)
					assert.Empty(t, m.SubPath)
				}
			}
			require.Len(t, sync, 2-boolInt(c.name == "native-sidecar"))
			for _, ctr := range sync {
				var mounts []string
				for _, m := range ctr.VolumeMounts {
					mounts = append(mounts, m.Name)
				}
				want := []string{"routing-overlay", "overlay-sync-token"}
				if c.name == "identity-and-monitoring" {
					want = append(want, "identity-source") // the TLS Secret: sync containers only
				}
				assert.ElementsMatch(t, want, mounts)
				assert.True(t, *ctr.SecurityContext.ReadOnlyRootFilesystem)
				assert.False(t, *ctr.SecurityContext.AllowPrivilegeEscalation)
			}
			if c.name == "native-sidecar" {
				require.Len(t, pod.InitContainers, 1)
				require.NotNil(t, pod.InitContainers[0].RestartPolicy)
				assert.Equal(t, corev1.ContainerRestartPolicyAlways, *pod.InitContainers[0].RestartPolicy)
				assert.Equal(t, "/startupz", pod.InitContainers[0].StartupProbe.HTTPGet.Path)
			}
			for _, v := range pod.Volumes {
				if v.Name == "routing-overlay" {
					require.NotNil(t, v.EmptyDir)
					assert.Equal(t, corev1.StorageMediumMemory, v.EmptyDir.Medium)
				}
			}
		})
	}
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

func TestGatewayChartObjectsAreAcceptedByTheAPIServer(t *testing.T) {
	installMonitoringCRDs(t)
	c := adminClient(t)
	for _, vc := range gatewayCases {
		t.Run(vc.name, func(t *testing.T) {
			applyRendered(t, c, vc, render(t, gatewayChart, vc))
		})
	}
}

// The sidecar runs on a token of the chart's ServiceAccount, under the
// chart's Role, and may read its one ConfigMap and nothing else.
func TestGatewayChartRoleLetsTheSidecarReadItsOverlayAndNothingElse(t *testing.T) {
	vc := gatewayCases[1]
	applyRendered(t, adminClient(t), vc, render(t, gatewayChart, vc))
	sa := "praxis-praxis-gateway-overlay-sync"
	configMap := envelope.ConfigMapName("glb-demo", "edge-gateway")
	user := "system:serviceaccount:" + vc.namespace + ":" + sa
	assertAccess(t, user, []access{
		{true, authorizationv1.ResourceAttributes{Verb: "get", Namespace: vc.namespace, Resource: "configmaps", Name: configMap}},
		{true, authorizationv1.ResourceAttributes{Verb: "watch", Namespace: vc.namespace, Resource: "configmaps", Name: configMap}},
		{false, authorizationv1.ResourceAttributes{Verb: "get", Namespace: vc.namespace, Resource: "configmaps", Name: "praxis-config"}},
		{false, authorizationv1.ResourceAttributes{Verb: "list", Namespace: vc.namespace, Resource: "configmaps"}},
		{false, authorizationv1.ResourceAttributes{Verb: "update", Namespace: vc.namespace, Resource: "configmaps", Name: configMap}},
		{false, authorizationv1.ResourceAttributes{Verb: "get", Namespace: vc.namespace, Resource: "secrets", Name: "east-token"}},
		{false, authorizationv1.ResourceAttributes{Verb: "get", Namespace: "elsewhere", Resource: "configmaps", Name: configMap}},
	})

	cfg, err := cp.ServiceAccountConfig(t.Context(), vc.namespace, sa)
	require.NoError(t, err)
	scope := envelope.Scope{Network: "glb-demo", Gateway: "edge-gateway", Namespace: vc.namespace, LocalSite: "east-edge"}
	output := filepath.Join(t.TempDir(), "routing-overlay.json")
	syncer, err := overlaysync.New(cfg, overlaysync.Options{
		Namespace: vc.namespace, ConfigMap: configMap, DataKey: envelope.DataKeyEnvelope, Output: output,
		Expect: scope, Registerer: prometheus.NewRegistry(),
	})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- syncer.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		assert.NoError(t, <-done)
	})
	doc, revision, err := envelope.Build(envelope.Overlay{Network: scope.Network, LocalSite: scope.LocalSite, Candidates: []envelope.Candidate{}}, scope, envelope.Provenance{Producer: "chart-test"})
	require.NoError(t, err)
	_, err = cp.AdminClient().CoreV1().ConfigMaps(vc.namespace).Create(t.Context(), &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: configMap}, Data: map[string]string{envelope.DataKeyEnvelope: string(doc)},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = cp.AdminClient().CoreV1().ConfigMaps(vc.namespace).Delete(context.Background(), configMap, metav1.DeleteOptions{})
	})
	require.Eventually(t, func() bool {
		data, err := os.ReadFile(output)
		if err != nil {
			return false
		}
		res, err := envelope.Validate(data, envelope.Options{Expect: scope})
		return err == nil && res.Revision == revision
	}, 20*time.Second, 20*time.Millisecond, "the sidecar delivers with the chart's RBAC")
}

func TestGatewayChartRefusesValuesOutsideItsSchema(t *testing.T) {
	for name, values := range map[string]map[string]any{
		"sidecar without a network":   {"overlay": map[string]any{"enabled": true, "sidecar": map[string]any{"enabled": true, "expectedLocalSite": "s"}}},
		"sidecar without a site":      {"overlay": map[string]any{"enabled": true, "sidecar": map[string]any{"enabled": true, "expectedNetwork": "n"}}},
		"unknown sidecar value":       {"overlay": map[string]any{"sidecar": map[string]any{"expectedNetwrok": "n"}}},
		"expire-after not a duration": {"overlay": map[string]any{"sidecar": map[string]any{"expireAfter": "soon"}}},
		"disk-backed medium typo":     {"overlay": map[string]any{"sidecar": map[string]any{"volume": map[string]any{"medium": "memory"}}}},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := runHelm(t, values, "template", "x", chartDir(gatewayChart), "--kube-version", kubeVersion)
			require.Error(t, err)
			assert.Contains(t, err.Error(), "schema")
		})
	}
}

// The helm test asks the sidecar, through the Service, for /startupz: 200
// only once the overlay file is in place.
func TestGatewayChartHelmTestProbesTheOverlayFile(t *testing.T) {
	objs := objects(t, render(t, gatewayChart, gatewayCases[1]))
	var test *corev1.Pod
	for _, o := range ofKind(objs, "Pod") {
		if o.GetAnnotations()["helm.sh/hook"] == "test" {
			test = &corev1.Pod{}
			require.NoError(t, runtime.DefaultUnstructuredConverter.FromUnstructured(o.UnstructuredContent(), test))
		}
	}
	require.NotNil(t, test, "a helm test pod")
	assert.Equal(t, []string{"probe", "http://praxis-praxis-gateway.gw-sidecar.svc:9091/startupz"}, test.Spec.Containers[0].Args)
}

// The monitoring objects carry the alerts and dashboard panels a user
// needs, and the dashboard is valid JSON.
func TestGatewayChartShipsAlertsAndADashboard(t *testing.T) {
	objs := objects(t, render(t, gatewayChart, gatewayCases[4]))
	rule := ofKind(objs, "PrometheusRule")
	require.Len(t, rule, 1)
	var alerts []string
	groups, _, _ := unstructured.NestedSlice(rule[0].Object, "spec", "groups")
	for _, g := range groups {
		rules, _, _ := unstructured.NestedSlice(g.(map[string]any), "rules")
		for _, r := range rules {
			alerts = append(alerts, r.(map[string]any)["alert"].(string))
		}
	}
	assert.ElementsMatch(t, []string{
		"GridOverlaySidecarNotReady", "GridOverlayDeliveryDegraded", "GridOverlaySourceNotConfirmed",
		"GridOverlayUpdatesRejected", "GridsyncIdentityRejected", "GridsyncIdentityExpiringSoon",
	}, alerts)

	var dashboard struct {
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
	}
	for _, cm := range ofKind(objs, "ConfigMap") {
		data, _, _ := unstructured.NestedString(cm.Object, "data", "gridsync-overlay-delivery.json")
		require.NoError(t, json.Unmarshal([]byte(data), &dashboard))
	}
	var exprs []string
	for _, p := range dashboard.Panels {
		for _, target := range p.Targets {
			exprs = append(exprs, target.Expr)
		}
	}
	joined := strings.Join(exprs, "\n")
	for _, metric := range []string{"grid_overlay_sync_delivery_latency_seconds_bucket", "grid_overlay_sync_revision_info",
		"grid_overlay_sync_validation_failures_total", "gridsync_identity_not_after_timestamp_seconds"} {
		assert.Contains(t, joined, metric)
	}
}
