package controller_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gridsync/gridsync/api/v1alpha1"
	"github.com/gridsync/gridsync/controller"
	"github.com/gridsync/gridsync/controller/rbac"
	"github.com/gridsync/gridsync/test/controlplane"
	"github.com/gridsync/gridsync/trust/sitetrust"
)

// A gateway that opted in is rolled to the site's certificate: first
// refused for want of the grant it gives (naming the verb), then its
// Deployment's pod template carries the certificate's fingerprint, and a
// new certificate changes it; nothing else of the Deployment is touched.
// A Deployment that does not exist reads DeploymentMissing.
func TestAnOptedInGatewayIsRolledToANewSiteCertificate(t *testing.T) {
	e := newEnv(t)
	e.logOnFailure()
	e.grantTrustSecrets("grid-ca", "site-cert")
	labels := map[string]string{"app": "edge-gw"}
	deployment := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "edge-gw", Namespace: e.gwNS},
		Spec: appsv1.DeploymentSpec{Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels, Annotations: map[string]string{"kept": "yes"}},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "praxis", Image: "praxis:test"}}}}}}
	e.create(deployment)
	gw := e.gateway("edge", "site-a")
	gw.IdentityRollout = &v1alpha1.IdentityRollout{DeploymentName: "edge-gw"}
	missing := e.gateway("other", "site-a")
	missing.IdentityRollout = &v1alpha1.IdentityRollout{DeploymentName: "not-there"}
	network := e.network(gw, missing)
	network.Spec.TLS = &v1alpha1.GridTLS{
		CASecretRef:   &v1alpha1.NamespacedName{Name: "grid-ca", Namespace: e.credNS},
		SiteSecretRef: &v1alpha1.NamespacedName{Name: "site-cert", Namespace: e.credNS},
	}
	e.create(network)
	e.startAgent(withSiteTrust("site-a", 0, 0))

	rollout := func(name, reason string) *v1alpha1.IdentityRolloutStatus {
		var got *v1alpha1.IdentityRolloutStatus
		e.networkStatus(network, name+" "+reason, func(n *v1alpha1.GridNetwork) (bool, string) {
			for _, s := range n.Status.OverlayStatus {
				if s.GatewayName == name && s.IdentityRollout != nil {
					got = s.IdentityRollout
					return s.IdentityRollout.Reason == reason, s.IdentityRollout.Reason + ": " + s.IdentityRollout.Message
				}
			}
			return false, "no rollout status"
		})
		return got
	}
	assert.Contains(t, rollout("edge", controller.ReasonDeploymentForbidden).Message, "get is forbidden")

	require.NoError(t, e.cp.Grant(e.ctx, e.agentNS, controlplane.AgentServiceAccount, "gateway-edge-gw", e.gwNS, rbac.GatewayDeploymentRules("edge-gw")))
	require.NoError(t, e.cp.Grant(e.ctx, e.agentNS, controlplane.AgentServiceAccount, "gateway-not-there", e.gwNS, rbac.GatewayDeploymentRules("not-there")))
	fingerprint := func() string {
		l, err := sitetrust.ParseCertificates(e.secretData("site-cert")["tls.crt"])
		require.NoError(t, err)
		return sitetrust.Fingerprint(l[0].Raw)
	}
	annotation := func() map[string]string {
		var d appsv1.Deployment
		require.NoError(t, e.admin.Get(e.ctx, types.NamespacedName{Namespace: e.gwNS, Name: "edge-gw"}, &d))
		return d.Spec.Template.Annotations
	}
	first := fingerprint()
	e.eventually("the Deployment rolled", func() (bool, string) {
		return annotation()[controller.AnnotationSiteIdentityFingerprint] == first, annotation()[controller.AnnotationSiteIdentityFingerprint]
	})
	assert.Equal(t, "yes", annotation()["kept"], "nothing else of the pod template is touched")
	rollout("other", controller.ReasonDeploymentMissing)

	// A new site certificate (its Secret deleted: the agent issues one).
	require.NoError(t, e.admin.Delete(e.ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "site-cert", Namespace: e.credNS}}))
	e.eventually("a new certificate", func() (bool, string) {
		d := e.secretData("site-cert")
		if d == nil {
			return false, "none yet"
		}
		return fingerprint() != first, "the same"
	})
	second := fingerprint()
	e.eventually("the Deployment rolled again", func() (bool, string) {
		return annotation()[controller.AnnotationSiteIdentityFingerprint] == second, annotation()[controller.AnnotationSiteIdentityFingerprint]
	})
}
