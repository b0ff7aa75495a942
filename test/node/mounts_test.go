package node

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gridsync/gridsync/api/v1alpha1"
	"github.com/gridsync/gridsync/controller/mounts"
	"github.com/gridsync/gridsync/controller/praxisconfig"
	"github.com/gridsync/gridsync/test/testnode"
)

// Delegated mounts on the node: three replicas of the real chart,
// installed and upgraded by Helm, rolled by the agent (its own RBAC plus
// the chart's grant). Each change is one rollout: the bootstrap config
// replaced, a credential reference added (every new pod has the Secret's
// file at the generated path), the Secret rotated (the new pods read the
// new value), the reference removed (its mount stays, optional, until the
// pods without it are ready, then it is pruned). No pod's config ever
// changes under it: each pod reads the config its template names. Then the
// chart's hand-over upgrade removes Helm's old credential mount and keeps
// the agent's fields, and a minute idle makes no patch.
func TestDelegatedMountsRollTheGatewayOncePerChange(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	ns := namespace(t, "mounts")
	admin := cp.AdminClient()
	secret := func(name, token string) {
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Data: map[string][]byte{"token": []byte(token)}}
		_, err := admin.CoreV1().Secrets(ns).Create(ctx, s, metav1.CreateOptions{})
		require.NoError(t, err)
	}
	secret("legacy-token", "legacy")
	secret("token-a", "a-1")
	handOver := map[string]any{
		"credentials":         []map[string]any{{"name": "legacy-token", "mountPath": "/etc/praxis-legacy/legacy-token"}},
		"mountReconciliation": map[string]any{"managedCredentialNames": []string{"legacy-token"}, "releaseHelmMounts": false},
	}
	d, err := testnode.Delegate(ctx, cp, ns, 3, 2*time.Second, handOver)
	require.NoError(t, err)
	t.Cleanup(func() {
		if t.Failed() {
			t.Log(d.Logs())
		}
		_ = d.Stop()
	})
	sampler := sampleConfigs(t, ns)
	provider, err := d.Provider(ctx)
	require.NoError(t, err)

	// roll waits for a change to reach Ready and says how many template
	// patches (Deployment generations) and agent patches it took.
	roll := func(what string, change func()) (*appsv1.Deployment, v1alpha1.MountReconciliationStatus) {
		t.Helper()
		before, err := d.Deployment(ctx)
		require.NoError(t, err)
		patches := d.Patches()
		change()
		st, after, err := d.WaitReady(ctx, before.Generation, 3*time.Minute)
		require.NoError(t, err, what)
		t.Logf("%s: %d agent patches, generation %d -> %d: %s", what, d.Patches()-patches, before.Generation, after.Generation, st.Message)
		return after, st
	}
	generations := func(from *appsv1.Deployment, to *appsv1.Deployment) int64 { return to.Generation - from.Generation }

	start, err := d.Deployment(ctx)
	require.NoError(t, err)
	dep, st := roll("the bootstrap config replaced", func() {})
	assert.Equal(t, int64(1), generations(start, dep), "one patch")
	assert.Equal(t, mounts.SlotName(praxisconfig.DefaultConfigMapName), st.ConfigMapName)

	credDir := "/run/secrets/grid-credentials/" + ns + "/token-a"
	volume := mounts.VolumeName(credDir)
	prev := dep
	dep, _ = roll("a credential reference added", func() {
		require.NoError(t, d.SetCredential(ctx, provider, "token-a"))
	})
	assert.Equal(t, int64(1), generations(prev, dep), "one patch")
	assert.Equal(t, praxisconfig.DefaultConfigMapName, testnode.ConfigSlot(dep), "the slots alternate")
	assertPodsRead(t, ns, dep, volume, "a-1")

	prev = dep
	dep, _ = roll("the Secret rotated", func() {
		s, err := admin.CoreV1().Secrets(ns).Get(ctx, "token-a", metav1.GetOptions{})
		require.NoError(t, err)
		s.Data["token"] = []byte("a-2")
		_, err = admin.CoreV1().Secrets(ns).Update(ctx, s, metav1.UpdateOptions{})
		require.NoError(t, err)
	})
	assert.Equal(t, int64(1), generations(prev, dep), "one patch")
	assertPodsRead(t, ns, dep, volume, "a-2")

	// The chart's hand-over, while the pods run the agent's slot: Helm
	// drops its old credential mount and keeps what the agent owns (the
	// slot included); the agent does not patch back.
	prev = dep
	require.Equal(t, mounts.SlotName(praxisconfig.DefaultConfigMapName), testnode.ConfigSlot(prev), "the upgrade meets the agent's slot")
	patches := d.Patches()
	require.NoError(t, d.Release.Upgrade(ctx, testnode.Merge(d.Values, map[string]any{"mountReconciliation": map[string]any{"releaseHelmMounts": true}})))
	require.NoError(t, d.WaitRolledOut(ctx, 3*time.Minute))
	dep, err = d.Deployment(ctx)
	require.NoError(t, err)
	assert.Equal(t, int64(1), generations(prev, dep), "Helm's one change")
	assert.False(t, hasVolume(dep, "credential-legacy-token"), "Helm released its mount")
	assert.Equal(t, testnode.ConfigSlot(prev), testnode.ConfigSlot(dep), "the slot the agent chose is kept")
	for _, k := range []string{mounts.AnnotationConfigRevision, mounts.AnnotationSecretsRevision} {
		assert.Equal(t, prev.Spec.Template.Annotations[k], dep.Spec.Template.Annotations[k], k)
	}
	_, err = d.WaitStatus(ctx, time.Minute, func(s v1alpha1.MountReconciliationStatus) bool { return s.Phase == mounts.PhaseReady })
	require.NoError(t, err)
	idle, err := d.Deployment(ctx)
	require.NoError(t, err)
	time.Sleep(time.Minute)
	after, err := d.Deployment(ctx)
	require.NoError(t, err)
	assert.Equal(t, patches, d.Patches(), "no agent patch after Helm's upgrade, nor over a minute idle")
	assert.Equal(t, idle.ResourceVersion, after.ResourceVersion, "nobody wrote the Deployment over the minute")

	// Removed: the switch keeps the projection (optional) for the pods
	// that roll with it; once none older remains it is pruned.
	prev = dep
	watch := watchTemplates(t, ns)
	dep, _ = roll("the credential reference removed", func() {
		require.NoError(t, d.SetCredential(ctx, provider, ""))
	})
	assert.Equal(t, int64(2), generations(prev, dep), "the switch, then the prune")
	assert.False(t, hasVolume(dep, volume), "pruned")
	switched := watch.at(prev.Generation + 1)
	require.NotNil(t, switched, "the switch's template was seen")
	assert.True(t, hasVolume(switched, volume), "the switch kept the mount")
	assert.True(t, watch.completeBefore(prev.Generation+1, prev.Generation+2), "pruned only once the switch's rollout was complete")

	sampler.check()
}

