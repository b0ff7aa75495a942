package mounts

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/gridsync/gridsync/controller/praxisconfig"
)

func TestReservedNamesAreTheFirst16HexOfTheirSHA256(t *testing.T) {
	sum := sha256.Sum256([]byte("/run/secrets/grid-credentials/gw/east-token"))
	assert.Equal(t, "grid-mount-"+hex.EncodeToString(sum[:])[:16], VolumeName("/run/secrets/grid-credentials/gw/east-token"))
	assert.NotEqual(t, VolumeName("/a"), VolumeName("/b"))
	sum = sha256.Sum256([]byte("praxis-consumer-config"))
	assert.Equal(t, "grid-praxis-config-"+hex.EncodeToString(sum[:])[:16], SlotName("praxis-consumer-config"))
	assert.LessOrEqual(t, len(SlotName(string(make([]byte, 253)))), 63)
}

func TestSecretsRevisionFollowsVersionsNotOrder(t *testing.T) {
	a := SecretsRevision(map[string]string{"gw/a": "1", "gw/b": "7"})
	assert.Equal(t, a, SecretsRevision(map[string]string{"gw/b": "7", "gw/a": "1"}))
	assert.NotEqual(t, a, SecretsRevision(map[string]string{"gw/a": "2", "gw/b": "7"}), "a rotated Secret changes it")
	assert.NotEqual(t, a, SecretsRevision(map[string]string{"gw/a": "1"}), "a Secret no longer read changes it")
}

func req(purpose, ns, name string, items ...praxisconfig.RequirementItem) praxisconfig.Requirement {
	return praxisconfig.Requirement{Purpose: purpose, Secret: praxisconfig.RequirementSecret{Namespace: ns, Name: name}, Items: items}
}

func item(key, path string) praxisconfig.RequirementItem {
	return praxisconfig.RequirementItem{Key: key, Path: path}
}

// Each folder the config reads is one projected volume: the mutual-TLS
// folder takes the grid CA and the site identity, two Secrets; each
// credential Secret has a folder of its own.
func TestProjectionsAreOneVolumePerFolder(t *testing.T) {
	got, err := Projections("gw", []praxisconfig.Requirement{
		req(praxisconfig.PurposeBackendCredential, "gw", "east-token", item("token", "/run/secrets/grid-credentials/gw/east-token/token")),
		req(praxisconfig.PurposeGridSiteIdentity, "gw", "site", item("tls.key", "/etc/praxis/tls/tls.key"), item("tls.crt", "/etc/praxis/tls/tls.crt")),
		req(praxisconfig.PurposeGridPeerCA, "gw", "grid-ca", item("ca.crt", "/etc/praxis/tls/ca.crt")),
	})
	require.NoError(t, err)
	require.Len(t, got, 2)
	assert.Equal(t, Projection{MountPath: "/etc/praxis/tls", Sources: []Source{
		{Secret: "grid-ca", Items: []corev1.KeyToPath{{Key: "ca.crt", Path: "ca.crt"}}},
		{Secret: "site", Items: []corev1.KeyToPath{{Key: "tls.crt", Path: "tls.crt"}, {Key: "tls.key", Path: "tls.key"}}},
	}}, got[0])
	assert.Equal(t, Projection{MountPath: "/run/secrets/grid-credentials/gw/east-token", Sources: []Source{
		{Secret: "east-token", Items: []corev1.KeyToPath{{Key: "token", Path: "token"}}},
	}}, got[1])
}

