package overlay

import (
	"cmp"
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gridsync/gridsync/api/v1alpha1"
	"github.com/gridsync/gridsync/controller/servingconfig"
	"github.com/gridsync/gridsync/shared/envelope"
	"github.com/gridsync/gridsync/trust/sitetrust"
)

// ReasonServingConfigFailed: a gateway's serving config could not be
// rendered or applied; the last applied one stays.
const ReasonServingConfigFailed = "ServingConfigFailed"

// reconcileServing is the serving config stage, after publishing: for
// every gateway with gridServing enabled, its serving-config.json with
// the candidates of the overlay just published (a revision held from the
// gateway is held here too), and for a gateway of the network that no
// longer asks for one, its candidates withdrawn (the agent deletes no
// ConfigMap it is not asked to: its RBAC grants no delete by default). An error of one gateway is returned after
// the others were done.
func (r *Reconciler) reconcileServing(ctx context.Context, network *v1alpha1.GridNetwork, overlays []gatewayOverlay) ([]v1alpha1.PraxisConfigStatus, error) {
	specs := map[types.NamespacedName]*v1alpha1.ConsumerGateway{}
	for i := range network.Spec.ConsumerGateways {
		g := &network.Spec.ConsumerGateways[i]
		specs[types.NamespacedName{Namespace: g.Namespace, Name: g.Name}] = g
	}
	serves := func(g *v1alpha1.ConsumerGateway) bool {
		return g != nil && g.GridServing != nil && g.GridServing.Enabled
	}
	var statuses []v1alpha1.PraxisConfigStatus
	var firstErr error
	for _, o := range overlays {
		spec := specs[types.NamespacedName{Namespace: o.gateway.Namespace, Name: o.gateway.Name}]
		if !serves(spec) {
			continue
		}
		st, err := r.applyServing(ctx, network, o, spec)
		statuses = append(statuses, st)
		if err != nil && firstErr == nil {
			firstErr = err
		}
	}
	for _, prev := range network.Status.ServingConfigStatus {
		// A gateway gone from the network had its serving config
		// withdrawn with its overlay (publishOverlays), and keeps it so.
		spec := specs[types.NamespacedName{Namespace: prev.Namespace, Name: prev.GatewayName}]
		if spec == nil || serves(spec) {
			continue
		}
		if err := r.withdrawServing(ctx, network.Name, prev.GatewayName, prev.Namespace); err != nil {
			statuses = append(statuses, prev) // kept, so that it is tried again
			if firstErr == nil {
				firstErr = err
			}
		}
	}
	return statuses, firstErr
}

// applyServing renders and applies one gateway's serving config.
func (r *Reconciler) applyServing(ctx context.Context, network *v1alpha1.GridNetwork, o gatewayOverlay, spec *v1alpha1.ConsumerGateway) (v1alpha1.PraxisConfigStatus, error) {
	gw := o.gateway
	name := servingconfig.ConfigMapName(network.Name, gw.Name)
	st := v1alpha1.PraxisConfigStatus{GatewayName: gw.Name, Namespace: gw.Namespace, ConfigMapName: name, ObservedGeneration: network.Generation}
	failed := func(message string) v1alpha1.PraxisConfigStatus {
		st.Phase, st.Reason, st.Message = praxisError, ReasonServingConfigFailed, message
		r.Opts.Logger.Info("serving_config_failed", "network", network.Name, "gateway", gw.Name, "namespace", gw.Namespace, "message", message)
		return st
	}
	if !r.Opts.Watches(gw.Namespace) {
		return failed(fmt.Sprintf("namespace %s is not one of the agent's namespaces", gw.Namespace)), nil
	}
	if o.hold != nil {
		st.Phase, st.Message = praxisRendered, "kept: the overlay revision is held from this gateway (see its overlay status)"
		return st, nil
	}
	doc, err := servingconfig.Render(servingconfig.Input{
		LocalSite: gw.Site, Candidates: o.overlay.Candidates,
		AgentAddress: cmp.Or(spec.GridServing.SignalsAddress, r.Opts.SignalsAddress), ServerName: sitetrust.DNSName(gw.Site),
		TLSMountPath: spec.GridServing.TLSMountPath, HopEndpoints: spec.ProviderHopEndpoints,
	})
	if err != nil {
		return failed(err.Error()), nil
	}
	labels := r.gatewayLabels(network.Name, gw.Name)
	key := types.NamespacedName{Namespace: gw.Namespace, Name: name}
	wrote, err := r.applyManaged(ctx, key, labels, network.Name, gw.Name, map[string]string{servingconfig.DataKey: string(doc)}, false)
	if err != nil {
		return failed(err.Error()), err
	}
	if wrote {
		r.Opts.Logger.Info("serving_config_applied", "network", network.Name, "gateway", gw.Name, "namespace", gw.Namespace,
			"config_map", name, "candidates", len(o.overlay.Candidates), "provider_hops", len(spec.ProviderHopEndpoints))
	}
	st.Phase = praxisRendered
	st.Message = fmt.Sprintf("serving config applied to %s/%s: %d candidates, %d provider-hop endpoints",
		gw.Namespace, name, len(o.overlay.Candidates), len(spec.ProviderHopEndpoints))
	return st, nil
}

// servingOf reads the serving ConfigMap this agent manages for a
// network's gateway; nil when there is none of its own.
func (r *Reconciler) servingOf(ctx context.Context, network, gateway, namespace string) (*corev1.ConfigMap, error) {
	var cm corev1.ConfigMap
	key := types.NamespacedName{Namespace: namespace, Name: servingconfig.ConfigMapName(network, gateway)}
	switch err := r.API.Get(ctx, key, &cm); {
	case apierrors.IsNotFound(err):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("get ConfigMap %s: %w", key, err)
	}
	if cm.Labels[envelope.LabelManagedBy] != r.Opts.Producer || cm.Labels[envelope.LabelNetwork] != network || cm.Labels[envelope.LabelGateway] != gateway {
		return nil, nil
	}
	return &cm, nil
}

// withdrawServing empties the candidates of the serving config of a
// gateway that left its network (as its overlay is withdrawn) or stopped
// asking for one: the embedded gateway then routes nowhere rather than
// keep the last list.
func (r *Reconciler) withdrawServing(ctx context.Context, network, gateway, namespace string) error {
	cm, err := r.servingOf(ctx, network, gateway, namespace)
	if err != nil || cm == nil {
		return err
	}
	doc := string(servingconfig.Withdrawn([]byte(cm.Data[servingconfig.DataKey])))
	if doc == cm.Data[servingconfig.DataKey] {
		return nil
	}
	_, err = r.applyManaged(ctx, client.ObjectKeyFromObject(cm), cm.Labels, network, gateway, map[string]string{servingconfig.DataKey: doc}, false)
	return err
}