// A gateway that gives no grant: DeploymentForbidden, naming the verb,
// and its Deployment untouched.
func TestDelegatedMountsWithoutTheGrantPatchNothing(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	ns := namespace(t, "mounts-forbidden")
	d, err := testnode.Delegate(ctx, cp, ns, 1, 2*time.Second, map[string]any{"mountReconciliation": map[string]any{"rbac": map[string]any{"create": false}}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = d.Stop() })
	before, err := d.Deployment(ctx)
	require.NoError(t, err)
	_, err = d.Provider(ctx)
	require.NoError(t, err)
	st, err := d.WaitStatus(ctx, time.Minute, func(s v1alpha1.MountReconciliationStatus) bool { return s.Reason == mounts.ReasonDeploymentForbidden })
	require.NoError(t, err)
	assert.Contains(t, st.Message, "get is forbidden")
	time.Sleep(5 * time.Second)
	after, err := d.Deployment(ctx)
	require.NoError(t, err)
	assert.Equal(t, before.ResourceVersion, after.ResourceVersion, "nothing patched")
	assert.Zero(t, d.Patches())
}

func hasVolume(d *appsv1.Deployment, name string) bool {
	for _, v := range d.Spec.Template.Spec.Volumes {
		if v.Name == name {
			return true
		}
	}
	return false
}

