package node

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gridsync/gridsync/api/v1alpha1"
	"github.com/gridsync/gridsync/shared/envelope"
	"github.com/gridsync/gridsync/test/testnode"
)

// The agent chart on the node: two replicas, one leads and publishes.
// Deleting the leader's pod hands the Lease to the other replica within
// the lease duration, and the overlay it took over is not published again.
func TestAgentDeploymentFailsOverWithoutPublishingTwice(t *testing.T) {
	t.Parallel()
	ns := namespace(t, "agent")
	const leaseDuration = 15 * time.Second
	// A release name of its own: the chart's cluster-scoped objects (its
	// ClusterRoles and their bindings) are named after it, and the
	// kustomize base another test of this package applies beside it names
	// its own gridsync-agent; the same name would rebind the one to the
	// other's ServiceAccount.
	const release = "failover-gridsync-agent" // its full name too (it holds the chart's name)
	objs, err := testnode.Render(t.Context(), testnode.Chart("gridsync-agent"), release, ns, nil,
		testnode.Merge(testnode.ImageValues("gridsync-agent"), map[string]any{
			"replicaCount":       2,
			"resourceNamespaces": []string{ns},
			"leaderElection":     map[string]any{"leaseDuration": leaseDuration.String()},
			"logLevel":           "debug",
		}))
	require.NoError(t, err)
	require.NoError(t, testnode.Apply(t.Context(), cp, ns, objs))
	c := gridClient(t)

	var agents []corev1.Pod
	eventually(t, 90*time.Second, "two agent pods Ready", func() bool {
		agents = agents[:0]
		for _, p := range pods(t, ns) {
			if p.DeletionTimestamp == nil && testnode.PodReady(&p) {
				agents = append(agents, p)
			}
		}
		return len(agents) == 2
	})
	leader := func() string {
		lease, err := cp.AdminClient().CoordinationV1().Leases(ns).Get(t.Context(), release, metav1.GetOptions{})
		if err != nil || lease.Spec.HolderIdentity == nil {
			return ""
		}
		return *lease.Spec.HolderIdentity
	}
	eventually(t, 30*time.Second, "one replica leads", func() bool { return leader() != "" })
	first := leader()
	leaders := 0
	for _, p := range agents {
		var st struct {
			Leader bool `json:"leader"`
		}
		require.NoError(t, getJSON(t, p.Status.PodIP, 8081, "/status", &st))
		if st.Leader {
			leaders++
			assert.True(t, strings.HasPrefix(first, p.Name+"_"), "the Lease names the replica that says it leads")
		}
	}
	require.Equal(t, 1, leaders, "exactly one replica leads")

	// A network with one provider: the leader publishes its overlay.
	network := &v1alpha1.GridNetwork{
		ObjectMeta: metav1.ObjectMeta{Name: "node-net-" + ns},
		Spec:       v1alpha1.GridNetworkSpec{ConsumerGateways: []v1alpha1.ConsumerGateway{{Name: "edge", Namespace: ns}}},
	}
	require.NoError(t, c.Create(t.Context(), network))
	provider := &v1alpha1.InferenceProvider{
		ObjectMeta: metav1.ObjectMeta{Name: "node-provider-" + ns},
		Spec: v1alpha1.InferenceProviderSpec{
			GridNetworkRef: network.Name,
			ProviderKind:   "vllm", BackendKind: "openai_compatible", Endpoint: "https://p.example",
			Models: []v1alpha1.Model{{Name: "m"}},
		},
	}
	require.NoError(t, c.Create(t.Context(), provider))
	name := envelope.ConfigMapName(network.Name, "edge")

	// Every write of the overlay ConfigMap, from here on.
	w, err := cp.AdminClient().CoreV1().ConfigMaps(ns).Watch(t.Context(), metav1.ListOptions{FieldSelector: "metadata.name=" + name})
	require.NoError(t, err)
	defer w.Stop()
	writes := make(chan string, 64)
	go func() {
		for ev := range w.ResultChan() {
			if ev.Type == watch.Added || ev.Type == watch.Modified {
				writes <- ev.Object.(*corev1.ConfigMap).ResourceVersion
			}
		}
	}()
	select {
	case <-writes:
	case <-time.After(30 * time.Second):
		t.Fatal("the leader did not publish the overlay")
	}
	// The leader may publish again while the provider's first status
	// settles; the takeover starts once it has been quiet for 3 s.
	for quiet := false; !quiet; {
		select {
		case <-writes:
		case <-time.After(3 * time.Second):
			quiet = true
		}
	}
	published, err := cp.AdminClient().CoreV1().ConfigMaps(ns).Get(t.Context(), name, metav1.GetOptions{})
	require.NoError(t, err)

	// Delete the leader's pod; another replica takes over: the other one,
	// or the pod the Deployment starts in its place, whichever asks first
	// once the leader has released the Lease.
	var leaderPod string
	for _, p := range agents {
		if strings.HasPrefix(first, p.Name+"_") {
			leaderPod = p.Name
		}
	}
	require.NotEmpty(t, leaderPod, "the Lease holder %q is none of the pods", first)
	deleted := time.Now()
	require.NoError(t, cp.AdminClient().CoreV1().Pods(ns).Delete(context.Background(), leaderPod, metav1.DeleteOptions{}))
	eventually(t, leaseDuration+5*time.Second, "another replica takes the Lease", func() bool {
		h := leader()
		return h != "" && !strings.HasPrefix(h, leaderPod+"_")
	})
	took := time.Since(deleted)
	t.Logf("the Lease moved from %s to %s %s after the leader's pod was deleted", leaderPod, leader(), took.Round(time.Millisecond))
	assert.Less(t, took, leaseDuration, "the takeover took longer than the lease duration")

	// The new leader finds the overlay published and does not write it
	// again.
	time.Sleep(5 * time.Second)
	select {
	case rv := <-writes:
		now, err := cp.AdminClient().CoreV1().ConfigMaps(ns).Get(t.Context(), name, metav1.GetOptions{})
		require.NoError(t, err)
		t.Fatalf("the overlay was published again after the takeover (resourceVersion %s, was %s; the same envelope: %v)",
			rv, published.ResourceVersion, now.Data[envelope.DataKeyEnvelope] == published.Data[envelope.DataKeyEnvelope])
	default:
	}

	// It does publish a change.
	require.NoError(t, c.Get(t.Context(), client.ObjectKeyFromObject(provider), provider))
	provider.Spec.Models = append(provider.Spec.Models, v1alpha1.Model{Name: "m2"})
	require.NoError(t, c.Update(t.Context(), provider))
	select {
	case <-writes:
	case <-time.After(30 * time.Second):
		t.Fatal("the new leader did not publish the change")
	}
	select {
	case rv := <-writes:
		t.Fatalf("one change was published twice (resourceVersion %s)", rv)
	case <-time.After(3 * time.Second):
	}
}