func TestProjectionsRefuseOtherNamespacesAndFoldersThatHideTheConfig(t *testing.T) {
	for name, c := range map[string]struct {
		req    praxisconfig.Requirement
		reason string
	}{
		"another namespace":     {req(praxisconfig.PurposeGridPeerCA, "grid-system", "grid-ca", item("ca.crt", "/etc/praxis/tls/ca.crt")), ReasonSecretNamespace},
		"the config folder":     {req(praxisconfig.PurposeBackendCA, "gw", "ca", item("ca.crt", "/etc/praxis/ca.crt")), ReasonInvalidMountPath},
		"a parent of it":        {req(praxisconfig.PurposeBackendCA, "gw", "ca", item("ca.crt", "/etc/ca.crt")), ReasonInvalidMountPath},
		"the root":              {req(praxisconfig.PurposeBackendCA, "gw", "ca", item("ca.crt", "/ca.crt")), ReasonInvalidMountPath},
		"a relative path":       {req(praxisconfig.PurposeBackendCA, "gw", "ca", item("ca.crt", "certs/ca.crt")), ReasonInvalidMountPath},
		"an unclean path":       {req(praxisconfig.PurposeBackendCA, "gw", "ca", item("ca.crt", "/run/../etc/praxis/x/ca.crt")), ReasonInvalidMountPath},
		"a comma in the folder": {req(praxisconfig.PurposeBackendCA, "gw", "ca", item("ca.crt", "/run/a,b/ca.crt")), ReasonInvalidMountPath},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := Projections("gw", []praxisconfig.Requirement{c.req})
			var e *Error
			require.ErrorAs(t, err, &e)
			assert.Equal(t, c.reason, e.Reason, e.Message)
		})
	}
}

var target = Target{Network: "prod", NetworkUID: "9d1c0b6e-prod", Gateway: "inference-gw", Container: "praxis", Slots: [2]string{"praxis-consumer-config", SlotName("praxis-consumer-config")}}

// deployment is the praxis-gateway chart's shape: opted in, the config
// at /etc/praxis, a Helm-owned TLS mount and a second container.
func deployment() *appsv1.Deployment {
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "inference-gw", Namespace: "gw", Annotations: map[string]string{
			AnnotationEnabled: "true", AnnotationNetwork: "prod", AnnotationGatewayRef: "inference-gw",
		}},
		Spec: appsv1.DeploymentSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
			Containers: []corev1.Container{
				{Name: "praxis", VolumeMounts: []corev1.VolumeMount{
					{Name: "config", MountPath: "/etc/praxis", ReadOnly: true},
					{Name: "tls", MountPath: "/etc/praxis/listener-tls", ReadOnly: true},
				}},
				{Name: "overlay-sync"},
			},
			Volumes: []corev1.Volume{
				{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
					LocalObjectReference: corev1.LocalObjectReference{Name: "praxis-consumer-config"},
					Items:                []corev1.KeyToPath{{Key: "praxis.yaml", Path: "praxis.yaml"}},
				}}},
				{Name: "tls", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "listener-tls"}}},
			},
		}}},
	}
}

func TestInspectNeedsTheOptInTheContainerAndTheConfigFolder(t *testing.T) {
	live, err := Inspect(deployment(), target)
	require.NoError(t, err)
	assert.Equal(t, "config", live.ConfigVolume)
	assert.Equal(t, "praxis-consumer-config", live.ActiveSlot)
	assert.Empty(t, live.Owned())
	bound := deployment()
	bound.Annotations[AnnotationNetworkUID] = target.NetworkUID
	_, err = Inspect(bound, target)
	require.NoError(t, err, "the opt-in bound to this network's UID")

	for name, c := range map[string]struct {
		mutate func(*appsv1.Deployment)
		reason string
	}{
		"no opt-in":       {func(d *appsv1.Deployment) { delete(d.Annotations, AnnotationEnabled) }, ReasonNotOptedIn},
		"another network": {func(d *appsv1.Deployment) { d.Annotations[AnnotationNetwork] = "staging" }, ReasonNotOptedIn},
		"another gateway": {func(d *appsv1.Deployment) { d.Annotations[AnnotationGatewayRef] = "other-gw" }, ReasonNotOptedIn},
		"the network re-created": {func(d *appsv1.Deployment) {
			d.Annotations[AnnotationNetworkUID] = "52f0aa31-an-earlier-prod"
		}, ReasonNetworkRecreated},
		"no such container":   {func(d *appsv1.Deployment) { d.Spec.Template.Spec.Containers[0].Name = "gateway" }, ReasonContainerMissing},
		"a subPath":           {func(d *appsv1.Deployment) { d.Spec.Template.Spec.Containers[0].VolumeMounts[0].SubPath = "praxis.yaml" }, ReasonConfigNotMounted},
		"nothing at the path": {func(d *appsv1.Deployment) { d.Spec.Template.Spec.Containers[0].VolumeMounts[0].MountPath = "/config" }, ReasonConfigNotMounted},
		"another ConfigMap": {func(d *appsv1.Deployment) {
			d.Spec.Template.Spec.Volumes[0].ConfigMap.Name = "hand-written"
		}, ReasonConfigNotMounted},
		"another key": {func(d *appsv1.Deployment) {
			d.Spec.Template.Spec.Volumes[0].ConfigMap.Items[0].Key = "config.yaml"
		}, ReasonConfigNotMounted},
	} {
		t.Run(name, func(t *testing.T) {
			d := deployment()
			c.mutate(d)
			_, err := Inspect(d, target)
			var e *Error
			require.ErrorAs(t, err, &e)
			assert.Equal(t, c.reason, e.Reason, e.Message)
		})
	}
}