// assertPodsRead checks every pod of the Deployment's current template:
// the credential's file, as the kubelet projects it into the pod, holds
// token, and the praxis container mounts it where the config reads it.
func assertPodsRead(t *testing.T, ns string, d *appsv1.Deployment, volume, token string) {
	t.Helper()
	revision := d.Spec.Template.Annotations[mounts.AnnotationConfigRevision]
	n := 0
	for _, p := range pods(t, ns) {
		if p.DeletionTimestamp != nil || p.Annotations[mounts.AnnotationSecretsRevision] != d.Spec.Template.Annotations[mounts.AnnotationSecretsRevision] ||
			p.Annotations[mounts.AnnotationConfigRevision] != revision {
			continue
		}
		n++
		mounted := false
		for _, m := range p.Spec.Containers[0].VolumeMounts {
			mounted = mounted || (m.Name == volume && strings.HasSuffix(m.MountPath, "/token-a"))
		}
		assert.True(t, mounted, "pod %s mounts %s", p.Name, volume)
		assert.Equal(t, token, readFile(node.VolumeFile(&p, "kubernetes.io~projected", volume, "token")), "pod %s", p.Name)
	}
	assert.Equal(t, int(*d.Spec.Replicas), n, "every replica runs the current template")
}

// configSampler reads, every 200 ms while the test runs, the praxis.yaml
// of every running gateway pod as the kubelet projects it, and remembers
// any pod whose file is not the config its template names (a slot
// rewritten under running pods would be).
type configSampler struct {
	t    *testing.T
	mu   sync.Mutex
	bad  []string
	seen int
	stop context.CancelFunc
	done chan struct{}
}

func sampleConfigs(t *testing.T, ns string) *configSampler {
	ctx, cancel := context.WithCancel(context.Background())
	s := &configSampler{t: t, stop: cancel, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		for ctx.Err() == nil {
			list, err := cp.AdminClient().CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
			if err == nil {
				for i := range list.Items {
					s.sample(&list.Items[i])
				}
			}
			select {
			case <-ctx.Done():
			case <-time.After(200 * time.Millisecond):
			}
		}
	}()
	t.Cleanup(func() { cancel(); <-s.done })
	return s
}

func (s *configSampler) sample(p *corev1.Pod) {
	want := p.Annotations[mounts.AnnotationConfigRevision]
	if want == "" || p.Status.Phase != corev1.PodRunning {
		return
	}
	data, err := os.ReadFile(node.VolumeFile(p, "kubernetes.io~configmap", "config", praxisconfig.DataKey))
	if err != nil {
		return // torn down meanwhile
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seen++
	if got := mounts.ConfigRevision(data); got != want {
		s.bad = append(s.bad, fmt.Sprintf("pod %s reads config %s, its template names %s", p.Name, got, want))
	}
}

func (s *configSampler) check() {
	s.stop()
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	assert.NotZero(s.t, s.seen, "pods were sampled")
	assert.Empty(s.t, s.bad, "no pod's config changed under it")
}

// templateWatch records every state of the Deployment seen on a watch.
type templateWatch struct {
	mu     sync.Mutex
	states []appsv1.Deployment
}

func watchTemplates(t *testing.T, ns string) *templateWatch {
	w := &templateWatch{}
	watcher, err := cp.AdminClient().AppsV1().Deployments(ns).Watch(t.Context(), metav1.ListOptions{FieldSelector: "metadata.name=" + testnode.DelegatedDeployment})
	require.NoError(t, err)
	go func() {
		for ev := range watcher.ResultChan() {
			if dep, ok := ev.Object.(*appsv1.Deployment); ok {
				w.mu.Lock()
				w.states = append(w.states, *dep.DeepCopy())
				w.mu.Unlock()
			}
		}
	}()
	t.Cleanup(watcher.Stop)
	return w
}

// at is the first state seen of a generation.
func (w *templateWatch) at(generation int64) *appsv1.Deployment {
	w.mu.Lock()
	defer w.mu.Unlock()
	for i := range w.states {
		if w.states[i].Generation == generation {
			return &w.states[i]
		}
	}
	return nil
}

// completeBefore: the last state seen of generation before next's first
// was a complete rollout of it (every replica updated and available, none
// older).
func (w *templateWatch) completeBefore(generation, next int64) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	var last *appsv1.Deployment
	for i := range w.states {
		if w.states[i].Generation == next {
			break
		}
		if w.states[i].Generation == generation {
			last = &w.states[i]
		}
	}
	return last != nil && testnode.RolledOut(last)
}
