package charts

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
)

// pinned is an image digest as a release fills it in.
var pinned = "sha256:" + strings.Repeat("ab", 32)

// Each chart runs gridsync's images pinned by an immutable digest when one
// is given (the tag is then ignored), and by tag otherwise; a digest that
// is not sha256:<64 hex> is refused by the schema.
func TestChartsPinGridsyncImagesByDigest(t *testing.T) {
	agent := func(values map[string]any) string {
		d := deploymentOf(t, render(t, agentChart, valueCase{name: "digest", release: "gs", namespace: "grid-system", values: values}))
		return containerNamed(t, d.Spec.Template.Spec, "agent").Image
	}
	assert.Equal(t, "ghcr.io/gridsync/gridsync-agent@"+pinned, agent(map[string]any{"image": map[string]any{"digest": pinned, "tag": "v9"}}))
	assert.Equal(t, "ghcr.io/gridsync/gridsync-agent:v9", agent(map[string]any{"image": map[string]any{"tag": "v9"}}))

	sync := func(digest string) []string {
		values := sidecarValues(map[string]any{"image": map[string]any{"digest": digest}})
		d := deploymentOf(t, render(t, gatewayChart, valueCase{name: "digest", release: "praxis", namespace: "gw", values: values}))
		var images []string
		for _, c := range append(append([]corev1.Container{}, d.Spec.Template.Spec.InitContainers...), d.Spec.Template.Spec.Containers...) {
			if c.Name != "praxis" {
				images = append(images, c.Image)
			}
		}
		require.NotEmpty(t, images)
		return images
	}
	for _, image := range sync(pinned) {
		assert.Equal(t, "ghcr.io/gridsync/gridsync-sidecar@"+pinned, image, "the sidecar and the init container")
	}
	for _, image := range sync("") {
		assert.True(t, strings.HasPrefix(image, "ghcr.io/gridsync/gridsync-sidecar:"), image)
	}

	for chart, values := range map[string]map[string]any{
		agentChart:   {"image": map[string]any{"digest": "sha256:short"}},
		gatewayChart: sidecarValues(map[string]any{"image": map[string]any{"digest": "latest"}}),
	} {
		_, err := runHelm(t, values, "template", "x", chartDir(chart), "--kube-version", kubeVersion)
		require.Error(t, err, chart)
		assert.Contains(t, err.Error(), "schema")
	}
}