// A projection never takes the place of a mount the agent does not own.
func TestConflictsWithWhatTheAgentDoesNotOwn(t *testing.T) {
	d := deployment()
	c := &d.Spec.Template.Spec.Containers[0]
	c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: "legacy", MountPath: "/run/secrets/legacy/east"})
	live, err := Inspect(d, target)
	require.NoError(t, err)
	assert.NoError(t, live.Conflicts([]Projection{{MountPath: "/etc/praxis/tls"}}), "below the config folder, beside the chart's TLS")
	assert.NoError(t, live.Conflicts([]Projection{{MountPath: "/run/secrets/legacy/east/sub"}}), "below a chart mount")
	for name, p := range map[string]Projection{
		"the chart's folder":        {MountPath: "/etc/praxis/listener-tls"},
		"a parent of a chart mount": {MountPath: "/run/secrets/legacy"},
	} {
		var e *Error
		require.ErrorAs(t, live.Conflicts([]Projection{p}), &e, name)
		assert.Equal(t, ReasonMountPathConflict, e.Reason, name)
	}
	d = deployment()
	d.Spec.Template.Spec.Volumes = append(d.Spec.Template.Spec.Volumes, corev1.Volume{Name: VolumeName("/run/x")})
	live, err = Inspect(d, target)
	require.NoError(t, err)
	var e *Error
	require.ErrorAs(t, live.Conflicts([]Projection{{MountPath: "/run/x"}}), &e, "a reserved name Grid did not record")
	assert.Equal(t, ReasonMountPathConflict, e.Reason)
}

var (
	tokenA = Projection{MountPath: "/run/secrets/grid-credentials/gw/a", Sources: []Source{{Secret: "a", Items: []corev1.KeyToPath{{Key: "token", Path: "token"}}}}}
	tokenB = Projection{MountPath: "/run/secrets/grid-credentials/gw/b", Sources: []Source{{Secret: "b", Items: []corev1.KeyToPath{{Key: "token", Path: "token"}}}}}
)

// applied is the Deployment after the server merged an Apply into it, as
// far as the agent's fields go: what the template carries next time.
func applied(t *testing.T, d *appsv1.Deployment, want Desired, kept []Projection) *appsv1.Deployment {
	t.Helper()
	live, err := Inspect(d, target)
	require.NoError(t, err)
	out := d.DeepCopy()
	tmpl := &out.Spec.Template
	if tmpl.Annotations == nil {
		tmpl.Annotations = map[string]string{}
	}
	a := Apply(d.Namespace, d.Name, live, target, want, kept).Spec.Template
	for k, v := range a.Annotations {
		tmpl.Annotations[k] = v
	}
	var volumes []corev1.Volume
	for _, v := range tmpl.Spec.Volumes {
		if !live.owns(v.Name) {
			volumes = append(volumes, v)
		}
	}
	mounts := []corev1.VolumeMount{}
	for _, m := range tmpl.Spec.Containers[0].VolumeMounts {
		if !live.owns(m.Name) {
			mounts = append(mounts, m)
		}
	}
	for _, v := range a.Spec.Volumes {
		if *v.Name == live.ConfigVolume {
			volumes[0].ConfigMap.Name = *v.ConfigMap.Name
			continue
		}
		pv := &corev1.ProjectedVolumeSource{}
		for _, src := range v.Projected.Sources {
			sp := &corev1.SecretProjection{LocalObjectReference: corev1.LocalObjectReference{Name: *src.Secret.Name}, Optional: src.Secret.Optional}
			for _, it := range src.Secret.Items {
				sp.Items = append(sp.Items, corev1.KeyToPath{Key: *it.Key, Path: *it.Path})
			}
			pv.Sources = append(pv.Sources, corev1.VolumeProjection{Secret: sp})
		}
		volumes = append(volumes, corev1.Volume{Name: *v.Name, VolumeSource: corev1.VolumeSource{Projected: pv}})
	}
	for _, m := range a.Spec.Containers[0].VolumeMounts {
		mounts = append(mounts, corev1.VolumeMount{Name: *m.Name, MountPath: *m.MountPath, ReadOnly: *m.ReadOnly})
	}
	tmpl.Spec.Volumes, tmpl.Spec.Containers[0].VolumeMounts = volumes, mounts
	return out
}

