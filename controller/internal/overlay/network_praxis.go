package overlay

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gridsync/gridsync/api/v1alpha1"
	"github.com/gridsync/gridsync/controller/internal/base"
	"github.com/gridsync/gridsync/controller/praxisconfig"
	"github.com/gridsync/gridsync/controller/render"
	"github.com/gridsync/gridsync/shared/envelope"
)

// Phases of a gateway's praxisConfigStatus.
const (
	praxisRendered = "Rendered"
	praxisError    = "Error"
)

// praxisOutcome is one gateway's generated Praxis config.
type praxisOutcome struct {
	status v1alpha1.PraxisConfigStatus
	// overlay is what the gateway's overlay becomes: the rendered one less
	// the withdrawn candidates. Unchanged when the render failed.
	overlay envelope.Overlay
	// hold: this overlay revision carries a credential the gateway has not
	// attested it can inject from projected files; it must not be
	// published.
	hold *overlayHold
	// delegated is the rendered config of a gateway whose mounts are
	// delegated, for the mount stage to stage and roll; nil otherwise or
	// when the render failed.
	delegated *delegatedConfig
}

// praxisInputs are a network's inputs to every gateway's config, gathered
// once per reconcile.
type praxisInputs struct {
	providers []praxisconfig.Provider
	// localNames are the local providers' names: the site their
	// candidates carry in this release.
	localNames map[string]bool
	gridCA     *praxisconfig.SecretRef
	site       *praxisconfig.SecretRef
}

func newPraxisInputs(network *v1alpha1.GridNetwork, items []v1alpha1.InferenceProvider) praxisInputs {
	in := praxisInputs{localNames: make(map[string]bool, len(items))}
	for i := range items {
		p := &items[i]
		if !p.DeletionTimestamp.IsZero() {
			continue
		}
		id := p.Spec.ClusterName
		if id == "" {
			id = p.Name
		}
		in.providers = append(in.providers, praxisconfig.Provider{Identity: id, Name: p.Name, Endpoint: p.Spec.Endpoint})
		in.localNames[p.Name] = true
	}
	if tls := network.Spec.TLS; tls != nil {
		if ref := tls.CASecretRef; ref != nil {
			in.gridCA = &praxisconfig.SecretRef{Namespace: ref.Namespace, Name: ref.Name}
		}
		if ref := tls.SiteSecretRef; ref != nil {
			in.site = &praxisconfig.SecretRef{Namespace: ref.Namespace, Name: ref.Name}
		}
	}
	return in
}

// praxisInputFor is what one gateway's config is rendered from.
func praxisInputFor(network *v1alpha1.GridNetwork, gw render.Gateway, spec *v1alpha1.PraxisConfig, overlay envelope.Overlay, in praxisInputs) praxisconfig.Input {
	return praxisconfig.Input{
		Network: network.Name, Gateway: gw.Name, Namespace: gw.Namespace, LocalSite: gw.Site,
		Spec: *spec, Candidates: overlay.Candidates, Providers: in.providers, GridCA: in.gridCA, Site: in.site,
		FinalHop: func(site string) bool { return site == gw.Site || in.localNames[site] },
	}
}

// praxisSpec is the praxisConfig of a gateway when it asks for generation.
func praxisSpec(network *v1alpha1.GridNetwork, gw render.Gateway) *v1alpha1.PraxisConfig {
	if g := consumerGateway(network, gw); g != nil && g.PraxisConfig != nil && g.PraxisConfig.Generate {
		return g.PraxisConfig
	}
	return nil
}

