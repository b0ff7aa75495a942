package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/gridsync/gridsync/controller/api/v1alpha1"
	"github.com/gridsync/gridsync/controller/assess"
	"github.com/gridsync/gridsync/controller/praxisconfig"
	"github.com/gridsync/gridsync/controller/render"
	"github.com/gridsync/gridsync/controller/seeds"
	"github.com/gridsync/gridsync/controller/sites"
	"github.com/gridsync/gridsync/shared/envelope"
)

// Reasons of a gateway's overlay phase.
const (
	ReasonPublished           = "Published"
	ReasonNamespaceNotWatched = "NamespaceNotWatched"
	ReasonConfigMapNotOwned   = "ConfigMapNotOwned"
	// ReasonConfigMapNameConflict: another network's gateway maps to the
	// same ConfigMap name (the upstream naming joins network and gateway
	// with a dash, so x-a/b-c and x-a-b/c collide) and holds it.
	ReasonConfigMapNameConflict = "ConfigMapNameConflict"
	ReasonOverlayTooLarge       = "OverlayTooLarge"
	ReasonPublishFailed         = "PublishFailed"
	ReasonRenderFailed          = "RenderFailed"
)

// maxConfigMapData is the API server's limit on a ConfigMap's data; both
// copies of the overlay share it.
const maxConfigMapData = 1 << 20

type networkReconciler struct {
	*common
	gridSites writeMemo
	// seedResolver caches seed lookups; seedProblems remembers the seed
	// problems logged, so that each is logged once per change.
	seedResolver seeds.Resolver
	seedProblems reasonLog
}

