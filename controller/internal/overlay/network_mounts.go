package overlay

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gridsync/gridsync/api/v1alpha1"
	"github.com/gridsync/gridsync/controller/internal/base"
	"github.com/gridsync/gridsync/controller/mounts"
	"github.com/gridsync/gridsync/controller/praxisconfig"
)

// mountPollInterval is how soon a network is reconciled again while a
// delegated Deployment rolls: the agent may get that Deployment, not
// watch it.
const mountPollInterval = time.Second

// delegatedConfig is the rendered config of a gateway whose mounts are
// delegated, handed from the consumer config stage to the mount stage.
type delegatedConfig struct {
	config       []byte
	requirements []praxisconfig.Requirement
	// missing names the Secrets (or keys) not there yet; secretVersions
	// are the others' resourceVersions.
	missing        []string
	secretVersions map[string]string
}

// delegates reports whether a gateway's mounts are delegated to the agent.
func delegates(spec *v1alpha1.PraxisConfig) bool {
	return spec != nil && spec.MountReconciliation != nil && spec.MountReconciliation.Enabled
}

// mountPlan is one delegated gateway's Deployment as read before the
// publish stage, and what the agent does to it after.
type mountPlan struct {
	status   v1alpha1.MountReconciliationStatus
	decision mounts.Decision
	target   mounts.Target
	live     mounts.Live
	desired  mounts.Desired
	kept     []mounts.Projection
	cfg      *delegatedConfig
}

// planMounts is the mount stage's first half, run before the overlays are
// published: it reads each delegated gateway's Deployment and the config
// slots its pods mount, and narrows the gateway's overlay to what those
// pods can reach. A populated revision waits while the Deployment cannot
// be read or does not opt in (an empty one never does: it only stops
// routing). It writes nothing.
func (r *Reconciler) planMounts(ctx context.Context, network *v1alpha1.GridNetwork, overlays []gatewayOverlay,
	delegated map[types.NamespacedName]*delegatedConfig,
) []*mountPlan {
	var plans []*mountPlan
	for i := range overlays {
		o := &overlays[i]
		spec := consumerGateway(network, o.gateway)
		if spec == nil || spec.PraxisConfig == nil || spec.PraxisConfig.MountReconciliation == nil {
			continue
		}
		mr := spec.PraxisConfig.MountReconciliation
		st := v1alpha1.MountReconciliationStatus{GatewayName: o.gateway.Name, Namespace: o.gateway.Namespace,
			DeploymentName: mr.DeploymentName, ObservedGeneration: network.Generation}
		switch {
		case !mr.Enabled:
			st.Phase, st.Reason = mounts.PhaseDisabled, mounts.ReasonDelegationDisabled
			st.Message = "delegation is off: the Deployment is neither read nor patched; the volumes and mounts Grid added earlier " +
				"(named in its pod template's " + mounts.AnnotationMounts + " annotation) stay until the Deployment's owner removes them, " +
				"after moving its config volume back to ConfigMap " + praxisconfig.ConfigMapName(*spec.PraxisConfig)
			plans = append(plans, &mountPlan{status: st})
		case !spec.PraxisConfig.Generate:
			st.Phase, st.Reason = mounts.PhaseError, mounts.ReasonConfigNotRendered
			st.Message = "praxisConfig.generate is false: there is no generated config to roll out"
			plans = append(plans, &mountPlan{status: st})
		default:
			plans = append(plans, r.planMount(ctx, network, o, spec.PraxisConfig, delegated[types.NamespacedName{Namespace: o.gateway.Namespace, Name: o.gateway.Name}], st))
		}
	}
	return plans
}