// reconcilePraxisConfigs is the consumer config stage: for every gateway
// that asks for a generated praxis.yaml it renders and applies one, which
// decides which candidates the gateway can reach (those without an
// endpoint are withdrawn from its overlay) and whether a credential-bearing
// revision may reach it yet (hold). It returns the overlays to publish,
// the configs' statuses, and the configs of the gateways whose mounts are
// delegated (for the mount stage, which stages and rolls them instead of
// this stage writing them); an error of one gateway is returned after the
// others were done.
func (r *Reconciler) reconcilePraxisConfigs(ctx context.Context, network *v1alpha1.GridNetwork, items []v1alpha1.InferenceProvider,
	overlays []gatewayOverlay,
) ([]gatewayOverlay, []v1alpha1.PraxisConfigStatus, map[types.NamespacedName]*delegatedConfig, error) {
	out := make([]gatewayOverlay, 0, len(overlays))
	var statuses []v1alpha1.PraxisConfigStatus
	delegated := map[types.NamespacedName]*delegatedConfig{}
	var firstErr error
	var in *praxisInputs // built once, for the first gateway that needs it
	for _, o := range overlays {
		spec := praxisSpec(network, o.gateway)
		if spec == nil {
			out = append(out, o)
			continue
		}
		if in == nil {
			built := newPraxisInputs(network, items)
			in = &built
		}
		pc, err := r.reconcilePraxisConfig(ctx, network, o.gateway, spec, o.overlay, *in)
		if err != nil && firstErr == nil {
			firstErr = err
		}
		statuses = append(statuses, pc.status)
		o.overlay, o.hold = pc.overlay, pc.hold
		if pc.delegated != nil {
			delegated[types.NamespacedName{Namespace: o.gateway.Namespace, Name: o.gateway.Name}] = pc.delegated
		}
		out = append(out, o)
	}
	return out, statuses, delegated, firstErr
}

