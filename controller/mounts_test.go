package controller_test

import (
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gridsync/gridsync/api/v1alpha1"
	"github.com/gridsync/gridsync/controller"
	"github.com/gridsync/gridsync/controller/mounts"
	"github.com/gridsync/gridsync/controller/praxisconfig"
	"github.com/gridsync/gridsync/controller/rbac"
	"github.com/gridsync/gridsync/shared/envelope"
)

// mountStatus waits until the network's mountReconciliationStatus entry
// for gateway satisfies ok.
func (e *env) mountStatus(network *v1alpha1.GridNetwork, gateway string, ok func(v1alpha1.MountReconciliationStatus) bool) v1alpha1.MountReconciliationStatus {
	e.t.Helper()
	var got v1alpha1.MountReconciliationStatus
	e.networkStatus(network, "mountReconciliationStatus of "+gateway, func(n *v1alpha1.GridNetwork) (bool, string) {
		for _, s := range n.Status.MountReconciliationStatus {
			if s.GatewayName == gateway {
				got = s
				return ok(s), s.Phase + "/" + s.Reason + ": " + s.Message
			}
		}
		return false, "no entry"
	})
	return got
}

// mountPhases records every phase/reason the network's status gives
// gateway, as a watch sees each write (a phase that lasts one write
// between two reconciles is seen too).
func (e *env) mountPhases(network *v1alpha1.GridNetwork, gateway string) func() []string {
	e.t.Helper()
	scheme, err := controller.Scheme()
	require.NoError(e.t, err)
	c, err := client.NewWithWatch(e.cp.AdminConfig(), client.Options{Scheme: scheme})
	require.NoError(e.t, err)
	w, err := c.Watch(e.ctx, &v1alpha1.GridNetworkList{}, client.MatchingFields{"metadata.name": network.Name})
	require.NoError(e.t, err)
	e.t.Cleanup(w.Stop)
	var mu sync.Mutex
	var seen []string
	go func() {
		for ev := range w.ResultChan() {
			n, ok := ev.Object.(*v1alpha1.GridNetwork)
			if !ok {
				continue
			}
			for _, st := range n.Status.MountReconciliationStatus {
				if st.GatewayName != gateway {
					continue
				}
				mu.Lock()
				if p := st.Phase + "/" + st.Reason; len(seen) == 0 || seen[len(seen)-1] != p {
					seen = append(seen, p)
				}
				mu.Unlock()
			}
		}
	}()
	return func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(seen)
	}
}

func phase(p, reason string) func(v1alpha1.MountReconciliationStatus) bool {
	return func(s v1alpha1.MountReconciliationStatus) bool {
		return s.Phase == p && (reason == "" || s.Reason == reason)
	}
}

// gatewayDeployment is the gateway chart's Deployment in the shape the
// agent reads: the config at /etc/praxis from the bootstrap ConfigMap, a
// chart-owned listener TLS mount and a second container.
func gatewayDeployment(namespace, name string) *appsv1.Deployment {
	labels := map[string]string{"app": name}
	return &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		Spec: appsv1.DeploymentSpec{Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels, Annotations: map[string]string{"kept": "yes"}},
				Spec: corev1.PodSpec{
					Containers: []corev1.Container{
						{Name: "praxis", Image: "praxis:test", VolumeMounts: []corev1.VolumeMount{
							{Name: "config", MountPath: "/etc/praxis", ReadOnly: true},
							{Name: "tls", MountPath: "/etc/praxis/listener-tls", ReadOnly: true},
						}},
						{Name: "overlay-sync", Image: "sidecar:test"},
					},
					Volumes: []corev1.Volume{
						{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
							LocalObjectReference: corev1.LocalObjectReference{Name: praxisconfig.DefaultConfigMapName},
							Items:                []corev1.KeyToPath{{Key: "praxis.yaml", Path: "praxis.yaml"}},
						}}},
						{Name: "tls", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "listener-tls"}}},
					},
				}}}}
}