func (r *Reconciler) planMount(ctx context.Context, network *v1alpha1.GridNetwork, o *gatewayOverlay, spec *v1alpha1.PraxisConfig,
	cfg *delegatedConfig, st v1alpha1.MountReconciliationStatus,
) *mountPlan {
	gw, mr := o.gateway, spec.MountReconciliation
	name := praxisconfig.ConfigMapName(*spec)
	p := &mountPlan{status: st, cfg: cfg, target: mounts.Target{Network: network.Name, NetworkUID: string(network.UID), Gateway: gw.Name,
		Container: cmp.Or(mr.ContainerName, "praxis"), Slots: [2]string{name, mounts.SlotName(name)}}}
	at := fmt.Sprintf("Deployment %s/%s", gw.Namespace, mr.DeploymentName)
	result := func(phase, reason, message string) *mountPlan {
		p.status.Phase, p.status.Reason, p.status.Message = phase, reason, message
		return p
	}
	// withheld: the Deployment is not read or not to be touched, so what
	// its pods run is unknown; a populated revision waits.
	withheld := func(reason, message string) *mountPlan {
		if len(o.overlay.Candidates) > 0 && o.hold == nil {
			o.hold = &overlayHold{reason: reason, why: "waits for " + at + " (see mountReconciliationStatus)"}
		}
		return result(mounts.PhaseError, reason, message)
	}
	if !r.Opts.Watches(gw.Namespace) {
		return withheld(ReasonNamespaceNotWatched, fmt.Sprintf("namespace %s is not one of the agent's namespaces", gw.Namespace))
	}
	var d appsv1.Deployment
	switch err := r.API.Get(ctx, types.NamespacedName{Namespace: gw.Namespace, Name: mr.DeploymentName}, &d); {
	case apierrors.IsForbidden(err):
		return withheld(mounts.ReasonDeploymentForbidden, at+": get is forbidden; the gateway grants get and patch on its Deployment "+
			"to the agent (the praxis-gateway chart's mountReconciliation.enabled renders that Role)")
	case apierrors.IsNotFound(err):
		return withheld(mounts.ReasonDeploymentMissing, at+" does not exist")
	case err != nil:
		return withheld(mounts.ReasonDeploymentPatchFailed, at+": "+base.APIFailure(err, "get", "Deployment"))
	}
	live, err := mounts.Inspect(&d, p.target)
	if e := (*mounts.Error)(nil); errors.As(err, &e) {
		return withheld(e.Reason, e.Message)
	}
	p.live = live
	p.status.ConfigMapName, p.status.ConfigRevision = live.ActiveSlot, live.ConfigRevision
	rollout := mounts.RolloutOf(&d)

	// The overlay names only clusters every pod's config has: the active
	// slot's, and while older pods remain, the other slot's too.
	activeRevision, withdrew, err := r.narrowToRunning(ctx, gw.Namespace, p.target, live.ActiveSlot, rollout.Settled, o)
	if err != nil {
		return withheld(mounts.ReasonDeploymentPatchFailed, err.Error())
	}
	note := ""
	if len(withdrew) > 0 {
		note = "; the overlay leaves out the clusters the running config does not have yet: " + base.JoinLimited(withdrew, 5)
	}
	if cfg == nil {
		return result(mounts.PhaseError, mounts.ReasonConfigNotRendered,
			"the config did not render (see praxisConfigStatus): the Deployment keeps the config it runs"+note)
	}
	projections, err := mounts.Projections(gw.Namespace, cfg.requirements)
	if err == nil {
		err = live.Conflicts(projections)
	}
	if e := (*mounts.Error)(nil); errors.As(err, &e) {
		return result(mounts.PhaseError, e.Reason, e.Message+note)
	}
	if len(cfg.missing) > 0 {
		return result(mounts.PhaseWaitingForSecret, mounts.ReasonSecretMissing,
			"the config reads Secrets that are not there yet: "+base.JoinLimited(cfg.missing, 5)+note)
	}
	p.desired = mounts.Desired{Slot: live.ActiveSlot, ConfigRevision: mounts.ConfigRevision(cfg.config),
		SecretsRevision: mounts.SecretsRevision(cfg.secretVersions), Projections: projections}
	inSync := live.InSync(p.desired, activeRevision)
	p.kept = live.Obsolete(p.desired)
	p.decision = mounts.Decide(inSync, len(p.kept), rollout)
	switch p.decision.Action {
	case mounts.Switch:
		p.desired.Slot = p.target.Inactive(live.ActiveSlot)
	case mounts.Prune:
		p.kept = nil
	}
	return result(p.decision.Phase, p.decision.Reason, p.decision.Message+note)
}

// narrowToRunning leaves out of the overlay the candidates whose cluster
// a running pod's config lacks, and returns the revision of the active
// slot's config and the clusters left out.
func (r *Reconciler) narrowToRunning(ctx context.Context, namespace string, t mounts.Target, active string, settled bool,
	o *gatewayOverlay,
) (string, []string, error) {
	slots := []string{active}
	if !settled {
		slots = append(slots, t.Inactive(active))
	}
	var reach map[string]bool
	activeRevision := ""
	for i, slot := range slots {
		var cm corev1.ConfigMap
		switch err := r.API.Get(ctx, types.NamespacedName{Namespace: namespace, Name: slot}, &cm); {
		case apierrors.IsNotFound(err) && i > 0:
			continue // no pod can mount a slot that does not exist
		case apierrors.IsNotFound(err):
		case err != nil:
			return "", nil, fmt.Errorf("get ConfigMap %s/%s: %s", namespace, slot, base.APIFailure(err, "get", "ConfigMap"))
		}
		doc := cm.Data[praxisconfig.DataKey]
		if i == 0 {
			activeRevision = mounts.ConfigRevision([]byte(doc))
		}
		clusters, _ := praxisconfig.AppliedClusters([]byte(doc)) // a config that does not parse reaches nothing
		slotReach := map[string]bool{}
		for c := range clusters {
			if reach == nil || reach[c] {
				slotReach[c] = true
			}
		}
		reach = slotReach
	}
	var withdrew []string
	o.overlay.Candidates, withdrew = reachable(o.overlay.Candidates, func(cluster string) bool { return reach[cluster] })
	return activeRevision, withdrew, nil
}

