package publish_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gridsync/gridsync/api/v1alpha1"
	"github.com/gridsync/gridsync/hack/release/publish"
	"github.com/gridsync/gridsync/shared/envelope"
	"github.com/gridsync/gridsync/test/controlplane"
	"github.com/gridsync/gridsync/test/framework"
	"github.com/gridsync/gridsync/test/testnode"
)

// shippedUnder is where the release names its images (the Makefile's
// IMAGE_REGISTRY), which the charts pin.
const shippedUnder = "ghcr.io/gridsync"

// What a user does: `make release && make publish` into a registry (signed
// with the releaser's key), `make verify` with the public key, then
// `helm install oci://…` of both charts on a node whose containerd pulls
// the images the charts pin, by digest, from that registry. The registry
// stands for the one the images are named under (ghcr.io): the node's
// containerd has it as its only endpoint for that name, as a cluster's
// registry mirror is configured, and nothing of the release is loaded
// into it beforehand. The agent publishes a network's overlay, the
// sidecar delivers it, and every pod is Ready on the images pulled.
func TestTheReleaseInstallsFromTheRegistryOnANode(t *testing.T) {
	dir := t.TempDir()
	release := filepath.Join(dir, "release")
	runMake(t, "release", "RELEASE_DIR="+release, "BIN_DIR="+filepath.Join(dir, "bin"))
	host, ca, _ := startRegistry(t)
	// Signed with the releaser's key, and verified with the public key
	// before anything runs, as a user's admission would.
	key, pub := newCosign(t, dir).generateKeyPair(t, filepath.Join(dir, "keys"))
	record := filepath.Join(dir, "published.json")
	runMake(t, "publish", "RELEASE_DIR="+release, "BIN_DIR="+filepath.Join(dir, "bin"),
		"REGISTRY="+host, "REGISTRY_CA="+ca, "PUBLISHED="+record, "SIGNING_KEY="+key)
	verified := runMake(t, "verify", "PUBLISHED="+record, "REGISTRY_CA="+ca, "PUBLIC_KEY="+pub)
	assert.Equal(t, 4, strings.Count(verified, "verify: ok"), "both images and both charts:\n%s", verified)
	pushed := map[string]publish.Pushed{} // by its name: gridsync-agent, the chart or the image
	for _, p := range readRecord(t, record) {
		pushed[string(p.Kind)+"/"+filepath.Base(p.Repository)] = p
	}
	agentImage, sidecarImage := pushed[string(publish.Image)+"/gridsync-agent"], pushed[string(publish.Image)+"/gridsync-sidecar"]
	agentChart, gatewayChart := pushed[string(publish.Chart)+"/gridsync-agent"], pushed[string(publish.Chart)+"/praxis-gateway"]
	for _, p := range []publish.Pushed{agentImage, sidecarImage, agentChart, gatewayChart} {
		require.NotEmpty(t, p.Digest, "the release pushed %v", p)
	}

	caPEM, err := os.ReadFile(ca)
	require.NoError(t, err)
	// The node's part bounded from here: the release before it is make's.
	ctx, cancel := context.WithTimeout(t.Context(), 8*time.Minute)
	defer cancel()
	cp, err := controlplane.Start(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, cp.Stop()) })
	node, err := testnode.StartWith(ctx, cp, testnode.Options{Mirrors: []testnode.Mirror{{Registry: strings.SplitN(shippedUnder, "/", 2)[0], Upstream: host, CA: caPEM}}})
	if node != nil {
		t.Cleanup(func() { assert.NoError(t, node.Stop()) })
	}
	require.NoError(t, err)
	held, err := node.Images(ctx)
	require.NoError(t, err)
	for _, ref := range held {
		// The project's images the node loaded are named under
		// gridsync.local, and built for the tests, not by make release.
		assert.False(t, strings.HasPrefix(ref, shippedUnder+"/"), "nothing of the release is loaded: %v", held)
	}

	// helm install from oci://, in a Helm home of the test's own.
	for _, v := range []string{"HELM_CACHE_HOME", "HELM_CONFIG_HOME", "HELM_DATA_HOME"} {
		t.Setenv(v, filepath.Join(dir, "helm", v))
	}
	const ns = "grid-install"
	require.NoError(t, cp.EnsureNamespace(ctx, ns))
	from := func(p publish.Pushed) (string, []string) {
		return "oci://" + p.Repository, []string{"--version", p.Tag, "--ca-file", ca}
	}
	chart, args := from(agentChart)
	began := time.Now()
	r, err := testnode.Install(ctx, cp, chart, "gridsync-agent", ns, map[string]any{"resourceNamespaces": []string{ns}}, args...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = r.Close() })
	scope := envelope.Scope{Network: "installed", Gateway: "edge", LocalSite: "here", Namespace: ns}
	// The gateway is the stand-in loaded on the node (Praxis's own image
	// is not the project's to publish); the sidecar is the chart's.
	gateway := testnode.ReleasedSidecarGatewayValues(scope, nil)
	chart, args = from(gatewayChart)
	r, err = testnode.Install(ctx, cp, chart, scope.Gateway, ns, gateway, args...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = r.Close() })
	t.Cleanup(func() {
		if t.Failed() {
			t.Log(node.DescribePods(context.Background(), ns, ""))
		}
	})

	c, err := framework.AdminClient(cp)
	require.NoError(t, err)
	require.NoError(t, c.Create(ctx, &v1alpha1.GridNetwork{
		ObjectMeta: metav1.ObjectMeta{Name: scope.Network},
		Spec:       v1alpha1.GridNetworkSpec{ConsumerGateways: []v1alpha1.ConsumerGateway{{Name: scope.Gateway, Namespace: ns, SiteName: scope.LocalSite}}},
	}))
	require.NoError(t, c.Create(ctx, &v1alpha1.InferenceProvider{
		ObjectMeta: metav1.ObjectMeta{Name: "installed-provider"},
		Spec: v1alpha1.InferenceProviderSpec{
			GridNetworkRef: scope.Network,
			ProviderKind:   "vllm", BackendKind: "openai_compatible", Endpoint: "https://p.example",
			Models: []v1alpha1.Model{{Name: "m"}},
		},
	}))

	// Every pod Ready, each container on the image its chart pins, pulled
	// by the digest pushed.
	pinned := func(p publish.Pushed) string {
		return shippedUnder + "/" + filepath.Base(p.Repository) + "@" + p.Digest
	}
	want := map[string]string{ // container → the image its chart pins, by the digest pushed
		"agent": pinned(agentImage), "overlay-init": pinned(sidecarImage), "overlay-sync": pinned(sidecarImage),
	}
	var list *corev1.PodList
	ran := func() map[string]bool { // the containers of want the pods have
		seen := map[string]bool{}
		for _, p := range list.Items {
			for _, st := range append(p.Status.InitContainerStatuses, p.Status.ContainerStatuses...) {
				if _, ok := want[st.Name]; ok {
					seen[st.Name] = true
				}
			}
		}
		return seen
	}
	require.Eventually(t, func() bool {
		list, err = cp.AdminClient().CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil || len(ran()) < len(want) {
			return false
		}
		return !slices.ContainsFunc(list.Items, func(p corev1.Pod) bool { return !testnode.PodReady(&p) })
	}, 3*time.Minute, 250*time.Millisecond, "the agent's and the gateway's pods Ready")
	ready := time.Since(began)
	for _, p := range list.Items {
		for _, c := range append(p.Spec.InitContainers, p.Spec.Containers...) {
			if ref, ok := want[c.Name]; ok {
				assert.Equal(t, ref, c.Image, "%s/%s: the chart pins the image pushed", p.Name, c.Name)
			}
		}
		for _, st := range append(p.Status.InitContainerStatuses, p.Status.ContainerStatuses...) {
			if ref, ok := want[st.Name]; ok {
				assert.Equal(t, ref, st.ImageID, "%s/%s runs the image pulled by that digest", p.Name, st.Name)
			}
		}
	}
	seen := ran()
	assert.Len(t, seen, len(want), "every container of the release ran: %v", seen)
	held, err = node.Images(ctx)
	require.NoError(t, err)
	for _, p := range []publish.Pushed{agentImage, sidecarImage} {
		assert.Contains(t, held, pinned(p), "containerd holds what it pulled")
	}
	t.Logf("installed from %s: charts %s:%s and %s:%s, every pod Ready %s after the first helm install, on images pulled by digest (%s, %s); the node: %s",
		host, agentChart.Repository, agentChart.Tag, gatewayChart.Repository, gatewayChart.Tag,
		ready.Round(time.Millisecond), pinned(agentImage), pinned(sidecarImage), node.Steps())
}