func (r *networkReconciler) setup(mgr ctrl.Manager, health, fromMembership <-chan event.GenericEvent) error {
	b := ctrl.NewControllerManagedBy(mgr)
	if fromMembership != nil {
		b = b.WatchesRawSource(source.Channel(fromMembership, &handler.EnqueueRequestForObject{}))
	}
	return b.
		Named("gridnetwork").
		For(&v1alpha1.GridNetwork{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		// A provider's old and new network are both reconciled when it
		// moves (the map function sees both objects of an update).
		Watches(&v1alpha1.InferenceProvider{}, handler.EnqueueRequestsFromMapFunc(providerNetwork),
			builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		// ConfigMaps and Secrets are not watched (the agent only gets
		// them): a hand edit, a rotated Secret or a freed ConfigMap name is
		// noticed at the periodic resync.
		WatchesRawSource(source.Channel(health, handler.EnqueueRequestsFromMapFunc(r.providerByName))).
		// A site's phase decides whether its providers are in overlays.
		Watches(&v1alpha1.GridSite{}, handler.EnqueueRequestsFromMapFunc(gridSiteNetwork), builder.WithPredicates(sitePhaseChanged)).
		Complete(r)
}

func providerNetwork(_ context.Context, o client.Object) []reconcile.Request {
	p, ok := o.(*v1alpha1.InferenceProvider)
	if !ok || p.Spec.GridNetworkRef == "" {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: p.Spec.GridNetworkRef}}}
}

// providerByName maps a health event (which names the provider only) to
// the provider's network.
func (r *networkReconciler) providerByName(ctx context.Context, o client.Object) []reconcile.Request {
	var p v1alpha1.InferenceProvider
	if err := r.client.Get(ctx, types.NamespacedName{Name: o.GetName()}, &p); err != nil {
		return nil
	}
	return providerNetwork(ctx, &p)
}

// Reconcile publishes the overlay of every consumer gateway of a network.
func (r *networkReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	start := time.Now()
	gatewayCount, retry, err := r.reconcile(ctx, req.Name)
	// One line per reconcile at debug level: what operators (and the
	// controller benchmark) need to see how long a network takes.
	r.opts.Logger.Debug("network_reconciled", "network", req.Name, "gateways", gatewayCount,
		"duration_ms", float64(time.Since(start).Microseconds())/1000, "error", errString(err))
	if err != nil {
		return retryConflicts(err)
	}
	if retry > 0 {
		return reconcile.Result{RequeueAfter: retry}, nil
	}
	return r.opts.resync(), nil
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// reconcile publishes the network's overlays and returns how many
// gateways it has, and how soon to try again when that is sooner than the
// resync.
func (r *networkReconciler) reconcile(ctx context.Context, name string) (int, time.Duration, error) {
	var network v1alpha1.GridNetwork
	err := r.client.Get(ctx, types.NamespacedName{Name: name}, &network)
	if apierrors.IsNotFound(err) {
		if r.opts.Membership != nil {
			r.opts.Membership.Forget(name) // deleted while its finalizer was not ours to run
		}
		if r.opts.Deliveries != nil {
			r.opts.Deliveries.SetGateways(name, nil)
		}
		return 0, 0, nil // its overlays were withdrawn before the finalizer went
	}
	if err != nil {
		return 0, 0, err
	}
	if !network.DeletionTimestamp.IsZero() {
		return 0, 0, r.finalize(ctx, &network)
	}
	// Without listing ConfigMaps the agent finds a deleted network's
	// overlays only from the network itself: the finalizer keeps it until
	// they are withdrawn.
	if !controllerutil.ContainsFinalizer(&network, overlaysFinalizer) {
		orig := network.DeepCopy()
		controllerutil.AddFinalizer(&network, overlaysFinalizer)
		if err := r.client.Patch(ctx, &network, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil {
			return 0, 0, fmt.Errorf("add finalizer to GridNetwork %s: %w", name, err)
		}
	}

	providers, items, err := r.assessProviders(ctx, network.Name)
	if err != nil {
		return 0, 0, err
	}
	// The site's identity first: the certificate gossiped next is the
	// current one.
	identity := r.reconcileIdentity(ctx, &network)
	if identity.wrote {
		r.trust.refresh(ctx, &network)
	}
	swim := r.reconcileMembership(ctx, &network, gossipProviders(items, providers), identity.gossipCert, identity.gossipErr)
	if swim.keyFailed {
		// The reconcile stops at the key: nothing announced, nothing
		// published, the overlays keep what they had.
		return len(network.Spec.ConsumerGateways), swimKeyRetry, r.writeStatus(ctx, &network, network.Status.OverlayStatus, network.Status.PraxisConfigStatus, swim, identity)
	}
	remote, err := r.remoteProviders(ctx, network.Name, swim.view)
	if err != nil {
		return 0, 0, err
	}

	previous := map[types.NamespacedName]v1alpha1.GatewayOverlayStatus{}
	for _, s := range network.Status.OverlayStatus {
		previous[types.NamespacedName{Namespace: s.Namespace, Name: s.GatewayName}] = s
	}
	var statuses []v1alpha1.GatewayOverlayStatus
	var praxis []v1alpha1.PraxisConfigStatus
	var firstErr error
	var pin *praxisInputs
	gws := gateways(&network)
	for _, gw := range gws {
		gwKey := types.NamespacedName{Namespace: gw.Namespace, Name: gw.Name}
		renderStart := time.Now()
		overlay := render.Overlay(network.Name, gw, providers, remote...)
		renderTime := time.Since(renderStart)
		hold := false
		// A generated Praxis config decides which candidates the gateway
		// can reach (those without an endpoint are withdrawn) and whether
		// a credential-bearing revision may reach it yet.
		if spec := praxisSpec(&network, gw); spec != nil {
			if pin == nil {
				in := newPraxisInputs(&network, items)
				pin = &in
			}
			pc, err := r.reconcilePraxisConfig(ctx, &network, gw, spec, overlay, *pin)
			if err != nil && firstErr == nil {
				firstErr = err
			}
			praxis = append(praxis, pc.status)
			overlay, hold = pc.overlay, pc.hold
		}
		st, err := r.publish(ctx, &network, gw, overlay, hold, renderTime, previous[gwKey])
		if err != nil && firstErr == nil {
			firstErr = err
		}
		statuses = append(statuses, st)
		delete(previous, gwKey)
	}
	// What is left of the previous status are gateways removed from the
	// network: their overlays are withdrawn (or deleted, when asked).
	for _, prev := range previous {
		if err := r.withdraw(ctx, network.Name, prev.GatewayName, prev.Namespace); err != nil {
			statuses = append(statuses, prev) // kept, so that it is tried again
			if firstErr == nil {
				firstErr = err
			}
		}
	}
	if err := r.syncGridSites(ctx, &network, swim.view); err != nil && firstErr == nil {
		firstErr = err
	}
	r.summariseDeliveries(network.Name, gws, statuses)
	if err := r.writeStatus(ctx, &network, statuses, praxis, swim, identity); err != nil && firstErr == nil {
		firstErr = err
	}
	var renew time.Duration
	if identity.renewIn > 0 && identity.renewIn < r.opts.ResyncPeriod {
		renew = identity.renewIn + time.Second/10 // just past the renewal point
	}
	return len(gws), renew, firstErr
}

// remoteProviders are the provider records gossiped by the sites whose
// GridSite is Active; a record whose access policy does not parse is left
// out (fail closed).
func (r *networkReconciler) remoteProviders(ctx context.Context, network string, view sites.NetworkView) ([]render.Remote, error) {
	if len(view.Providers) == 0 {
		return nil, nil
	}
	trusted, err := r.trustedSites(ctx, network)
	if err != nil {
		return nil, err
	}
	var out []render.Remote
	for _, p := range view.Providers {
		if !trusted[p.Site] {
			continue
		}
		rp := render.Remote{Site: p.Site, Name: p.Name, Models: p.Models, Phase: v1alpha1.ProviderPhase(p.Phase), Stale: p.Stale}
		if r.opts.Signals != nil {
			// Its site says the provider cannot serve now: not fresh,
			// whatever the gossiped phase.
			if ready, known := r.opts.Signals.Ready(p.Site, p.Name); known && !ready {
				rp.Stale = true
			}
		}
		if p.Sites != "" {
			sel, err := labels.Parse(p.Sites)
			if err != nil {
				continue
			}
			rp.Sites = sel
		}
		out = append(out, rp)
	}
	return out, nil
}

// gateways lists the network's consumer gateways, each once.
func gateways(n *v1alpha1.GridNetwork) []render.Gateway {
	policy := sitePolicy(n.Spec.NetworkPolicy)
	seen := map[types.NamespacedName]bool{}
	var out []render.Gateway
	for _, g := range n.Spec.ConsumerGateways {
		key := types.NamespacedName{Namespace: g.Namespace, Name: g.Name}
		if seen[key] {
			continue
		}
		seen[key] = true
		site := g.SiteName
		if site == "" {
			site = n.Name
		}
		out = append(out, render.Gateway{Name: g.Name, Namespace: g.Namespace, Site: site, Policy: policy})
	}
	return out
}

// sitePolicy reads the network's networkPolicy.
func sitePolicy(np *v1alpha1.NetworkPolicy) render.SitePolicy {
	var p render.SitePolicy
	if np == nil {
		return p
	}
	p.OwnSiteOnly = np.DefaultAllow != nil && !*np.DefaultAllow
	for _, d := range np.Deny {
		if p.Denied == nil {
			p.Denied = map[string]bool{}
		}
		p.Denied[d.Site] = true
	}
	return p
}

// assessProviders assesses every provider of the network, and returns
// them with the provider objects.
func (r *networkReconciler) assessProviders(ctx context.Context, network string) ([]render.Provider, []v1alpha1.InferenceProvider, error) {
	var list v1alpha1.InferenceProviderList
	if err := r.client.List(ctx, &list, client.MatchingFields{indexNetwork: network}); err != nil {
		return nil, nil, fmt.Errorf("list providers of %s: %w", network, err)
	}
	out := make([]render.Provider, 0, len(list.Items))
	secrets := newSecretReader(ctx, r.api) // each Secret read once per reconcile
	var refs []types.NamespacedName
	for i := range list.Items {
		if a := list.Items[i].Spec.Auth; a != nil && a.SecretRef != nil && !a.CredentialsManagedExternally &&
			a.SecretRef.Name != "" && r.opts.watches(a.SecretRef.Namespace) {
			refs = append(refs, types.NamespacedName{Namespace: a.SecretRef.Namespace, Name: a.SecretRef.Name})
		}
	}
	secrets.prefetch(refs)
	for i := range list.Items {
		p := &list.Items[i]
		if !p.DeletionTimestamp.IsZero() {
			continue
		}
		v, err := r.assess(p, secrets)
		if err != nil {
			return nil, nil, err
		}
		out = append(out, v.Provider)
	}
	return out, list.Items, nil
}

func (c *common) assess(p *v1alpha1.InferenceProvider, secrets assess.Secrets) (assess.Verdict, error) {
	return assess.Assess(p, assess.Options{
		Secrets:                secrets,
		SecretNamespaceWatched: c.opts.watches,
		Health:                 c.prober.Health(p.Name),
	})
}

// publish renders and publishes one gateway's overlay and returns its
// status entry. A failure is reported in the entry; the error is for a
// retry.
//
// hold keeps a credential-bearing revision from the gateway: the stored
// overlay stays, and the entry says why. renderTime is how long rendering
// the overlay took, for the render metric.
func (r *networkReconciler) publish(ctx context.Context, network *v1alpha1.GridNetwork, gw render.Gateway, overlay envelope.Overlay, hold bool,
	renderTime time.Duration, prev v1alpha1.GatewayOverlayStatus,
) (v1alpha1.GatewayOverlayStatus, error) {
	name := envelope.ConfigMapName(network.Name, gw.Name)
	st := v1alpha1.GatewayOverlayStatus{
		GatewayName: gw.Name, Namespace: gw.Namespace, ConfigMapName: name,
		ObservedGeneration: network.Generation, Phase: v1alpha1.OverlayPending,
	}
	fail := func(reason, message string) v1alpha1.GatewayOverlayStatus {
		st.Phase, st.Reason, st.Message = v1alpha1.OverlayError, reason, message
		return st
	}
	if !r.opts.watches(gw.Namespace) {
		r.metrics.publishes.WithLabelValues(publishRefused).Inc()
		return fail(ReasonNamespaceNotWatched, fmt.Sprintf("namespace %s is not one of the agent's namespaces", gw.Namespace)), nil
	}

	start := time.Now()
	scope := envelope.Scope{Network: network.Name, Gateway: gw.Name, Namespace: gw.Namespace, LocalSite: gw.Site}
	renderedAt := r.opts.Now()
	doc, revision, err := envelope.Build(overlay, scope, envelope.Provenance{
		Producer: r.opts.Producer, ProducerVersion: r.opts.ProducerVersion,
		SourceName: network.Name, SourceUID: string(network.UID), SourceGeneration: network.Generation,
		RenderedAt: renderedAt,
	})
	var bare []byte
	if err == nil {
		bare, err = envelope.BareOverlay(overlay)
	}
	r.metrics.renderDuration.Observe((renderTime + time.Since(start)).Seconds())
	if err != nil {
		r.metrics.publishes.WithLabelValues(publishRefused).Inc()
		return fail(ReasonRenderFailed, err.Error()), nil
	}
	st.SchemaVersion, st.RenderedRevision, st.ContentDigest = envelope.SchemaVersion, revision, revision
	st.CandidateCount = int32(len(overlay.Candidates))
	if size := len(doc) + len(bare); size > maxConfigMapData {
		r.metrics.publishes.WithLabelValues(publishRefused).Inc()
		return fail(ReasonOverlayTooLarge, fmt.Sprintf("the overlay's two copies take %d bytes, over the ConfigMap limit of %d; narrow the providers' access policies", size, maxConfigMapData)), nil
	}

	labels, annotations := r.overlayMetadata(network.Name, gw.Name, revision)
	key := types.NamespacedName{Namespace: gw.Namespace, Name: name}
	// Read straight from the API server: the agent neither lists nor
	// watches ConfigMaps, it gets the ones it names.
	var current corev1.ConfigMap
	err = r.api.Get(ctx, key, &current)
	var adopt *corev1.ConfigMap // written by the Grid operator: taken over
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		return fail(ReasonPublishFailed, err.Error()), err
	case current.Labels[envelope.LabelManagedBy] != r.opts.Producer && !adoptable(&current):
		r.metrics.publishes.WithLabelValues(publishRefused).Inc()
		return fail(ReasonConfigMapNotOwned, fmt.Sprintf("ConfigMap %s exists and is not labelled %s=%s", key, envelope.LabelManagedBy, r.opts.Producer)), nil
	default:
		if holder, ok := claimedByAnother(&current, network.Name, gw.Name); ok {
			// The first claim keeps the name; refusing here, every time,
			// is what keeps the two networks from rewriting it in turn.
			r.metrics.publishes.WithLabelValues(publishRefused).Inc()
			return fail(ReasonConfigMapNameConflict, fmt.Sprintf("ConfigMap %s is held by %s; network %s gateway %s maps to the same name: rename one of the two",
				key, holder, network.Name, gw.Name)), nil
		}
		if current.Labels[envelope.LabelManagedBy] != r.opts.Producer {
			adopt = &current
			break
		}
		if stored, held := holds(&current, labels, annotations, scope, revision, bare); held {
			r.metrics.publishes.WithLabelValues(publishUnchanged).Inc()
			st.ConfigMapResourceVersion = current.ResourceVersion
			st.RenderedAt = keepRenderedAt(prev, revision, metav1.NewTime(stored.Provenance.RenderedAt))
			st.Phase, st.Reason = v1alpha1.OverlayDistributed, ReasonPublished
			return st, nil
		}
	}
	if hold {
		// What the gateway holds stays: the previous entry's revision.
		r.metrics.publishes.WithLabelValues(publishRefused).Inc()
		held := prev
		held.ObservedGeneration, held.Phase = network.Generation, v1alpha1.OverlayError
		held.Reason = praxisconfig.ReasonProjectedCredentialsUnsupported
		held.Message = fmt.Sprintf("revision %s carries credentials and praxisConfig.supportsProjectedCredentials is false: the previous revision stays", revision)
		held.GatewayName, held.Namespace, held.ConfigMapName = gw.Name, gw.Namespace, name
		return held, nil
	}

	apply := corev1ac.ConfigMap(name, gw.Namespace).
		WithLabels(labels).
		WithAnnotations(annotations).
		WithData(map[string]string{
			envelope.DataKeyEnvelope: string(doc),
			envelope.DataKeyBare:     string(bare),
		})
	if err := r.client.Apply(ctx, apply, client.FieldOwner(r.opts.Producer), client.ForceOwnership); err != nil {
		r.metrics.publishes.WithLabelValues(publishFailed).Inc()
		return fail(ReasonPublishFailed, err.Error()), fmt.Errorf("apply ConfigMap %s: %w", key, err)
	}
	if adopt != nil {
		if err := r.dropLegacyMetadata(ctx, adopt); err != nil {
			return fail(ReasonPublishFailed, err.Error()), err
		}
		r.opts.Logger.Info("overlay_adopted", "network", network.Name, "gateway", gw.Name, "namespace", gw.Namespace,
			"config_map", name, "previous_producer", adopt.Labels[envelope.LabelManagedBy])
	}
	r.metrics.publishes.WithLabelValues(publishApplied).Inc()
	r.opts.Logger.Info("overlay_published", "network", network.Name, "gateway", gw.Name, "namespace", gw.Namespace,
		"config_map", name, "revision", revision, "candidates", len(overlay.Candidates))
	if apply.ResourceVersion != nil {
		st.ConfigMapResourceVersion = *apply.ResourceVersion
	}
	st.RenderedAt = keepRenderedAt(prev, revision, metav1.NewTime(renderedAt))
	st.Phase, st.Reason = v1alpha1.OverlayDistributed, ReasonPublished
	return st, nil
}

// overlayMetadata is the labels and annotations the contract puts on an
// overlay ConfigMap.
func (r *networkReconciler) overlayMetadata(network, gateway, revision string) (labels, annotations map[string]string) {
	return map[string]string{
			envelope.LabelManagedBy: r.opts.Producer,
			envelope.LabelGateway:   gateway,
			envelope.LabelNetwork:   network,
		}, map[string]string{
			envelope.AnnotationSchemaVersion: envelope.SchemaVersion,
			envelope.AnnotationRevision:      revision,
			envelope.AnnotationContentDigest: revision,
		}
}

// holds reports whether a managed ConfigMap already carries revision with
// the contract's metadata, checked on the data itself and not only the
// annotation, so that a ConfigMap edited by hand is put back. It returns
// the stored envelope's validation result.
func holds(cm *corev1.ConfigMap, labels, annotations map[string]string, scope envelope.Scope, revision string, bare []byte) (envelope.Result, bool) {
	if !hasAll(cm.Labels, labels) || !hasAll(cm.Annotations, annotations) || cm.Data[envelope.DataKeyBare] != string(bare) {
		return envelope.Result{}, false
	}
	res, err := envelope.Validate([]byte(cm.Data[envelope.DataKeyEnvelope]), envelope.Options{Expect: scope})
	return res, err == nil && res.Revision == revision
}

// claimedByAnother reports whether a managed ConfigMap's labels name
// another network or gateway, and which. A ConfigMap whose labels were
// removed by hand names nobody and is put back. The Grid operator's older
// labels count too.
func claimedByAnother(cm *corev1.ConfigMap, network, gateway string) (string, bool) {
	if cm.Annotations[AnnotationOrphaned] == "true" {
		return "", false // its network let it go
	}
	for _, keys := range [][2]string{
		{envelope.LabelNetwork, envelope.LabelGateway},
		{envelope.LegacyPrefix + "network", envelope.LegacyPrefix + "gateway"},
	} {
		n, g := cm.Labels[keys[0]], cm.Labels[keys[1]]
		if n != "" && g != "" && (n != network || g != gateway) {
			return fmt.Sprintf("network %s gateway %s", n, g), true
		}
	}
	return "", false
}

// adoptable reports whether a ConfigMap the agent does not manage is one
// the Grid operator wrote: the agent takes those over when it replaces
// that operator, and never one made by anybody else.
func adoptable(cm *corev1.ConfigMap) bool {
	if cm.Labels[envelope.LabelManagedBy] == envelope.LegacyProducer {
		return true
	}
	for k := range cm.Labels {
		if strings.HasPrefix(k, envelope.LegacyPrefix) {
			return true
		}
	}
	return false
}

// dropLegacyMetadata removes the Grid operator's older labels and
// annotations from an adopted ConfigMap: another field manager owns
// them, so the apply alone would leave them.
func (r *networkReconciler) dropLegacyMetadata(ctx context.Context, cm *corev1.ConfigMap) error {
	patch := map[string]map[string]map[string]any{"metadata": {"labels": {}, "annotations": {}}}
	for k := range cm.Labels {
		if strings.HasPrefix(k, envelope.LegacyPrefix) {
			patch["metadata"]["labels"][k] = nil
		}
	}
	for k := range cm.Annotations {
		if strings.HasPrefix(k, envelope.LegacyPrefix) {
			patch["metadata"]["annotations"][k] = nil
		}
	}
	if len(patch["metadata"]["labels"])+len(patch["metadata"]["annotations"]) == 0 {
		return nil
	}
	body, err := json.Marshal(patch)
	if err != nil {
		return err
	}
	target := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: cm.Name, Namespace: cm.Namespace}}
	if err := r.client.Patch(ctx, target, client.RawPatch(types.MergePatchType, body), client.FieldOwner(r.opts.Producer)); err != nil {
		return fmt.Errorf("remove the Grid operator's labels from ConfigMap %s/%s: %w", cm.Namespace, cm.Name, err)
	}
	return nil
}