// A reference added, then removed: each change is one switch to the other
// slot; the removed projection is kept (optional) by the switch and
// pruned once that rollout is complete, and never while it is not.
func TestAChangeIsOneSwitchAndARemovalIsPrunedAfterTheRollout(t *testing.T) {
	d := deployment()
	settled := Rollout{Settled: true, Complete: true, Reason: ReasonRolledOut}
	rolling := Rollout{Reason: ReasonRolloutInProgress, Message: "1 of 3 pods run the current template"}

	first := Desired{Slot: target.Slots[1], ConfigRevision: "c1", SecretsRevision: "s1", Projections: []Projection{tokenA}}
	live, err := Inspect(d, target)
	require.NoError(t, err)
	assert.False(t, live.InSync(first, "bootstrap"), "the bootstrap config")
	assert.Equal(t, Wait, Decide(false, 0, rolling).Action, "the bootstrap Deployment becomes ready first")
	assert.Equal(t, Decision{Action: Switch, Phase: PhaseReconciling, Reason: ReasonConfigSwitched}, Decide(false, 0, settled), "a patch is MountsReconciling")
	assert.Equal(t, target.Slots[1], target.Inactive(live.ActiveSlot))

	d = applied(t, d, first, live.Obsolete(first))
	live, err = Inspect(d, target)
	require.NoError(t, err)
	assert.Equal(t, target.Slots[1], live.ActiveSlot)
	assert.True(t, live.InSync(first, "c1"))
	assert.False(t, live.InSync(first, "c0"), "a slot rewritten by someone else")
	assert.Empty(t, live.Obsolete(first))
	assert.Equal(t, PhaseWaitingForRollout, Decide(true, 0, rolling).Phase)
	assert.Equal(t, PhaseReady, Decide(true, 0, settled).Phase)
	assert.Equal(t, "listener-tls", d.Spec.Template.Spec.Volumes[1].Secret.SecretName, "the chart's volume is kept")

	second := Desired{Slot: target.Inactive(live.ActiveSlot), ConfigRevision: "c2", SecretsRevision: "s2", Projections: []Projection{tokenB}}
	assert.Equal(t, target.Slots[0], second.Slot, "the slots alternate")
	assert.False(t, live.InSync(second, "c1"))
	kept := live.Obsolete(second)
	require.Len(t, kept, 1)
	assert.True(t, kept[0].Optional, "kept optional: a Secret deleted meanwhile does not stop new pods")
	d = applied(t, d, second, kept)
	live, err = Inspect(d, target)
	require.NoError(t, err)
	assert.ElementsMatch(t, []string{tokenA.Volume(), tokenB.Volume()}, live.Owned())
	assert.True(t, live.InSync(second, "c2"))
	require.Len(t, live.Obsolete(second), 1)
	assert.Equal(t, Wait, Decide(true, 1, rolling).Action, "never pruned while old pods remain")
	assert.Equal(t, Wait, Decide(true, 1, Rollout{Settled: true, Reason: ReasonScaledToZero}).Action)
	assert.Equal(t, Decision{Action: Prune, Phase: PhaseReconciling, Reason: ReasonMountsPruned}, Decide(true, 1, settled), "a patch is MountsReconciling")

	d = applied(t, d, second, nil)
	live, err = Inspect(d, target)
	require.NoError(t, err)
	assert.Equal(t, []string{tokenB.Volume()}, live.Owned())
	assert.Empty(t, live.Obsolete(second))
	assert.Equal(t, PhaseReady, Decide(live.InSync(second, "c2"), 0, settled).Phase)
}