// reconcilePraxisConfig renders and applies one gateway's praxis.yaml and
// its mount-requirements document. A render that fails keeps the last
// applied ConfigMap, and the overlay as rendered; the error returned is
// for a retry. A gateway whose mounts are delegated gets its requirements
// document here and its config from the mount stage, which writes it to
// the slot no pod reads and rolls the Deployment to it.
func (r *Reconciler) reconcilePraxisConfig(ctx context.Context, network *v1alpha1.GridNetwork, gw render.Gateway,
	spec *v1alpha1.PraxisConfig, overlay envelope.Overlay, in praxisInputs,
) (praxisOutcome, error) {
	name := praxisconfig.ConfigMapName(*spec)
	delegate := delegates(spec)
	out := praxisOutcome{overlay: overlay, status: v1alpha1.PraxisConfigStatus{
		GatewayName: gw.Name, Namespace: gw.Namespace, ConfigMapName: name, ObservedGeneration: network.Generation,
	}}
	failed := func(reason, message string) praxisOutcome {
		out.status.Phase, out.status.Reason, out.status.Message = praxisError, reason, message
		r.Opts.Logger.Info("praxis_config_failed", "network", network.Name, "gateway", gw.Name, "namespace", gw.Namespace,
			"config_map", name, "reason", reason, "message", message)
		return out
	}
	if !r.Opts.Watches(gw.Namespace) {
		r.Metrics.PraxisWrites.WithLabelValues(base.PublishRefused).Inc()
		return failed(praxisconfig.ReasonPraxisConfigApplyFailed, fmt.Sprintf("namespace %s is not one of the agent's namespaces", gw.Namespace)), nil
	}

	start := time.Now()
	input := praxisInputFor(network, gw, spec, overlay, in)
	res, err := praxisconfig.Render(input)
	var doc []byte
	if err == nil {
		doc, err = praxisconfig.Requirements(input, res)
	}
	elapsed := time.Since(start)
	r.Metrics.PraxisRenderDuration.Observe(elapsed.Seconds())
	r.Opts.Logger.Debug("praxis_config_rendered", "network", network.Name, "gateway", gw.Name,
		"duration_ms", float64(elapsed.Microseconds())/1000, "error", errString(err))
	if err != nil {
		r.Metrics.PraxisWrites.WithLabelValues(base.PublishRefused).Inc()
		reason, message := praxisconfig.ReasonPraxisConfigRenderFailed, err.Error()
		if e := (*praxisconfig.Error)(nil); errors.As(err, &e) {
			reason, message = e.Reason, e.Message
		}
		// The gateway keeps running the last applied config: its overlay
		// names only the clusters that config can reach (for delegated
		// mounts, the mount stage knows which slot that is).
		if delegate {
			return failed(reason, message), nil
		}
		if reach, withdrew, err := r.lastAppliedReach(ctx, types.NamespacedName{Namespace: gw.Namespace, Name: name}, overlay.Candidates); err != nil {
			message += "; " + err.Error()
		} else if reach != nil {
			out.overlay.Candidates = reach
			if len(withdrew) > 0 {
				message += "; until it renders, withdrew the clusters the last applied config does not have: " + base.JoinLimited(withdrew, 5)
			}
		}
		return failed(reason, message), nil
	}
	out.overlay.Candidates = res.Candidates
	if res.HoldCredentials {
		out.hold = &overlayHold{reason: praxisconfig.ReasonProjectedCredentialsUnsupported,
			why: "carries credentials and praxisConfig.supportsProjectedCredentials is false"}
	}

	labels := r.gatewayLabels(network.Name, gw.Name)
	if delegate {
		out.delegated = &delegatedConfig{config: res.YAML, requirements: res.Requirements}
	} else {
		key := types.NamespacedName{Namespace: gw.Namespace, Name: name}
		wrote, err := r.applyManaged(ctx, key, labels, network.Name, gw.Name, map[string]string{praxisconfig.DataKey: string(res.YAML)}, false)
		if err != nil {
			r.Metrics.PraxisWrites.WithLabelValues(base.PublishFailed).Inc()
			return failed(praxisconfig.ReasonPraxisConfigApplyFailed, err.Error()), err
		}
		outcome := base.PublishUnchanged
		if wrote {
			outcome = base.PublishApplied
			r.Opts.Logger.Info("praxis_config_applied", "network", network.Name, "gateway", gw.Name, "namespace", gw.Namespace,
				"config_map", name, "clusters", res.Clusters, "withdrawn", len(res.Withdrawn))
		}
		r.Metrics.PraxisWrites.WithLabelValues(outcome).Inc()
	}
	reqKey := types.NamespacedName{Namespace: gw.Namespace, Name: praxisconfig.RequirementsConfigMapName(name)}
	if _, err := r.applyManaged(ctx, reqKey, labels, network.Name, gw.Name, map[string]string{praxisconfig.RequirementsKey: string(doc)}, false); err != nil {
		return failed(praxisconfig.ReasonPraxisConfigApplyFailed, err.Error()), err
	}

	msg := fmt.Sprintf("consumer config rendered and applied to %s/%s: %d clusters", gw.Namespace, name, res.Clusters)
	if delegate {
		msg = fmt.Sprintf("consumer config rendered: %d clusters; delegated: staged in the config slot the Deployment does not mount and rolled out (see mountReconciliationStatus)", res.Clusters)
	}
	for _, w := range res.Withdrawn {
		msg += fmt.Sprintf("; withdrew cluster %s (%s): %s", w.Cluster, strings.Join(w.Models, ", "), w.Why)
	}
	missing, versions := r.mountedSecrets(ctx, res.Requirements)
	if out.delegated != nil {
		out.delegated.missing, out.delegated.secretVersions = missing, versions
	}
	if len(missing) > 0 {
		msg += "; Secrets the config reads that are not there yet: " + base.JoinLimited(missing, 5)
	}
	out.status.Phase, out.status.Message = praxisRendered, msg
	if out.hold != nil {
		out.status.Phase, out.status.Reason = praxisError, praxisconfig.ReasonProjectedCredentialsUnsupported
		out.status.Message = msg + "; the overlay revision that carries credentials is held until supportsProjectedCredentials is true " +
			"(set it once the gateway runs this config with the credential Secrets mounted)"
	}
	return out, nil
}

// mountedSecrets checks the Secrets a config reads (get only): which are
// absent or lack a key, and the resourceVersions of the others
// (namespace/name to version; never a value). Secrets in a namespace the
// agent does not read cannot be checked and are named so.
func (r *Reconciler) mountedSecrets(ctx context.Context, reqs []praxisconfig.Requirement) ([]string, map[string]string) {
	secrets := base.NewSecretReader(ctx, r.API)
	var missing []string
	versions := map[string]string{}
	for _, req := range reqs {
		ns, name := req.Secret.Namespace, req.Secret.Name
		if !r.Opts.Watches(ns) {
			missing = append(missing, fmt.Sprintf("%s/%s (namespace not readable by the agent)", ns, name))
			continue
		}
		res := secrets.Read(ns, name)
		switch {
		case res.Err != nil:
			missing = append(missing, fmt.Sprintf("%s/%s (%s)", ns, name, base.APIFailure(res.Err, "get", "Secret")))
		case !res.Found:
			missing = append(missing, fmt.Sprintf("%s/%s", ns, name))
		default:
			versions[ns+"/"+name] = res.Version
			for _, it := range req.Items {
				if _, ok := res.Shape[it.Key]; !ok {
					missing = append(missing, fmt.Sprintf("%s/%s key %s", ns, name, it.Key))
				}
			}
		}
	}
	return missing, versions
}

