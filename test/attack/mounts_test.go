package attack

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gridsync/gridsync/api/v1alpha1"
	"github.com/gridsync/gridsync/controller/mounts"
	"github.com/gridsync/gridsync/controller/rbac"
	"github.com/gridsync/gridsync/test/controlplane"
)

// Whoever may write a GridNetwork names the Deployment the agent rolls.
// A gateway that granted the agent get and patch for another purpose (the
// identity rollout), and one that opted in to delegated mounts for another
// network, are named by a network of the attacker's: the grant lets the
// agent patch either whole (RBAC cannot narrow a patch), so only the
// agent's own opt-in check stands between them. Neither is patched; each
// status says why.
func TestMountDeputy(t *testing.T) {
	a := startSwimAgent(t, nil)
	ctx := context.Background()
	deployment := func(name string, annotations map[string]string) *appsv1.Deployment {
		labels := map[string]string{"app": name}
		d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: a.resNS, Annotations: annotations},
			Spec: appsv1.DeploymentSpec{Selector: &metav1.LabelSelector{MatchLabels: labels},
				Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{
					Containers: []corev1.Container{{Name: "praxis", Image: "praxis:test", VolumeMounts: []corev1.VolumeMount{{Name: "config", MountPath: mounts.ConfigMountPath}}}},
					Volumes: []corev1.Volume{{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
						LocalObjectReference: corev1.LocalObjectReference{Name: "praxis-consumer-config"}}}}},
				}}}}
		require.NoError(t, a.admin.Create(ctx, d))
		require.NoError(t, cp.Grant(ctx, a.agentNS, controlplane.AgentServiceAccount, "gateway-"+name, a.resNS, rbac.GatewayDeploymentRules(name)))
		return d
	}
	victims := []*appsv1.Deployment{
		deployment("rolled-for-identity", nil),
		deployment("delegated-elsewhere", map[string]string{mounts.AnnotationEnabled: "true", mounts.AnnotationNetwork: "another-network", mounts.AnnotationGatewayRef: "edge"}),
	}
	name := fmt.Sprintf("deputy-%d", seq.Add(1))
	n := &v1alpha1.GridNetwork{ObjectMeta: metav1.ObjectMeta{Name: name}}
	for _, d := range victims {
		n.Spec.ConsumerGateways = append(n.Spec.ConsumerGateways, v1alpha1.ConsumerGateway{Name: "edge-" + d.Name, Namespace: a.resNS, SiteName: "here",
			PraxisConfig: &v1alpha1.PraxisConfig{Generate: true, ConfigMapName: "config-" + d.Name,
				ClusterEndpoints:    []v1alpha1.ClusterEndpoint{{Cluster: "x", Address: "127.0.0.1:1", Transport: &v1alpha1.EndpointTransport{Mode: "plaintext"}}},
				MountReconciliation: &v1alpha1.MountReconciliation{Enabled: true, DeploymentName: d.Name}}})
	}
	require.NoError(t, a.admin.Create(ctx, n))
	t.Cleanup(func() { _ = a.admin.Delete(context.Background(), n) })

	var reasons []string
	require.Eventually(t, func() bool {
		var gn v1alpha1.GridNetwork
		if a.admin.Get(ctx, types.NamespacedName{Name: name}, &gn) != nil {
			return false
		}
		reasons = reasons[:0]
		for _, s := range gn.Status.MountReconciliationStatus {
			reasons = append(reasons, s.Reason)
		}
		return len(reasons) == len(victims)
	}, 30*time.Second, 50*time.Millisecond)
	time.Sleep(time.Duration(size(10, 3)) * time.Second)
	patched := 0
	for _, d := range victims {
		var now appsv1.Deployment
		require.NoError(t, a.admin.Get(ctx, types.NamespacedName{Namespace: a.resNS, Name: d.Name}, &now))
		if now.ResourceVersion != d.ResourceVersion {
			patched++
		}
	}
	refused := strings.Count(strings.Join(reasons, ","), mounts.ReasonNotOptedIn) == len(victims)
	report(t, "mount_deputy", patched == 0 && refused,
		figure{"deployments_named", len(victims)}, figure{"patched", patched}, figure{"reasons", strings.Join(reasons, ",")})
}