// The apply names only the agent's fields: the config volume's ConfigMap,
// its projections, the container's mounts of them, the revisions, and
// the UID of the network the opt-in is bound to.
func TestApplyCarriesOnlyTheAgentsFields(t *testing.T) {
	live, err := Inspect(deployment(), target)
	require.NoError(t, err)
	want := Desired{Slot: target.Slots[1], ConfigRevision: "c1", SecretsRevision: "s1", Projections: []Projection{tokenA}}
	doc, err := json.Marshal(Apply("gw", "inference-gw", live, target, want, nil))
	require.NoError(t, err)
	assert.JSONEq(t, `{"kind":"Deployment","apiVersion":"apps/v1","metadata":{"name":"inference-gw","namespace":"gw",
	 "annotations":{"grid.praxis.fast/mount-reconciliation-network-uid":"9d1c0b6e-prod"}},
	 "spec":{"template":{"metadata":{"annotations":{
	   "grid.praxis.fast/config-revision":"c1","grid.praxis.fast/secrets-revision":"s1","grid.praxis.fast/mounts":"`+tokenA.Volume()+`"}},
	 "spec":{"volumes":[
	   {"name":"config","configMap":{"name":"`+target.Slots[1]+`"}},
	   {"name":"`+tokenA.Volume()+`","projected":{"sources":[{"secret":{"name":"a","items":[{"key":"token","path":"token"}]}}]}}],
	 "containers":[{"name":"praxis","volumeMounts":[{"name":"`+tokenA.Volume()+`","readOnly":true,"mountPath":"/run/secrets/grid-credentials/gw/a"}]}]}}}}`, string(doc))
}

func TestRolloutReadsTheDeploymentStatus(t *testing.T) {
	for name, c := range map[string]struct {
		replicas          int32
		status            appsv1.DeploymentStatus
		generation        int64
		settled, complete bool
		reason            string
	}{
		"not yet observed":   {3, appsv1.DeploymentStatus{ObservedGeneration: 1, Replicas: 3, UpdatedReplicas: 3, AvailableReplicas: 3}, 2, false, false, ReasonRolloutInProgress},
		"old pods remain":    {3, appsv1.DeploymentStatus{ObservedGeneration: 2, Replicas: 4, UpdatedReplicas: 2, AvailableReplicas: 3}, 2, false, false, ReasonRolloutInProgress},
		"old pods terminate": {3, appsv1.DeploymentStatus{ObservedGeneration: 2, Replicas: 3, UpdatedReplicas: 3, AvailableReplicas: 3, TerminatingReplicas: ptr.To[int32](1)}, 2, false, false, ReasonRolloutInProgress},
		"not yet available":  {3, appsv1.DeploymentStatus{ObservedGeneration: 2, Replicas: 3, UpdatedReplicas: 3, AvailableReplicas: 2}, 2, true, false, ReasonRolloutInProgress},
		"scaled to zero":     {0, appsv1.DeploymentStatus{ObservedGeneration: 2}, 2, true, false, ReasonScaledToZero},
		"complete":           {3, appsv1.DeploymentStatus{ObservedGeneration: 2, Replicas: 3, UpdatedReplicas: 3, AvailableReplicas: 3}, 2, true, true, ReasonRolledOut},
	} {
		t.Run(name, func(t *testing.T) {
			d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Generation: c.generation}, Spec: appsv1.DeploymentSpec{Replicas: ptr.To(c.replicas)}, Status: c.status}
			r := RolloutOf(d)
			assert.Equal(t, c.settled, r.Settled)
			assert.Equal(t, c.complete, r.Complete)
			assert.Equal(t, c.reason, r.Reason, r.Message)
		})
	}
}
