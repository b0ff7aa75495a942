package mounts

import (
	"slices"
	"strings"

	appsv1ac "k8s.io/client-go/applyconfigurations/apps/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
)

// Apply is the one server-side apply of the agent's fields of the pod
// template: the config volume's ConfigMap (the slot), the projections
// (desired, then kept) and their mounts in the selected container, and
// the revision annotations. Applied with FieldManager, it owns exactly
// these fields; a projection left out of a later apply (pruned) is
// removed because this manager alone owns it, and every other field of
// the Deployment (Helm's volumes and mounts, other containers, the
// image) is left as it is. The Deployment's AnnotationNetworkUID is
// applied too, so that the opt-in binds to the network that made the
// first patch (see Inspect).
func Apply(namespace, name string, live Live, t Target, want Desired, kept []Projection) *appsv1ac.DeploymentApplyConfiguration {
	all := append(slices.Clone(want.Projections), kept...)
	owned := make([]string, 0, len(all))
	volumes := []*corev1ac.VolumeApplyConfiguration{
		corev1ac.Volume().WithName(live.ConfigVolume).WithConfigMap(corev1ac.ConfigMapVolumeSource().WithName(want.Slot)),
	}
	container := corev1ac.Container().WithName(t.Container)
	for _, p := range all {
		owned = append(owned, p.Volume())
		projected := corev1ac.ProjectedVolumeSource()
		for _, s := range p.Sources {
			secret := corev1ac.SecretProjection().WithName(s.Secret)
			for _, it := range s.Items {
				secret.WithItems(corev1ac.KeyToPath().WithKey(it.Key).WithPath(it.Path))
			}
			if p.Optional {
				secret.WithOptional(true)
			}
			projected.WithSources(corev1ac.VolumeProjection().WithSecret(secret))
		}
		volumes = append(volumes, corev1ac.Volume().WithName(p.Volume()).WithProjected(projected))
		container.WithVolumeMounts(corev1ac.VolumeMount().WithName(p.Volume()).WithMountPath(p.MountPath).WithReadOnly(true))
	}
	slices.Sort(owned)
	return appsv1ac.Deployment(name, namespace).WithAnnotations(map[string]string{AnnotationNetworkUID: t.NetworkUID}).WithSpec(appsv1ac.DeploymentSpec().WithTemplate(
		corev1ac.PodTemplateSpec().
			WithAnnotations(map[string]string{
				AnnotationConfigRevision:  want.ConfigRevision,
				AnnotationSecretsRevision: want.SecretsRevision,
				AnnotationMounts:          strings.Join(owned, ","),
			}).
			WithSpec(corev1ac.PodSpec().WithVolumes(volumes...).WithContainers(container))))
}
