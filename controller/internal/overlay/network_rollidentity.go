package overlay

import (
	"context"
	"fmt"
	"slices"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gridsync/gridsync/api/v1alpha1"
	"github.com/gridsync/gridsync/controller/internal/base"
	"github.com/gridsync/gridsync/trust/sitetrust"
)

// AnnotationSiteIdentityFingerprint is the pod-template annotation of an
// opted-in gateway Deployment: a new value rolls its pods, which load the
// renewed site certificate at start.
const AnnotationSiteIdentityFingerprint = "grid.praxis.fast/site-identity-fingerprint"

// Reasons of a gateway's identityRollout status.
const (
	ReasonIdentityRolled        = "IdentityRolled"
	ReasonIdentityCurrent       = "IdentityCurrent"
	ReasonDeploymentForbidden   = "DeploymentForbidden"
	ReasonDeploymentMissing     = "DeploymentMissing"
	ReasonDeploymentPatchFailed = "DeploymentPatchFailed"
)

// rollIdentity rolls each opted-in gateway Deployment to this site's
// current certificate: one annotation on its pod template, patched when it
// differs, and nothing else of the Deployment. The Deployment is read and
// patched with the access its gateway granted (get and patch on that one
// Deployment; the agent's own RBAC grants none), and a refusal names the
// verb refused. The site certificate is the one the trust material holds
// (the membership reconciler refreshes it when it issues or renews one,
// and the change reaches this reconciler).
func (r *Reconciler) rollIdentity(ctx context.Context, network *v1alpha1.GridNetwork, statuses []v1alpha1.GatewayOverlayStatus) {
	if !slices.ContainsFunc(network.Spec.ConsumerGateways, func(g v1alpha1.ConsumerGateway) bool { return g.IdentityRollout != nil }) {
		return
	}
	site := r.Trust.Get(ctx, network).Client
	if site == nil || len(site.Certificate) == 0 {
		return
	}
	fingerprint := sitetrust.Fingerprint(site.Certificate[0])
	for _, g := range network.Spec.ConsumerGateways {
		if g.IdentityRollout == nil {
			continue
		}
		st := r.rollOne(ctx, g.Namespace, g.IdentityRollout.DeploymentName, fingerprint)
		for i := range statuses {
			if statuses[i].GatewayName == g.Name && statuses[i].Namespace == g.Namespace {
				statuses[i].IdentityRollout = st
			}
		}
	}
}

func (r *Reconciler) rollOne(ctx context.Context, namespace, name, fingerprint string) *v1alpha1.IdentityRolloutStatus {
	at := fmt.Sprintf("Deployment %s/%s", namespace, name)
	var d appsv1.Deployment
	err := r.API.Get(ctx, types.NamespacedName{Namespace: namespace, Name: name}, &d)
	switch {
	case apierrors.IsForbidden(err):
		return &v1alpha1.IdentityRolloutStatus{Reason: ReasonDeploymentForbidden, Message: at + ": get is forbidden; the gateway grants get and patch on its Deployment to the agent (see the praxis-gateway chart's overlay.identityRollout)"}
	case apierrors.IsNotFound(err):
		return &v1alpha1.IdentityRolloutStatus{Reason: ReasonDeploymentMissing, Message: at + " does not exist"}
	case err != nil:
		return &v1alpha1.IdentityRolloutStatus{Reason: ReasonDeploymentPatchFailed, Message: at + ": " + base.APIFailure(err, "get", "Deployment")}
	}
	if d.Spec.Template.Annotations[AnnotationSiteIdentityFingerprint] == fingerprint {
		return &v1alpha1.IdentityRolloutStatus{Fingerprint: fingerprint, Reason: ReasonIdentityCurrent, Message: at + "'s pods are rolled to the current site certificate"}
	}
	patch := fmt.Sprintf(`{"spec":{"template":{"metadata":{"annotations":{%q:%q}}}}}`, AnnotationSiteIdentityFingerprint, fingerprint)
	err = r.Client.Patch(ctx, &appsv1.Deployment{ObjectMeta: d.ObjectMeta}, client.RawPatch(types.StrategicMergePatchType, []byte(patch)))
	switch {
	case apierrors.IsForbidden(err):
		return &v1alpha1.IdentityRolloutStatus{Reason: ReasonDeploymentForbidden, Message: at + ": patch is forbidden; the gateway grants get and patch on its Deployment to the agent"}
	case err != nil:
		return &v1alpha1.IdentityRolloutStatus{Reason: ReasonDeploymentPatchFailed, Message: at + ": " + base.APIFailure(err, "patch", "Deployment")}
	}
	r.Opts.Logger.Info("gateway_identity_rolled", "deployment", namespace+"/"+name, "fingerprint", fingerprint)
	return &v1alpha1.IdentityRolloutStatus{Fingerprint: fingerprint, Reason: ReasonIdentityRolled, Message: at + " rolled to the current site certificate"}
}