// hasAll reports whether every entry of want is in got.
func hasAll(got, want map[string]string) bool {
	for k, v := range want {
		if got[k] != v {
			return false
		}
	}
	return true
}

// keepRenderedAt keeps the time a revision was first rendered: the same
// routing state rendered again is not news. renderedAt is used when the
// previous status does not know the revision.
func keepRenderedAt(prev v1alpha1.GatewayOverlayStatus, revision string, renderedAt metav1.Time) *metav1.Time {
	if prev.RenderedRevision == revision && prev.RenderedAt != nil {
		return prev.RenderedAt
	}
	t := metav1.NewTime(renderedAt.Truncate(time.Second))
	return &t
}

// overlaysFinalizer holds a deleted GridNetwork until its overlays are
// withdrawn.
const overlaysFinalizer = "grid.praxis.fast/overlays"

// AnnotationOrphaned marks an overlay ConfigMap whose gateway left its
// network, or whose network was deleted: it holds an authoritative empty
// overlay, so that its gateway routes nowhere, and another network may
// claim its name.
const AnnotationOrphaned = "grid.praxis.fast/orphaned"

// finalize withdraws the overlays of a network being deleted, then lets
// it go.
func (r *networkReconciler) finalize(ctx context.Context, network *v1alpha1.GridNetwork) error {
	if r.opts.Deliveries != nil {
		r.opts.Deliveries.SetGateways(network.Name, nil)
	}
	if !controllerutil.ContainsFinalizer(network, overlaysFinalizer) {
		return nil
	}
	// The gateways of the spec and those the status still remembers: an
	// overlay published just before a crash may not be in the status yet.
	targets := map[types.NamespacedName]bool{}
	for _, g := range network.Spec.ConsumerGateways {
		targets[types.NamespacedName{Namespace: g.Namespace, Name: g.Name}] = true
	}
	for _, s := range network.Status.OverlayStatus {
		targets[types.NamespacedName{Namespace: s.Namespace, Name: s.GatewayName}] = true
	}
	for gw := range targets {
		if err := r.withdraw(ctx, network.Name, gw.Name, gw.Namespace); err != nil {
			return err
		}
	}
	if r.opts.Membership != nil {
		r.opts.Membership.Forget(network.Name)
	}
	r.trust.forget(network.Name)
	orig := network.DeepCopy()
	controllerutil.RemoveFinalizer(network, overlaysFinalizer)
	if err := r.client.Patch(ctx, network, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil {
		return fmt.Errorf("remove finalizer from GridNetwork %s: %w", network.Name, err)
	}
	r.opts.Logger.Info("network_finalized", "network", network.Name, "gateways", len(targets))
	return nil
}

// withdraw ends the overlay of a gateway that left network: by default an
// authoritative empty overlay (the sidecar accepts it and the gateway's
// routes are withdrawn) marked orphaned; with DeleteOrphanedOverlays the
// ConfigMap is deleted (which the sidecar treats as an outage, keeping the
// last routes). Only a ConfigMap this agent manages for that network and
// gateway is touched.
func (r *networkReconciler) withdraw(ctx context.Context, network, gateway, namespace string) error {
	key := types.NamespacedName{Namespace: namespace, Name: envelope.ConfigMapName(network, gateway)}
	var cm corev1.ConfigMap
	switch err := r.api.Get(ctx, key, &cm); {
	case apierrors.IsNotFound(err):
		return nil
	case err != nil:
		return fmt.Errorf("get ConfigMap %s: %w", key, err)
	}
	if cm.Labels[envelope.LabelManagedBy] != r.opts.Producer || cm.Labels[envelope.LabelNetwork] != network || cm.Labels[envelope.LabelGateway] != gateway {
		return nil // not this gateway's: another network holds the name now
	}
	if r.opts.DeleteOrphanedOverlays {
		err := r.client.Delete(ctx, &cm, client.Preconditions{UID: &cm.UID})
		if err != nil && !apierrors.IsNotFound(err) {
			r.metrics.publishes.WithLabelValues(publishFailed).Inc()
			return fmt.Errorf("delete ConfigMap %s: %w", key, err)
		}
		r.metrics.publishes.WithLabelValues(publishDeleted).Inc()
		r.opts.Logger.Info("overlay_deleted", "network", network, "gateway", gateway, "namespace", namespace, "config_map", key.Name)
		return nil
	}
	// The scope the gateway's sidecar expects is the stored envelope's.
	stored, err := envelope.Validate([]byte(cm.Data[envelope.DataKeyEnvelope]), envelope.Options{})
	scope := stored.Scope
	if err != nil {
		scope = envelope.Scope{Network: network, Gateway: gateway, Namespace: namespace, LocalSite: network}
	}
	if err == nil && stored.CandidateCount == 0 && cm.Annotations[AnnotationOrphaned] == "true" {
		return nil // withdrawn already
	}
	empty := envelope.Overlay{Network: scope.Network, LocalSite: scope.LocalSite, Candidates: []envelope.Candidate{}}
	doc, revision, err := envelope.Build(empty, scope, envelope.Provenance{
		Producer: r.opts.Producer, ProducerVersion: r.opts.ProducerVersion, SourceName: network, RenderedAt: r.opts.Now(),
	})
	if err != nil {
		return err
	}
	bare, err := envelope.BareOverlay(empty)
	if err != nil {
		return err
	}
	labels, annotations := r.overlayMetadata(network, gateway, revision)
	annotations[AnnotationOrphaned] = "true"
	apply := corev1ac.ConfigMap(key.Name, namespace).WithLabels(labels).WithAnnotations(annotations).
		WithData(map[string]string{envelope.DataKeyEnvelope: string(doc), envelope.DataKeyBare: string(bare)})
	if err := r.client.Apply(ctx, apply, client.FieldOwner(r.opts.Producer), client.ForceOwnership); err != nil {
		r.metrics.publishes.WithLabelValues(publishFailed).Inc()
		return fmt.Errorf("withdraw ConfigMap %s: %w", key, err)
	}
	r.metrics.publishes.WithLabelValues(publishApplied).Inc()
	r.opts.Logger.Info("overlay_withdrawn", "network", network, "gateway", gateway, "namespace", namespace, "config_map", key.Name, "revision", revision)
	return nil
}

// writeStatus writes the network's status when it differs.
func (r *networkReconciler) writeStatus(ctx context.Context, network *v1alpha1.GridNetwork, overlays []v1alpha1.GatewayOverlayStatus,
	praxis []v1alpha1.PraxisConfigStatus, swim membershipOutcome, identity identityOutcome,
) error {
	next := network.Status.DeepCopy()
	next.ObservedGeneration = network.Generation
	next.OverlayStatus = overlays
	next.PraxisConfigStatus = praxis
	next.GatewayCount = int32(len(overlays))
	next.DistributedCount = 0
	next.Delivered = deliveredSummary(overlays)
	var failing []string
	for _, o := range overlays {
		if o.Phase == v1alpha1.OverlayDistributed {
			next.DistributedCount++
		} else {
			failing = append(failing, o.Namespace+"/"+o.GatewayName+": "+o.Reason)
		}
	}
	overlaysFailing := len(failing)
	for _, p := range praxis {
		if p.Phase != praxisRendered {
			failing = append(failing, p.Namespace+"/"+p.GatewayName+" praxisConfig: "+p.Reason)
		}
	}
	ready := metav1.Condition{Type: "Ready", Status: metav1.ConditionTrue, Reason: "AllOverlaysDistributed",
		Message: fmt.Sprintf("%d of %d gateway overlays distributed", next.DistributedCount, next.GatewayCount), ObservedGeneration: network.Generation}
	switch {
	case overlaysFailing > 0:
		ready.Status, ready.Reason = metav1.ConditionFalse, "OverlaysNotDistributed"
		ready.Message += "; " + joinLimited(failing, 5)
	case len(failing) > 0:
		ready.Status, ready.Reason = metav1.ConditionFalse, ReasonPraxisConfigsNotRendered
		ready.Message += "; " + joinLimited(failing, 5)
	}
	// A field this release does not act on is said, never silently
	// ignored: the network is not what it asks for.
	if unsupported := unsupportedFields(network); len(unsupported) > 0 {
		ready.Status, ready.Reason = metav1.ConditionFalse, ReasonFieldNotSupported
		ready.Message = "not supported by this release, so not in effect: " + strings.Join(unsupported, ", ") + "; " + ready.Message
	}
	// Membership that keeps the network from what it asks for is said in
	// Ready too: a key that does not load stops the reconcile, and seeds
	// without SWIM do nothing.
	switch {
	case swim.keyFailed:
		ready.Status, ready.Reason, ready.Message = metav1.ConditionFalse, swim.condition.reason, swim.condition.message
	case swim.condition.reason == ReasonSwimNotRunning && !swim.condition.ok:
		if ready.Reason != ReasonFieldNotSupported {
			ready.Status, ready.Reason, ready.Message = metav1.ConditionFalse, ReasonSwimNotRunning, swim.condition.message+"; "+ready.Message
		} else {
			ready.Message += "; " + swim.condition.message
		}
	}
	// A site identity that is configured and not in effect is said in
	// Ready: nothing it secures (probes of other sites) works.
	if !identity.condition.ok && ready.Status == metav1.ConditionTrue {
		ready.Status, ready.Reason, ready.Message = metav1.ConditionFalse, identity.condition.reason, identity.condition.message+"; "+ready.Message
	}
	identityCond := metav1.Condition{Type: ConditionSiteIdentity, Status: metav1.ConditionTrue, Reason: identity.condition.reason,
		Message: identity.condition.message, ObservedGeneration: network.Generation}
	if !identity.condition.ok {
		identityCond.Status = metav1.ConditionFalse
	}
	meta.SetStatusCondition(&next.Conditions, identityCond)
	next.Phase, next.ConnectedSites, next.RemoteProviderCount = networkPhase(swim)
	membershipCond := metav1.Condition{Type: ConditionMembership, Status: metav1.ConditionTrue, Reason: swim.condition.reason,
		Message: swim.condition.message, ObservedGeneration: network.Generation}
	if !swim.condition.ok {
		membershipCond.Status = metav1.ConditionFalse
	}
	meta.SetStatusCondition(&next.Conditions, membershipCond)
	before := meta.FindStatusCondition(network.Status.Conditions, "Ready")
	changed := before == nil || before.Status != ready.Status || before.Reason != ready.Reason
	meta.SetStatusCondition(&next.Conditions, ready)
	if equality.Semantic.DeepEqual(&network.Status, next) {
		return nil
	}
	orig := network.DeepCopy()
	network.Status = *next
	if err := r.client.Status().Patch(ctx, network, client.MergeFrom(orig)); err != nil {
		return fmt.Errorf("patch status of GridNetwork %s: %w", network.Name, err)
	}
	if changed {
		eventType := corev1.EventTypeNormal
		if ready.Status != metav1.ConditionTrue {
			eventType = corev1.EventTypeWarning
		}
		r.events.record(ctx, network, "GridNetwork", eventType, ready.Reason, ready.Message)
	}
	r.metrics.statusWrites.WithLabelValues("GridNetwork").Inc()
	return nil
}

// networkPhase is the network's membership phase and counts: Pending
// without SWIM, Initializing until a remote site is known (or while
// SWIM holds for a key), Active with at least one alive, Degraded when
// all known are suspect or dead.
func networkPhase(swim membershipOutcome) (v1alpha1.NetworkPhase, int32, int32) {
	v := swim.view
	if !v.Enabled {
		return v1alpha1.NetworkPending, 0, 0
	}
	connected, remote := int32(v.Connected()), int32(len(v.Providers))
	switch {
	case !v.Running || len(v.Sites) == 0:
		return v1alpha1.NetworkInitializing, connected, remote
	case connected > 0:
		return v1alpha1.NetworkActive, connected, remote
	default:
		return v1alpha1.NetworkDegraded, connected, remote
	}
}

// ReasonFieldNotSupported is the Ready condition's reason while a network
// sets fields this release does not act on.
const ReasonFieldNotSupported = "FieldNotSupported"

// AutoDiscoverSitesLabel asks for GridSites of discovered sites.
const AutoDiscoverSitesLabel = "grid.praxis.fast/auto-discover-sites"

// unsupportedFields lists the paths of the fields a network sets that
// this release does not act on yet (the embedded gateway's provider-hop
// endpoints, delegated mount reconciliation).
func unsupportedFields(n *v1alpha1.GridNetwork) []string {
	var out []string
	for _, g := range n.Spec.ConsumerGateways {
		at := fmt.Sprintf("spec.consumerGateways[%s/%s]", g.Namespace, g.Name)
		if len(g.ProviderHopEndpoints) > 0 {
			out = append(out, at+".providerHopEndpoints")
		}
		if pc := g.PraxisConfig; pc != nil && pc.MountReconciliation != nil && mountReconciliationEnabled(pc.MountReconciliation.Raw) {
			out = append(out, at+".praxisConfig.mountReconciliation.enabled")
		}
	}
	slices.Sort(out)
	return out
}

// ReasonPraxisConfigsNotRendered is the Ready condition's reason while
// every overlay is distributed and a gateway's generated Praxis config
// fails.
const ReasonPraxisConfigsNotRendered = "PraxisConfigsNotRendered"

// mountReconciliationEnabled reads praxisConfig.mountReconciliation's
// enabled switch (the object is kept as written: delegated mounts are not
// in this release).
func mountReconciliationEnabled(raw []byte) bool {
	var m struct {
		Enabled bool `json:"enabled"`
	}
	return json.Unmarshal(raw, &m) == nil && m.Enabled
}

// joinLimited joins at most n items and says how many more there are, so
// a condition message stays short.
func joinLimited(items []string, n int) string {
	out := ""
	for i, s := range items {
		if i == n {
			return out + fmt.Sprintf(" and %d more", len(items)-n)
		}
		if i > 0 {
			out += ", "
		}
		out += s
	}
	return out
}

// summariseDeliveries tells the delivery tracker the network's gateways
// and puts what their pods report in each overlay status.
func (r *networkReconciler) summariseDeliveries(network string, gws []render.Gateway, statuses []v1alpha1.GatewayOverlayStatus) {
	d := r.opts.Deliveries
	if d == nil {
		return
	}
	keys := make([]types.NamespacedName, 0, len(gws))
	for _, gw := range gws {
		keys = append(keys, types.NamespacedName{Namespace: gw.Namespace, Name: gw.Name})
	}
	d.SetGateways(network, keys)
	for i := range statuses {
		st := &statuses[i]
		var renderedAt time.Time
		if st.RenderedAt != nil {
			renderedAt = st.RenderedAt.Time
		}
		st.Delivery = d.Summary(st.Namespace, st.GatewayName, st.RenderedRevision, renderedAt)
	}
}

// deliveredSummary is "on revision/reporting" over every gateway, empty
// while no pod reports.
func deliveredSummary(overlays []v1alpha1.GatewayOverlayStatus) string {
	var on, reporting int32
	for _, o := range overlays {
		if o.Delivery != nil {
			on += o.Delivery.PodsOnRevision
			reporting += o.Delivery.ReportingPods
		}
	}
	if reporting == 0 {
		return ""
	}
	return fmt.Sprintf("%d/%d", on, reporting)
}
