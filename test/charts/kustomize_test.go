package charts

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	authorizationv1 "k8s.io/api/authorization/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/gridsync/gridsync/test/testnode"
)

// kustomizeDir is the folder of the agent's kustomize base and flavours.
var kustomizeDir = filepath.Join("..", "..", "deploy", "kustomize")

// kustomizeBuild builds a platform's kustomization with the pinned
// kustomize.
func kustomizeBuild(t *testing.T, kustomization string) string {
	t.Helper()
	out, err := testnode.KustomizeBuild(t.Context(), kustomizeDir, kustomization)
	require.NoError(t, err)
	return string(out)
}

// platform is a platform's kustomization of the base or a flavour: its own
// namespace, its own image and its site's name.
const platform = `apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
namespace: NAMESPACE
resources:
  - DEPLOY/FLAVOUR
images:
  - name: ghcr.io/gridsync/gridsync-agent
    newName: registry.platform.example/grid/agent
    newTag: v9.9.9
patches:
  - target: {kind: Deployment, name: gridsync-agent}
    patch: |-
      - op: replace
        path: /spec/template/spec/containers/0/env/2/value
        value: east
`

// The platform base and its OpenShift flavour, vendored as a platform
// does (its namespace, its image, its site name set in its own
// kustomization), build with the pinned kustomize and are taken by the API
// server. Nothing of the base's namespace is left in them, the agent's
// bindings name its ServiceAccount in the platform's namespace, the image
// is the platform's, the metrics are served over TLS on their own port
// (from the site identity in the base, from the service CA's Secret in the
// OpenShift flavour, which annotates the Service for it and adds the
// NetworkPolicy), and the SWIM and signals Services are LoadBalancers.
func TestKustomizeBaseAndFlavoursApplyInAPlatformsNamespace(t *testing.T) {
	for _, c := range []struct {
		flavour, namespace, metricsSecret string
	}{
		{"gridsync-agent", "platform-base", "grid-site-cert"},
		{"overlays/openshift", "platform-openshift", "gridsync-agent-metrics-tls"},
	} {
		k := strings.NewReplacer("NAMESPACE", c.namespace, "FLAVOUR", c.flavour).Replace(platform)
		built := kustomizeBuild(t, k)
		assert.NotContains(t, built, "gridsync-system", "%s: the platform's namespace everywhere", c.flavour)
		assert.NotContains(t, built, "helm.sh/chart", "kustomize, not Helm, manages these")
		objs := objects(t, built)
		for _, o := range objs {
			if o.GetKind() == "Namespace" {
				t.Errorf("%s: the platform base has no Namespace, got %s", c.flavour, o.GetName())
			}
		}
		require.Len(t, ofKind(objs, "Deployment"), 1)
		d := deploymentOf(t, built)
		agent := d.Spec.Template.Spec.Containers[0]
		assert.Equal(t, "registry.platform.example/grid/agent:v9.9.9", agent.Image, "%s: the image override", c.flavour)
		assert.Contains(t, agent.Args, "--metrics-tls=/etc/gridsync/metrics-tls")
		siteName := ""
		for _, e := range agent.Env {
			if e.Name == "GRID_SWIM_SITE_NAME" {
				siteName = e.Value
			}
		}
		assert.Equal(t, "east", siteName, "%s: the site's name from the platform's patch", c.flavour)
		var metricsSecret string
		for _, v := range d.Spec.Template.Spec.Volumes {
			if v.Name == "metrics-tls" {
				metricsSecret = v.Secret.SecretName
			}
		}
		assert.Equal(t, c.metricsSecret, metricsSecret, c.flavour)
		services := map[string]*unstructured.Unstructured{}
		for _, s := range ofKind(objs, "Service") {
			services[s.GetName()] = s
		}
		for _, lb := range []string{"gridsync-agent-swim", "gridsync-agent-signals"} {
			require.Contains(t, services, lb)
			typ, _, _ := unstructured.NestedString(services[lb].Object, "spec", "type")
			assert.Equal(t, "LoadBalancer", typ, "%s: %s", c.flavour, lb)
		}
		require.Contains(t, services, "gridsync-agent")
		serving := services["gridsync-agent"].GetAnnotations()["service.beta.openshift.io/serving-cert-secret-name"]
		policies := ofKind(objs, "NetworkPolicy")
		if c.flavour == "overlays/openshift" {
			assert.Equal(t, c.metricsSecret, serving, "the service CA writes the Secret the agent serves with")
			assert.Len(t, policies, 1)
		} else {
			assert.Empty(t, serving)
			assert.Empty(t, policies)
		}

		applyRendered(t, adminClient(t), valueCase{namespace: c.namespace}, built)
		sa := "system:serviceaccount:" + c.namespace + ":gridsync-agent"
		assertAccess(t, sa, []access{
			{true, authorizationv1.ResourceAttributes{Verb: "list", Group: "grid.praxis.fast", Resource: "gridnetworks"}},
			{true, authorizationv1.ResourceAttributes{Verb: "create", Namespace: c.namespace, Group: "coordination.k8s.io", Resource: "leases"}},
			{true, authorizationv1.ResourceAttributes{Verb: "patch", Namespace: c.namespace, Resource: "secrets", Name: "grid-site-cert"}},
			{false, authorizationv1.ResourceAttributes{Verb: "get", Namespace: "default", Resource: "secrets"}},
		})
	}
}
