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
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/gridsync/gridsync/controller/rbac"
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
		v["tls"] = map[string]any{"enabled": true, "existingSecret": "praxis-tls"}
		v["credentials"] = []map[string]any{{"name": "east-token", "mountPath": "/var/run/praxis/credentials/east"}}
		return v
	}()},
	{name: "native-sidecar", release: "praxis", namespace: "gw-native", values: sidecarValues(map[string]any{"native": true, "expireAfter": "5m"})},
	{name: "long-names", release: "praxis", namespace: "gw-long", values: sidecarValues(map[string]any{
		"expectedNetwork": "production-network-east", "expectedGateway": "inference-edge-gateway-primary-01",
	})},
	{name: "identity-and-monitoring", release: "praxis", namespace: "gw-observed", values: func() map[string]any {
		v := sidecarValues(map[string]any{"identity": map[string]any{"enabled": true, "secretName": "gateway-tls"},
			"report":        map[string]any{"to": "https://sig-gridsync-agent-signals.sig-system.svc:9443", "serverName": "site-s.grid.internal"},
			"networkPolicy": map[string]any{"enabled": true, "metricsFrom": []any{map[string]any{"namespaceSelector": map[string]any{"matchLabels": map[string]any{"kubernetes.io/metadata.name": "monitoring"}}}}}})
		v["metrics"] = map[string]any{
			"serviceMonitor": map[string]any{"enabled": true}, "podMonitor": map[string]any{"enabled": true},
			"prometheusRule": map[string]any{"enabled": true}, "dashboard": map[string]any{"enabled": true},
		}
		return v
	}()},
	{name: "defaults", release: "praxis", namespace: "gw-defaults", values: map[string]any{}},
	{name: "mount-reconciliation", release: "praxis", namespace: "gw-mounts", values: mountReconciliationValues(true)},
	{name: "generated-config", release: "praxis", namespace: "gw-generated", values: func() map[string]any {
		v := sidecarValues(nil)
		v["praxisConfig"] = map[string]any{
			"source": "operator", "operator": map[string]any{"configMapName": "edge-praxis"},
			"credentialSecrets": []string{"openai-token", "anthropic-token"}, "backendCASecrets": []string{"api-provider-ca"},
		}
		return v
	}()},
}