// applyManaged writes a ConfigMap the agent manages for a network's
// gateway when its data or labels differ, and reports whether it wrote.
// It refuses a ConfigMap made by somebody else (the Grid operator's are
// taken over, and with takeOver any unlabelled one: a delegated gateway's
// bootstrap config) or held by another network or gateway.
func (r *Reconciler) applyManaged(ctx context.Context, key types.NamespacedName, labels map[string]string,
	network, gateway string, data map[string]string, takeOver bool,
) (bool, error) {
	var current corev1.ConfigMap
	var adopt *corev1.ConfigMap
	switch err := r.API.Get(ctx, key, &current); {
	case apierrors.IsNotFound(err):
	case err != nil:
		return false, fmt.Errorf("get ConfigMap %s: %w", key, err)
	case !r.mayWrite(&current, takeOver):
		return false, fmt.Errorf("ConfigMap %s exists and is not labelled %s=%s", key, envelope.LabelManagedBy, r.Opts.Producer)
	default:
		if holder, ok := claimedByAnother(&current, network, gateway); ok {
			return false, fmt.Errorf("ConfigMap %s is held by %s; network %s gateway %s names the same ConfigMap: give one of them another configMapName",
				key, holder, network, gateway)
		}
		if current.Labels[envelope.LabelManagedBy] != r.Opts.Producer {
			adopt = &current
		} else if hasAll(current.Labels, labels) && hasAll(current.Data, data) {
			return false, nil
		}
	}
	apply := corev1ac.ConfigMap(key.Name, key.Namespace).WithLabels(labels).WithData(data)
	if err := r.Client.Apply(ctx, apply, client.FieldOwner(r.Opts.Producer), client.ForceOwnership); err != nil {
		return false, fmt.Errorf("apply ConfigMap %s: %w", key, err)
	}
	if adopt != nil {
		if err := r.dropLegacyMetadata(ctx, adopt); err != nil {
			return true, err
		}
	}
	return true, nil
}

// mayWrite: the ConfigMap is the agent's, the Grid operator's (taken
// over), or with takeOver anybody's but another manager's.
func (r *Reconciler) mayWrite(cm *corev1.ConfigMap, takeOver bool) bool {
	owner := cm.Labels[envelope.LabelManagedBy]
	return owner == r.Opts.Producer || adoptable(cm) || (takeOver && owner == "")
}

// lastAppliedReach filters candidates to the clusters of the config
// stored in the ConfigMap, and names the clusters left out. It returns nil
// candidates when there is no config of this agent's there (the gateway
// runs one of its own).
func (r *Reconciler) lastAppliedReach(ctx context.Context, key types.NamespacedName, candidates []envelope.Candidate) ([]envelope.Candidate, []string, error) {
	var cm corev1.ConfigMap
	switch err := r.API.Get(ctx, key, &cm); {
	case apierrors.IsNotFound(err):
		return nil, nil, nil
	case err != nil:
		return nil, nil, fmt.Errorf("get ConfigMap %s: %w", key, err)
	}
	if cm.Labels[envelope.LabelManagedBy] != r.Opts.Producer {
		return nil, nil, nil
	}
	clusters, err := praxisconfig.AppliedClusters([]byte(cm.Data[praxisconfig.DataKey]))
	if err != nil {
		return nil, nil, fmt.Errorf("the last applied config of %s does not parse", key)
	}
	kept, withdrew := reachable(candidates, func(cluster string) bool { _, ok := clusters[cluster]; return ok })
	return kept, withdrew, nil
}

// reachable keeps the candidates whose cluster a running config has, and
// names the clusters left out, each once.
func reachable(candidates []envelope.Candidate, has func(cluster string) bool) ([]envelope.Candidate, []string) {
	kept := []envelope.Candidate{}
	var withdrew []string
	for _, c := range candidates {
		if has(c.Cluster) {
			kept = append(kept, c)
		} else if !slices.Contains(withdrew, c.Cluster) {
			withdrew = append(withdrew, c.Cluster)
		}
	}
	return kept, withdrew
}