// Delegated mounts on a real API server with the agent's own RBAC, which
// grants no Deployment access: refused (naming the verb) until the gateway
// grants get and patch (a populated overlay held meanwhile, an empty one
// published), refused until the Deployment opts in, waiting
// while a Secret the config reads is missing; then one server-side apply
// of the agent's field manager switches the config to the Grid slot and
// adds the credential's projection, leaving every other field as it was
// (the status says MountsReconciling, then WaitingForRollout).
// Until the config runs, the overlay leaves out the cluster the bootstrap
// config lacks. (No kubelet rolls pods here: the node tests do.)
func TestDelegatedMountsNeedTheGatewaysGrantAndOptIn(t *testing.T) {
	e := newEnv(t)
	e.logOnFailure()
	e.create(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: praxisconfig.DefaultConfigMapName, Namespace: e.gwNS},
		Data: map[string]string{praxisconfig.DataKey: "listeners: []\n"}})
	e.create(gatewayDeployment(e.gwNS, "edge-gw"))
	gw := e.gateway("edge", "east")
	gw.PraxisConfig = &v1alpha1.PraxisConfig{Generate: true,
		ClusterEndpoints: []v1alpha1.ClusterEndpoint{{Cluster: "api", Address: "127.0.0.1:18080", Transport: &v1alpha1.EndpointTransport{
			Mode: "tls", SNI: ptrTo("api.internal"), CASecretRef: &v1alpha1.LocalSecretKeyRef{Name: "api-ca"}}}},
		MountReconciliation: &v1alpha1.MountReconciliation{Enabled: true, DeploymentName: "edge-gw", ContainerName: "praxis"}}
	other := e.gateway("other", "east")
	other.PraxisConfig = &v1alpha1.PraxisConfig{Generate: true, ConfigMapName: "other-config",
		MountReconciliation: &v1alpha1.MountReconciliation{Enabled: true, DeploymentName: "not-there"}}
	network := e.network(gw, other)
	e.create(network)
	api := e.provider("api", network.Name, "model-api")
	api.Spec.ClusterName = "api"
	api.Spec.Auth = &v1alpha1.ProviderAuth{Strategy: "bearer_token", SecretRef: &v1alpha1.SecretKeyReference{Name: "api-token", Namespace: e.gwNS, Key: "token"}}
	e.create(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "api-token", Namespace: e.gwNS}, Data: map[string][]byte{"token": []byte("sk-mounts-sentinel")}})
	a := e.startAgent()

	deployment := func() *appsv1.Deployment {
		var d appsv1.Deployment
		require.NoError(t, e.admin.Get(e.ctx, types.NamespacedName{Namespace: e.gwNS, Name: "edge-gw"}, &d))
		return &d
	}
	before := deployment()
	st := e.mountStatus(network, "edge", phase(mounts.PhaseError, mounts.ReasonDeploymentForbidden))
	assert.Contains(t, st.Message, "get is forbidden")
	// An empty overlay is never held: stopping routes needs no rollout.
	e.overlayOf(network, gw, func(r envelope.Result) bool { return r.CandidateCount == 0 })
	e.create(api)
	held := e.gatewayStatus(network, "edge", func(s v1alpha1.GatewayOverlayStatus) bool { return s.Reason == mounts.ReasonDeploymentForbidden })
	assert.Contains(t, held.Message, "the previous revision stays")

	require.NoError(t, e.cp.Grant(e.ctx, e.agentNS, "gridsync-agent", "gateway-edge-gw", e.gwNS, rbac.GatewayDeploymentRules("edge-gw")))
	require.NoError(t, e.cp.Grant(e.ctx, e.agentNS, "gridsync-agent", "gateway-not-there", e.gwNS, rbac.GatewayDeploymentRules("not-there")))
	e.mountStatus(network, "edge", phase(mounts.PhaseError, mounts.ReasonNotOptedIn))
	e.mountStatus(network, "other", phase(mounts.PhaseError, mounts.ReasonDeploymentMissing))
	assert.Equal(t, before.ResourceVersion, deployment().ResourceVersion, "nothing patched before the opt-in")

	update(e, deployment(), func(d *appsv1.Deployment) {
		d.Annotations = map[string]string{mounts.AnnotationEnabled: "true", mounts.AnnotationNetwork: network.Name, mounts.AnnotationGatewayRef: "edge"}
	})
	st = e.mountStatus(network, "edge", phase(mounts.PhaseWaitingForSecret, ""))
	assert.Contains(t, st.Message, e.gwNS+"/api-ca")
	assert.Contains(t, st.Message, "leaves out the clusters the running config does not have yet: api")
	e.overlayOf(network, gw, func(r envelope.Result) bool { return r.CandidateCount == 0 })
	optedIn := deployment()
	assert.Equal(t, before.Spec, optedIn.Spec, "not patched while a Secret is missing")

	// No controller manager runs here: the test writes the status a
	// finished rollout of the bootstrap template has, so that the agent
	// may reuse the other slot.
	settle(t, e, deployment())
	phases := e.mountPhases(network, "edge")
	e.create(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "api-ca", Namespace: e.gwNS}, Data: map[string][]byte{"ca.crt": []byte("not read by the agent")}})
	slot := mounts.SlotName(praxisconfig.DefaultConfigMapName)
	st = e.mountStatus(network, "edge", phase(mounts.PhaseWaitingForRollout, ""))
	assert.Equal(t, slot, st.ConfigMapName)
	// The reconcile that patched says so before the rollout is waited for.
	e.eventually("MountsReconciling, then WaitingForRollout", func() (bool, string) {
		seen := phases()
		i := slices.Index(seen, mounts.PhaseReconciling+"/"+mounts.ReasonConfigSwitched)
		return i >= 0 && slices.ContainsFunc(seen[i:], func(p string) bool { return strings.HasPrefix(p, mounts.PhaseWaitingForRollout+"/") }),
			strings.Join(seen, " → ")
	})
	patched := deployment()
	writes := a.requests.count()

	// The config is staged in the Grid slot; the bootstrap is untouched.
	var staged, bootstrap corev1.ConfigMap
	require.NoError(t, e.admin.Get(e.ctx, types.NamespacedName{Namespace: e.gwNS, Name: slot}, &staged))
	require.NoError(t, e.admin.Get(e.ctx, types.NamespacedName{Namespace: e.gwNS, Name: praxisconfig.DefaultConfigMapName}, &bootstrap))
	assert.Contains(t, staged.Data[praxisconfig.DataKey], "127.0.0.1:18080")
	assert.Equal(t, mounts.ConfigRevision([]byte(staged.Data[praxisconfig.DataKey])), st.ConfigRevision)
	assert.Equal(t, "listeners: []\n", bootstrap.Data[praxisconfig.DataKey])

	// One apply changed the agent's fields and nothing else: the config
	// slot, a projection per folder the config reads, the revisions.
	want := optedIn.DeepCopy()
	tmpl := &want.Spec.Template
	tmpl.Spec.Volumes[0].ConfigMap.Name = slot
	var owned []string
	for _, p := range []struct{ dir, secret, key string }{
		{"/run/secrets/grid-backend-ca/api-ca", "api-ca", "ca.crt"},
		{"/run/secrets/grid-credentials/" + e.gwNS + "/api-token", "api-token", "token"},
	} {
		volume := mounts.VolumeName(p.dir)
		owned = append(owned, volume)
		tmpl.Spec.Volumes = append(tmpl.Spec.Volumes, corev1.Volume{Name: volume, VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
			DefaultMode: ptrTo[int32](0o644),
			Sources: []corev1.VolumeProjection{{Secret: &corev1.SecretProjection{LocalObjectReference: corev1.LocalObjectReference{Name: p.secret},
				Items: []corev1.KeyToPath{{Key: p.key, Path: p.key}}}}},
		}}})
		tmpl.Spec.Containers[0].VolumeMounts = append(tmpl.Spec.Containers[0].VolumeMounts, corev1.VolumeMount{Name: volume, MountPath: p.dir, ReadOnly: true})
	}
	tmpl.Annotations[mounts.AnnotationConfigRevision] = st.ConfigRevision
	tmpl.Annotations[mounts.AnnotationSecretsRevision] = patched.Spec.Template.Annotations[mounts.AnnotationSecretsRevision]
	slices.Sort(owned)
	tmpl.Annotations[mounts.AnnotationMounts] = strings.Join(owned, ",")
	assert.Equal(t, want.Spec, patched.Spec)
	assert.NotEmpty(t, patched.Spec.Template.Annotations[mounts.AnnotationSecretsRevision])
	managers := map[string]metav1.ManagedFieldsOperationType{}
	for _, f := range patched.ManagedFields {
		managers[f.Manager] = f.Operation
	}
	assert.Equal(t, metav1.ManagedFieldsOperationApply, managers[mounts.FieldManager], "the agent's own field manager")
	for _, s := range []string{staged.Data[praxisconfig.DataKey], st.Message} {
		assert.NotContains(t, s, "sk-mounts-sentinel")
	}

	// Nothing more while nothing changes: the rollout is waited for, not
	// patched again.
	time.Sleep(5 * time.Second)
	for _, w := range a.requests.since(writes) {
		assert.NotContains(t, w, "/deployments/", "no second patch")
	}
	assert.Equal(t, patched.ResourceVersion, deployment().ResourceVersion)

	// Disabled: neither read nor patched; Grid's mounts stay.
	update(e, network, func(n *v1alpha1.GridNetwork) {
		n.Spec.ConsumerGateways[0].PraxisConfig.MountReconciliation.Enabled = false
	})
	st = e.mountStatus(network, "edge", phase(mounts.PhaseDisabled, ""))
	assert.True(t, strings.Contains(st.Message, mounts.AnnotationMounts), st.Message)
	assert.Equal(t, patched.Spec, deployment().Spec)
}

// settle writes the status the Deployment controller writes once every
// replica of the current template is available and no older one remains.
func settle(t *testing.T, e *env, d *appsv1.Deployment) {
	t.Helper()
	d.Status = appsv1.DeploymentStatus{ObservedGeneration: d.Generation, Replicas: 1, UpdatedReplicas: 1, ReadyReplicas: 1, AvailableReplicas: 1}
	require.NoError(t, e.admin.Status().Update(e.ctx, d))
}