// praxisConfig.source operator: the generated ConfigMap is the gateway's
// /etc/praxis folder (never a subPath), credential Secrets sit at the
// generated table's <mount>/<namespace>/<name> and CA bundles where tls
// endpoints read them; with config.existingConfigMap as well the chart
// refuses to pick one.
func TestGatewayChartMountsTheGeneratedConfig(t *testing.T) {
	c := gatewayCases[len(gatewayCases)-1]
	d := deploymentOf(t, render(t, gatewayChart, c))
	pod := d.Spec.Template.Spec
	mounts := map[string]corev1.VolumeMount{}
	for _, ctr := range pod.Containers {
		if ctr.Name == "praxis" {
			for _, m := range ctr.VolumeMounts {
				mounts[m.Name] = m
			}
		}
	}
	volumes := map[string]corev1.Volume{}
	for _, v := range pod.Volumes {
		volumes[v.Name] = v
	}
	config := mounts["config"]
	assert.Equal(t, "/etc/praxis", config.MountPath)
	assert.Empty(t, config.SubPath)
	require.NotNil(t, volumes["config"].ConfigMap)
	assert.Equal(t, "edge-praxis", volumes["config"].ConfigMap.Name)
	assert.Equal(t, []corev1.KeyToPath{{Key: "praxis.yaml", Path: "praxis.yaml"}}, volumes["config"].ConfigMap.Items)
	assert.Equal(t, "/run/secrets/grid-credentials/gw-generated/openai-token", mounts["grid-credential-0"].MountPath)
	assert.Equal(t, "anthropic-token", volumes["grid-credential-1"].Secret.SecretName)
	assert.Equal(t, "/run/secrets/grid-backend-ca/api-provider-ca", mounts["grid-backend-ca-0"].MountPath)
	for _, m := range mounts {
		assert.True(t, m.ReadOnly, m.Name)
	}

	both := map[string]any{"praxisConfig": map[string]any{"source": "operator"}, "config": map[string]any{"existingConfigMap": "hand-written"}}
	_, err := runHelm(t, both, "template", "x", chartDir(gatewayChart), "--kube-version", kubeVersion)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "set one")
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
				if ctr.Name == "praxis" {
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
					if ctr.Name == "overlay-sync" {
						want = append(want, "overlay-report-token") // the sidecar reports; the init container does not
					}
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
		"a typo at the top level":     {"typoField": true},
		"a typo in an upstream key":   {"service": map[string]any{"prot": 8080}},
		"an invalid digest":           {"image": map[string]any{"digest": "invalid"}},
		"an unknown config source":    {"praxisConfig": map[string]any{"source": "operatr"}},
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

// upstreamCase loads a values file written in the shape of the upstream
// chart's CI and example values.
func upstreamCase(t *testing.T, name string) valueCase {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", "upstream-values", name+".yaml"))
	require.NoError(t, err)
	values := map[string]any{}
	require.NoError(t, sigsyaml.Unmarshal(data, &values))
	return valueCase{name: "upstream-" + name, release: "grid", namespace: "gw-upstream-" + name, values: values}
}

func containerNamed(t *testing.T, pod corev1.PodSpec, name string) corev1.Container {
	t.Helper()
	for _, c := range append(append([]corev1.Container{}, pod.InitContainers...), pod.Containers...) {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("no container %s", name)
	return corev1.Container{}
}

func volumeNamed(t *testing.T, pod corev1.PodSpec, name string) corev1.Volume {
	t.Helper()
	for _, v := range pod.Volumes {
		if v.Name == name {
			return v
		}
	}
	t.Fatalf("no volume %s", name)
	return corev1.Volume{}
}

func mountOf(c corev1.Container, volume string) *corev1.VolumeMount {
	for _, m := range c.VolumeMounts {
		if m.Name == volume {
			return &m
		}
	}
	return nil
}

// Values written for the upstream chart render, lint, apply, and every key
// takes effect as it does there.
func TestGatewayChartTakesTheUpstreamChartsValues(t *testing.T) {
	c := adminClient(t)
	for _, name := range []string{"provider-gateway", "consumer-gateway", "upstream-sidecar", "hardened"} {
		t.Run(name, func(t *testing.T) {
			vc := upstreamCase(t, name)
			lint(t, gatewayChart, vc)
			rendered := render(t, gatewayChart, vc)
			checkGolden(t, gatewayChart, vc.name, rendered)
			applyRendered(t, c, vc, rendered)
		})
	}

	t.Run("provider-gateway", func(t *testing.T) {
		rendered := render(t, gatewayChart, upstreamCase(t, "provider-gateway"))
		pod := deploymentOf(t, rendered).Spec.Template.Spec
		praxis := containerNamed(t, pod, "praxis")
		assert.Equal(t, "ghcr.io/praxis-proxy/grid-ai-rollup:v0.1.3", praxis.Image)
		assert.Equal(t, []string{"--config", "/etc/praxis/praxis.yaml"}, praxis.Args)
		require.Len(t, praxis.Ports, 1)
		assert.Equal(t, corev1.ContainerPort{Name: "https", ContainerPort: 8443, Protocol: corev1.ProtocolTCP}, praxis.Ports[0])
		assert.Equal(t, "provider-tls", volumeNamed(t, pod, "tls").Secret.SecretName)
		assert.Equal(t, "/etc/praxis/tls", mountOf(praxis, "tls").MountPath)
		secondary := volumeNamed(t, pod, "credential-secondary-credential").Secret
		assert.Equal(t, "secondary-credential", secondary.SecretName)
		require.NotNil(t, secondary.Optional)
		assert.True(t, *secondary.Optional)
		assert.Equal(t, "/etc/praxis/credentials/inference", mountOf(praxis, "credential-inference-credential").MountPath)
		assert.Equal(t, "/etc/praxis", mountOf(praxis, "config").MountPath)
		assert.Equal(t, "praxis.yaml", volumeNamed(t, pod, "config").ConfigMap.Items[0].Path)
		assert.NotNil(t, praxis.ReadinessProbe)
		assert.NotNil(t, praxis.LivenessProbe)
		svc := ofKind(objects(t, rendered), "Service")
		require.Len(t, svc, 1)
		ports, _, _ := unstructured.NestedSlice(svc[0].Object, "spec", "ports")
		assert.EqualValues(t, 8443, ports[0].(map[string]any)["port"])
		assert.Equal(t, "https", ports[0].(map[string]any)["targetPort"])
	})

	t.Run("consumer-gateway", func(t *testing.T) {
		rendered := render(t, gatewayChart, upstreamCase(t, "consumer-gateway"))
		pod := deploymentOf(t, rendered).Spec.Template.Spec
		praxis := containerNamed(t, pod, "praxis")
		overlay := volumeNamed(t, pod, "routing-overlay").ConfigMap
		assert.Equal(t, "grid-overlay-production-consumer-gateway", overlay.Name)
		assert.Len(t, overlay.Items, 2, "the upstream default items")
		m := mountOf(praxis, "routing-overlay")
		assert.Equal(t, "/etc/praxis/routing", m.MountPath, "where Praxis configs read the overlay")
		assert.Empty(t, m.SubPath)
		svc := ofKind(objects(t, rendered), "Service")[0]
		ip, _, _ := unstructured.NestedString(svc.Object, "spec", "loadBalancerIP")
		assert.Equal(t, "192.0.2.10", ip)
	})

	t.Run("upstream-sidecar", func(t *testing.T) {
		rendered := render(t, gatewayChart, upstreamCase(t, "upstream-sidecar"))
		d := deploymentOf(t, rendered)
		pod := d.Spec.Template.Spec
		assert.Equal(t, "ghcr.io/gridsync/gridsync-sidecar:0.1.0", containerNamed(t, pod, "overlay-sync").Image, "an empty tag takes gridsync's release")
		labels := d.Spec.Template.Labels
		assert.Equal(t, "edge-gateway", labels["app.kubernetes.io/name"], "the selector label wins over podLabels")
		assert.Equal(t, "edge", labels["tier"])
		assert.Equal(t, "inference", labels["team"], "commonLabels")
		assert.NotContains(t, labels, "helm.sh/chart", "no chart version in the pod template")
		assert.NotContains(t, labels, "app.kubernetes.io/version")
		for _, o := range objects(t, rendered) {
			assert.Equal(t, "inference", o.GetLabels()["team"], "commonLabels on %s %s", o.GetKind(), o.GetName())
		}
		assert.Equal(t, "true", d.Spec.Template.Annotations["example.com/scrape"])
	})

	t.Run("hardened", func(t *testing.T) {
		rendered := render(t, gatewayChart, upstreamCase(t, "hardened"))
		pod := deploymentOf(t, rendered).Spec.Template.Spec
		praxis := containerNamed(t, pod, "praxis")
		assert.Equal(t, "registry.example.com/praxis@sha256:0000000000000000000000000000000000000000000000000000000000000000", praxis.Image)
		assert.Nil(t, praxis.ReadinessProbe, "null disables")
		assert.Nil(t, praxis.LivenessProbe)
		assert.Equal(t, []string{"--config", "/etc/praxis/praxis.yaml", "--log-format=json"}, praxis.Args)
		require.NotNil(t, pod.SecurityContext.RunAsUser)
		assert.Equal(t, int64(1000680000), *pod.SecurityContext.RunAsUser)
		assert.True(t, *pod.SecurityContext.RunAsNonRoot)
		assert.Empty(t, ofKind(objects(t, rendered), "Service"), "service.enabled false")
		for _, p := range ofKind(objects(t, rendered), "Pod") {
			t.Errorf("a helm test pod without a Service to test: %s", p.GetName())
		}
	})

	t.Run("no user forced by default", func(t *testing.T) {
		pod := deploymentOf(t, render(t, gatewayChart, gatewayCases[5])).Spec.Template.Spec
		assert.Nil(t, pod.SecurityContext.RunAsUser)
		assert.Nil(t, pod.SecurityContext.FSGroup)
	})
}

// The upstream chart's helm test is kept: the Service accepts connections.
func TestGatewayChartKeepsTheUpstreamConnectivityTest(t *testing.T) {
	var found bool
	for _, o := range ofKind(objects(t, render(t, gatewayChart, upstreamCase(t, "provider-gateway"))), "Pod") {
		if o.GetAnnotations()["helm.sh/hook"] != "test" {
			continue
		}
		var pod corev1.Pod
		require.NoError(t, runtime.DefaultUnstructuredConverter.FromUnstructured(o.UnstructuredContent(), &pod))
		if pod.Spec.Containers[0].Name == "connectivity-check" {
			found = true
			assert.Contains(t, strings.Join(pod.Spec.Containers[0].Command, " "), "nc -z -w5 provider-gateway 8443")
		}
	}
	assert.True(t, found)
}

// With report.to set, the sidecar reports to the agent with a token of
// its own audience (not the API token), and knows its pod's name; the init
// container reports nothing.
func TestGatewayChartWiresTheDeliveryReports(t *testing.T) {
	pod := deploymentOf(t, render(t, gatewayChart, gatewayCases[4])).Spec.Template.Spec
	var sidecar *corev1.Container
	for i, c := range pod.Containers {
		if c.Name == "overlay-sync" {
			sidecar = &pod.Containers[i]
		}
	}
	require.NotNil(t, sidecar)
	assert.Contains(t, sidecar.Args, "--report-to=https://sig-gridsync-agent-signals.sig-system.svc:9443")
	assert.Contains(t, sidecar.Args, "--report-server-name=site-s.grid.internal")
	assert.Contains(t, sidecar.Args, "--report-token-file=/var/run/secrets/gridsync/report/token")
	var podName bool
	for _, e := range sidecar.Env {
		podName = podName || e.Name == "POD_NAME" && e.ValueFrom != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.name"
	}
	assert.True(t, podName)
	var token *corev1.Volume
	for i, v := range pod.Volumes {
		if v.Name == "overlay-report-token" {
			token = &pod.Volumes[i]
		}
	}
	require.NotNil(t, token)
	require.Len(t, token.Projected.Sources, 1)
	assert.Equal(t, "gridsync-agent", token.Projected.Sources[0].ServiceAccountToken.Audience)
	for _, c := range pod.InitContainers {
		for _, a := range c.Args {
			assert.NotContains(t, a, "--report-to", "the init container only gates the start")
		}
	}
	for _, c := range pod.Containers {
		if c.Name == "praxis" {
			for _, m := range c.VolumeMounts {
				assert.NotEqual(t, "overlay-report-token", m.Name, "the gateway gets no token")
			}
		}
	}
}

// mountReconciliationValues delegate a generated-config gateway's mounts:
// three credential Secrets mounted by the chart, two of them handed over,
// the Grid identity projected and the listener's own TLS.
func mountReconciliationValues(release bool) map[string]any {
	v := sidecarValues(nil)
	v["praxisConfig"] = map[string]any{"source": "operator", "credentialSecrets": []string{"openai-token", "anthropic-token"}, "backendCASecrets": []string{"api-provider-ca"}}
	v["credentials"] = []map[string]any{{"name": "legacy-token", "mountPath": "/etc/praxis-credentials/legacy"}}
	v["tls"] = map[string]any{"enabled": true, "existingSecret": "listener-tls", "mountPath": "/etc/praxis-listener/tls"}
	v["gridIdentity"] = map[string]any{"tlsSecretName": "edge-site", "caSecretName": "grid-ca"}
	v["mountReconciliation"] = map[string]any{"enabled": true, "network": "glb-demo", "gatewayRef": "edge-gateway",
		"operator":               map[string]any{"namespace": "grid-system"},
		"managedCredentialNames": []string{"openai-token", "legacy-token"}, "releaseHelmMounts": release}
	return v
}

// A gateway that delegates its mounts opts in on its Deployment (the
// annotations the agent checks) and grants the agent get and patch on that
// Deployment alone. While preparing it keeps every mount; released, it
// drops exactly the handed-over credentials' volumes and mounts and the
// Grid identity's projection at /etc/praxis/tls (the reference's old TLS
// projection), and keeps the listener's TLS. It refuses to render without
// the generated config, the network and gateway it opts in for, or the
// agent's namespace; rbac.create false leaves the grant to an
// administrator.
func TestGatewayChartDelegatesMountsInTwoPhases(t *testing.T) {
	vc := valueCase{name: "mount-reconciliation-preparing", release: "praxis", namespace: "gw-mounts", values: mountReconciliationValues(false)}
	rendered := render(t, gatewayChart, vc)
	d := deploymentOf(t, rendered)
	assert.Equal(t, map[string]string{
		"grid.praxis.fast/mount-reconciliation":             "true",
		"grid.praxis.fast/mount-reconciliation-network":     "glb-demo",
		"grid.praxis.fast/mount-reconciliation-gateway-ref": "edge-gateway",
	}, d.Annotations)
	var rules []rbacv1.PolicyRule
	for _, r := range ofKind(objects(t, rendered), "Role") {
		if r.GetName() == "praxis-praxis-gateway-mount-reconciliation" {
			rules = rulesOf(t, r)
		}
	}
	assert.Equal(t, rbac.GatewayDeploymentRules("praxis-praxis-gateway"), rules)
	bound := mountReconciliationValues(false)
	bound["mountReconciliation"].(map[string]any)["networkUID"] = "0f6a3c1e-5b7d-4e2a-9c11-2f1d8b6e4a90"
	assert.Equal(t, "0f6a3c1e-5b7d-4e2a-9c11-2f1d8b6e4a90",
		deploymentOf(t, render(t, gatewayChart, valueCase{name: "mount-reconciliation-bound", release: "praxis", namespace: "gw-mounts", values: bound})).
			Annotations["grid.praxis.fast/mount-reconciliation-network-uid"], "the opt-in bound to the network's UID when the operator gives it")
	applyRendered(t, adminClient(t), vc, rendered)
	assertAccess(t, "system:serviceaccount:grid-system:gridsync-agent", []access{
		{true, authorizationv1.ResourceAttributes{Verb: "get", Group: "apps", Namespace: vc.namespace, Resource: "deployments", Name: "praxis-praxis-gateway"}},
		{true, authorizationv1.ResourceAttributes{Verb: "patch", Group: "apps", Namespace: vc.namespace, Resource: "deployments", Name: "praxis-praxis-gateway"}},
		{false, authorizationv1.ResourceAttributes{Verb: "get", Group: "apps", Namespace: vc.namespace, Resource: "deployments", Name: "another"}},
		{false, authorizationv1.ResourceAttributes{Verb: "list", Group: "apps", Namespace: vc.namespace, Resource: "deployments"}},
	})

	volumes := func(d *appsv1.Deployment) []string {
		var out []string
		for _, v := range d.Spec.Template.Spec.Volumes {
			out = append(out, v.Name)
		}
		return out
	}
	mountsOf := func(d *appsv1.Deployment) []string {
		var out []string
		for _, m := range d.Spec.Template.Spec.Containers[0].VolumeMounts {
			out = append(out, m.Name)
		}
		return out
	}
	preparing := []string{"credential-legacy-token", "grid-credential-0", "grid-credential-1", "grid-backend-ca-0", "tls", "grid-tls"}
	assert.Subset(t, volumes(d), preparing)
	assert.Subset(t, mountsOf(d), preparing)
	for _, m := range d.Spec.Template.Spec.Containers[0].VolumeMounts {
		if m.Name == "grid-tls" {
			assert.Equal(t, "/etc/praxis/tls", m.MountPath, "the folder the generated config's mutual_tls reads")
		}
	}
	for _, vol := range d.Spec.Template.Spec.Volumes {
		if vol.Name == "grid-tls" {
			require.NotNil(t, vol.Projected)
			require.Len(t, vol.Projected.Sources, 2)
			assert.Equal(t, "edge-site", vol.Projected.Sources[0].Secret.Name)
			assert.Equal(t, []corev1.KeyToPath{{Key: "tls.crt", Path: "tls.crt"}, {Key: "tls.key", Path: "tls.key"}}, vol.Projected.Sources[0].Secret.Items)
			assert.Equal(t, "grid-ca", vol.Projected.Sources[1].Secret.Name)
			assert.Equal(t, []corev1.KeyToPath{{Key: "ca.crt", Path: "ca.crt"}}, vol.Projected.Sources[1].Secret.Items)
		}
	}
	released := deploymentOf(t, render(t, gatewayChart, valueCase{name: "mount-reconciliation-released", release: "praxis", namespace: "gw-mounts", values: mountReconciliationValues(true)}))
	for _, gone := range []string{"credential-legacy-token", "grid-credential-0", "grid-tls"} {
		assert.NotContains(t, volumes(released), gone)
		assert.NotContains(t, mountsOf(released), gone)
	}
	assert.Equal(t, len(volumes(d))-3, len(volumes(released)), "only the handed-over volumes go")
	assert.Equal(t, len(mountsOf(d))-3, len(mountsOf(released)), "only the handed-over mounts go")
	assert.Subset(t, mountsOf(released), []string{"config", "grid-credential-1", "grid-backend-ca-0", "tls"}, "the listener's TLS stays the chart's")
	// Without delegation the identity stays, whatever releaseHelmMounts says.
	undelegated := mountReconciliationValues(true)
	undelegated["mountReconciliation"].(map[string]any)["enabled"] = false
	assert.Contains(t, mountsOf(deploymentOf(t, render(t, gatewayChart, valueCase{name: "grid-identity-undelegated", release: "praxis", namespace: "gw-mounts", values: undelegated}))), "grid-tls")

	for name, c := range map[string]struct {
		mutate func(map[string]any)
		want   string
	}{
		"not the generated config": {func(v map[string]any) { delete(v, "praxisConfig") }, "needs praxisConfig.source operator"},
		"no network": {func(v map[string]any) {
			v["mountReconciliation"].(map[string]any)["network"] = ""
		}, "mountReconciliation.network and mountReconciliation.gatewayRef are required"},
		"no agent namespace": {func(v map[string]any) {
			v["mountReconciliation"].(map[string]any)["operator"] = map[string]any{}
		}, "agent's namespace is required"},
		"a Grid identity without its CA": {func(v map[string]any) {
			v["gridIdentity"] = map[string]any{"tlsSecretName": "edge-site"}
		}, "gridIdentity needs both tlsSecretName"},
		"the listener's TLS where the Grid identity goes": {func(v map[string]any) {
			v["tls"] = map[string]any{"enabled": true, "existingSecret": "listener-tls"}
		}, "tls.mountPath /etc/praxis/tls is where gridIdentity is projected"},
	} {
		v := mountReconciliationValues(false)
		c.mutate(v)
		_, err := runHelm(t, v, "template", "x", chartDir(gatewayChart), "--kube-version", kubeVersion)
		require.Error(t, err, name)
		assert.Contains(t, err.Error(), c.want, name)
	}
	v := mountReconciliationValues(false)
	v["mountReconciliation"].(map[string]any)["rbac"] = map[string]any{"create": false}
	v["mountReconciliation"].(map[string]any)["operator"] = map[string]any{}
	for _, r := range ofKind(objects(t, render(t, gatewayChart, valueCase{name: "mount-reconciliation-no-rbac", release: "praxis", namespace: "gw-mounts", values: v})), "Role") {
		assert.NotContains(t, r.GetName(), "mount-reconciliation", "the administrator grants it")
	}
}

// A gateway that opts in to being rolled on a renewed site certificate
// grants the gridsync agent get and patch on its own Deployment, by name,
// and nothing else; without the agent's namespace the chart refuses to
// render.
func TestGatewayChartGrantsTheAgentItsDeploymentOnlyWhenItOptsIn(t *testing.T) {
	vc := valueCase{name: "identity-rollout", release: "praxis", namespace: "gw-rollout", values: map[string]any{
		"overlay": map[string]any{"identityRollout": map[string]any{"enabled": true, "agent": map[string]any{"namespace": "grid-system"}}}}}
	rendered := render(t, gatewayChart, vc)
	roles := ofKind(objects(t, rendered), "Role")
	var rules []rbacv1.PolicyRule
	for _, r := range roles {
		if r.GetName() == "praxis-praxis-gateway-identity-rollout" {
			rules = rulesOf(t, r)
		}
	}
	assert.Equal(t, rbac.GatewayDeploymentRules("praxis-praxis-gateway"), rules)
	applyRendered(t, adminClient(t), vc, rendered)
	user := "system:serviceaccount:grid-system:gridsync-agent"
	assertAccess(t, user, []access{
		{true, authorizationv1.ResourceAttributes{Verb: "get", Group: "apps", Namespace: vc.namespace, Resource: "deployments", Name: "praxis-praxis-gateway"}},
		{true, authorizationv1.ResourceAttributes{Verb: "patch", Group: "apps", Namespace: vc.namespace, Resource: "deployments", Name: "praxis-praxis-gateway"}},
		{false, authorizationv1.ResourceAttributes{Verb: "update", Group: "apps", Namespace: vc.namespace, Resource: "deployments", Name: "praxis-praxis-gateway"}},
		{false, authorizationv1.ResourceAttributes{Verb: "get", Group: "apps", Namespace: vc.namespace, Resource: "deployments", Name: "another"}},
		{false, authorizationv1.ResourceAttributes{Verb: "list", Group: "apps", Namespace: vc.namespace, Resource: "deployments"}},
		{false, authorizationv1.ResourceAttributes{Verb: "patch", Group: "apps", Namespace: "elsewhere", Resource: "deployments", Name: "praxis-praxis-gateway"}},
	})
	for _, r := range ofKind(objects(t, render(t, gatewayChart, gatewayCases[1])), "Role") {
		assert.NotContains(t, r.GetName(), "identity-rollout", "no grant unless the gateway opts in")
	}
	_, err := runHelm(t, map[string]any{"overlay": map[string]any{"identityRollout": map[string]any{"enabled": true}}},
		"template", "x", chartDir(gatewayChart), "--kube-version", kubeVersion)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "agent's namespace is required")
}

// Past the default 1 MiB bound the sync containers' default memory limit
// grows with it (a sidecar holds an envelope about three times over while
// it takes a new one); a limit set by the user is kept; the bound and the
// form asked for reach the flags.
func TestGatewayChartSizesTheSyncContainersForTheirEnvelopeBound(t *testing.T) {
	limits := func(values map[string]any) (map[string]string, []string) {
		d := deploymentOf(t, render(t, gatewayChart, valueCase{name: "bound", release: "praxis", namespace: "gw-bound", values: values}))
		got := map[string]string{}
		var args []string
		for _, ctr := range append(append([]corev1.Container{}, d.Spec.Template.Spec.InitContainers...), d.Spec.Template.Spec.Containers...) {
			if ctr.Name == "praxis" {
				continue
			}
			got[ctr.Name] = ctr.Resources.Limits.Memory().String()
			args = append(args, ctr.Args...)
		}
		return got, args
	}
	got, args := limits(sidecarValues(nil))
	assert.Equal(t, map[string]string{"overlay-sync": "32Mi", "overlay-init": "32Mi"}, got)
	assert.Contains(t, args, "--max-bytes=1048576")
	assert.Contains(t, args, "--overlay-encoding=auto")

	got, args = limits(sidecarValues(map[string]any{"maxBytes": 4 << 20, "encoding": "zstd"}))
	assert.Equal(t, map[string]string{"overlay-sync": "44Mi", "overlay-init": "44Mi"}, got)
	assert.Contains(t, args, "--max-bytes=4194304")
	assert.Contains(t, args, "--overlay-encoding=zstd")

	got, _ = limits(sidecarValues(map[string]any{"maxBytes": 4 << 20, "resources": map[string]any{"limits": map[string]any{"memory": "100Mi"}}}))
	assert.Equal(t, map[string]string{"overlay-sync": "100Mi", "overlay-init": "100Mi"}, got, "a limit set by the user is kept")
}