// applyMounts is the mount stage's second half, after the overlays were
// published (so that an empty overlay reaches the gateways whatever
// happens here): for each plan that switches, the generated config is
// written to the slot no pod mounts, then one server-side apply moves the
// pod template to it with its projections and revisions; a plan that
// prunes applies the template without the obsolete projections.
func (r *Reconciler) applyMounts(ctx context.Context, network *v1alpha1.GridNetwork, plans []*mountPlan) ([]v1alpha1.MountReconciliationStatus, bool, error) {
	statuses := make([]v1alpha1.MountReconciliationStatus, 0, len(plans))
	var firstErr error
	rolling := false
	for _, p := range plans {
		if p.decision.Action != mounts.Wait {
			if err := r.patchDeployment(ctx, network, p); err != nil && firstErr == nil {
				firstErr = err
			}
		}
		switch p.status.Phase {
		case mounts.PhaseReconciling, mounts.PhaseWaitingForRollout:
			rolling = true
		}
		statuses = append(statuses, p.status)
	}
	return statuses, rolling, firstErr
}

func (r *Reconciler) patchDeployment(ctx context.Context, network *v1alpha1.GridNetwork, p *mountPlan) error {
	gw := p.status
	at := fmt.Sprintf("Deployment %s/%s", gw.Namespace, gw.DeploymentName)
	kind := "prune"
	if p.decision.Action == mounts.Switch {
		kind = "switch"
		// The configured slot may hold the bootstrap config its owner
		// wrote; it is the agent's to write once no pod mounts it.
		key := types.NamespacedName{Namespace: gw.Namespace, Name: p.desired.Slot}
		if _, err := r.applyManaged(ctx, key, r.gatewayLabels(network.Name, gw.GatewayName), network.Name, gw.GatewayName, map[string]string{praxisconfig.DataKey: string(p.cfg.config)},
			p.desired.Slot == p.target.Slots[0]); err != nil {
			r.Metrics.MountPatches.WithLabelValues(kind, base.PublishFailed).Inc()
			p.status.Phase, p.status.Reason, p.status.Message = mounts.PhaseError, mounts.ReasonDeploymentPatchFailed, "stage the config: "+err.Error()
			return err
		}
	}
	apply := mounts.Apply(gw.Namespace, gw.DeploymentName, p.live, p.target, p.desired, p.kept)
	err := r.Client.Apply(ctx, apply, client.FieldOwner(mounts.FieldManager), client.ForceOwnership)
	switch {
	case apierrors.IsForbidden(err):
		r.Metrics.MountPatches.WithLabelValues(kind, base.PublishRefused).Inc()
		p.status.Phase, p.status.Reason = mounts.PhaseError, mounts.ReasonDeploymentForbidden
		p.status.Message = at + ": patch is forbidden; the gateway grants get and patch on its Deployment to the agent"
		return nil
	case err != nil:
		r.Metrics.MountPatches.WithLabelValues(kind, base.PublishFailed).Inc()
		p.status.Phase, p.status.Reason, p.status.Message = mounts.PhaseError, mounts.ReasonDeploymentPatchFailed, at+": "+base.APIFailure(err, "patch", "Deployment")
		return err
	}
	r.Metrics.MountPatches.WithLabelValues(kind, base.PublishApplied).Inc()
	owned := make([]string, 0, len(p.desired.Projections)+len(p.kept))
	for _, pr := range append(slices.Clone(p.desired.Projections), p.kept...) {
		owned = append(owned, pr.MountPath)
	}
	r.Opts.Logger.Info("gateway_mounts_"+kind, "network", network.Name, "gateway", gw.GatewayName, "deployment", gw.Namespace+"/"+gw.DeploymentName,
		"config_map", p.desired.Slot, "config_revision", p.desired.ConfigRevision, "mounts", owned)
	p.status.ConfigMapName, p.status.ConfigRevision = p.desired.Slot, p.desired.ConfigRevision
	switch kind {
	case "switch":
		p.status.Message = fmt.Sprintf("%s now mounts config %s (revision %s) and %d Secret folders; its pods roll", at, p.desired.Slot, p.desired.ConfigRevision, len(p.desired.Projections))
		if len(p.kept) > 0 {
			p.status.Message += fmt.Sprintf("; %d folders no longer read stay, optional, until no older pod remains", len(p.kept))
		}
	default:
		p.status.Message = at + ": the Secret folders the config no longer reads are removed now that no older pod remains; its pods roll"
	}
	return nil
}
