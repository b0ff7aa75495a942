package overlay

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gridsync/gridsync/api/v1alpha1"
	"github.com/gridsync/gridsync/controller/internal/base"
	"github.com/gridsync/gridsync/controller/render"
	"github.com/gridsync/gridsync/delivery/fold"
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

// publishOverlays is the publish stage: each gateway's overlay to its
// ConfigMap, then the overlays of the gateways removed from the network
// (those left in its previous status) withdrawn, or deleted when asked. It
// returns the gateways' overlay statuses; an error of one gateway is
// returned after the others were done.
// publishesAtOnce bounds the ConfigMap writes of one reconcile in flight.
const publishesAtOnce = 8

func (r *Reconciler) publishOverlays(ctx context.Context, network *v1alpha1.GridNetwork, overlays []gatewayOverlay) ([]v1alpha1.GatewayOverlayStatus, error) {
	previous := map[types.NamespacedName]v1alpha1.GatewayOverlayStatus{}
	for _, s := range network.Status.OverlayStatus {
		previous[types.NamespacedName{Namespace: s.Namespace, Name: s.GatewayName}] = s
	}
	// The gateways' ConfigMaps are written several at once: one after
	// another, the last of twenty gateways got a change a second after
	// the first. Results are taken in the gateways' order.
	type result struct {
		st  v1alpha1.GatewayOverlayStatus
		err error
	}
	results := make([]result, len(overlays))
	sem := make(chan struct{}, publishesAtOnce)
	var wg sync.WaitGroup
	for i, o := range overlays {
		key := types.NamespacedName{Namespace: o.gateway.Namespace, Name: o.gateway.Name}
		prev := previous[key]
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			st, err := r.publish(ctx, network, o.gateway, o.overlay, o.hold, o.renderTime, prev)
			results[i] = result{st, err}
		}()
	}
	wg.Wait()
	statuses := make([]v1alpha1.GatewayOverlayStatus, 0, len(overlays))
	var firstErr error
	for i, o := range overlays {
		if err := results[i].err; err != nil && firstErr == nil {
			firstErr = err
		}
		statuses = append(statuses, results[i].st)
		delete(previous, types.NamespacedName{Namespace: o.gateway.Namespace, Name: o.gateway.Name})
	}
	for _, prev := range previous {
		if err := r.withdraw(ctx, network.Name, prev.GatewayName, prev.Namespace); err != nil {
			statuses = append(statuses, prev) // kept, so that it is tried again
			if firstErr == nil {
				firstErr = err
			}
		}
	}
	return statuses, firstErr
}

// publish renders and publishes one gateway's overlay and returns its
// status entry. A failure is reported in the entry; the error is for a
// retry.
//
// hold keeps a revision from the gateway (one that carries credentials
// the gateway cannot inject yet, or one for a delegated Deployment the
// agent cannot read): the stored overlay stays, and the entry says why. renderTime is how long rendering
// the overlay took, for the render metric.
func (r *Reconciler) publish(ctx context.Context, network *v1alpha1.GridNetwork, gw render.Gateway, overlay envelope.Overlay, hold *overlayHold,
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
	if !r.Opts.Watches(gw.Namespace) {
		r.Metrics.Publishes.WithLabelValues(base.PublishRefused).Inc()
		return fail(ReasonNamespaceNotWatched, fmt.Sprintf("namespace %s is not one of the agent's namespaces", gw.Namespace)), nil
	}

	start := time.Now()
	scope := envelope.Scope{Network: network.Name, Gateway: gw.Name, Namespace: gw.Namespace, LocalSite: gw.Site}
	renderedAt := r.Opts.Now()
	doc, revision, err := envelope.Build(overlay, scope, envelope.Provenance{
		Producer: r.Opts.Producer, ProducerVersion: r.Opts.ProducerVersion,
		SourceName: network.Name, SourceUID: string(network.UID), SourceGeneration: network.Generation,
		RenderedAt: renderedAt,
	})
	var bare []byte
	if err == nil {
		bare, err = envelope.BareOverlay(overlay)
	}
	r.Metrics.RenderDuration.Observe((renderTime + time.Since(start)).Seconds())
	if err != nil {
		r.Metrics.Publishes.WithLabelValues(base.PublishRefused).Inc()
		return fail(ReasonRenderFailed, err.Error()), nil
	}
	st.SchemaVersion, st.RenderedRevision, st.ContentDigest = envelope.SchemaVersion, revision, revision
	st.CandidateCount = int32(len(overlay.Candidates))
	st.EnvelopeBytes = int64(len(doc))
	var readers fold.Readers
	if r.Opts.Deliveries != nil {
		readers = r.Opts.Deliveries.Readers(gw.Namespace, gw.Name)
	}
	maxBytes, bound := maxEnvelopeBytes(r.Opts.MaxOverlayBytes, readers)
	gwKey := types.NamespacedName{Namespace: gw.Namespace, Name: gw.Name}
	decision := formDecision{network: network.Name, setting: network.Spec.OverlayEncoding, readers: readers, envelopeBytes: len(doc)}
	r.decisions.set(gwKey, decision) // before the apply: a report arriving meanwhile is judged against it
	if len(doc) > maxBytes {
		decision.tooLarge = true
		r.decisions.set(gwKey, decision)
		r.Metrics.Publishes.WithLabelValues(base.PublishRefused).Inc()
		return fail(ReasonOverlayTooLarge, fmt.Sprintf("the envelope takes %d bytes, over %d, %s; narrow the providers' access policies or raise the bound", len(doc), maxBytes, bound)), nil
	}
	encoding, why := chooseEncoding(network.Spec.OverlayEncoding, readers, len(doc), r.Opts.CompressOverlaysAbove)
	var packed []byte
	switch encoding {
	case envelope.EncodingZstd:
		packed = envelope.Compress(doc)
		if len(packed) > maxConfigMapData {
			decision.tooLarge = true
			r.decisions.set(gwKey, decision)
			r.Metrics.Publishes.WithLabelValues(base.PublishRefused).Inc()
			return fail(ReasonOverlayTooLarge, fmt.Sprintf("the compressed overlay takes %d bytes, over the ConfigMap limit of %d; narrow the providers' access policies", len(packed), maxConfigMapData)), nil
		}
	default:
		if size := len(doc) + len(bare); size > maxConfigMapData {
			decision.tooLarge = true
			r.decisions.set(gwKey, decision)
			r.Metrics.Publishes.WithLabelValues(base.PublishRefused).Inc()
			return fail(ReasonOverlayTooLarge, fmt.Sprintf("the overlay's two copies take %d bytes, over the ConfigMap limit of %d (the plain form: %s); narrow the providers' access policies, or let the compressed form be used", size, maxConfigMapData, why)), nil
		}
	}

	labels, annotations := r.overlayMetadata(network.Name, gw.Name, revision, encoding)
	key := types.NamespacedName{Namespace: gw.Namespace, Name: name}
	// Read straight from the API server: the agent neither lists nor
	// watches ConfigMaps, it gets the ones it names.
	var current corev1.ConfigMap
	err = r.API.Get(ctx, key, &current)
	var adopt *corev1.ConfigMap // written by the Grid operator: taken over
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		return fail(ReasonPublishFailed, err.Error()), err
	case current.Labels[envelope.LabelManagedBy] != r.Opts.Producer && !adoptable(&current):
		r.Metrics.Publishes.WithLabelValues(base.PublishRefused).Inc()
		return fail(ReasonConfigMapNotOwned, fmt.Sprintf("ConfigMap %s exists and is not labelled %s=%s", key, envelope.LabelManagedBy, r.Opts.Producer)), nil
	default:
		if holder, ok := claimedByAnother(&current, network.Name, gw.Name); ok {
			// The first claim keeps the name; refusing here, every time,
			// is what keeps the two networks from rewriting it in turn.
			r.Metrics.Publishes.WithLabelValues(base.PublishRefused).Inc()
			return fail(ReasonConfigMapNameConflict, fmt.Sprintf("ConfigMap %s is held by %s; network %s gateway %s maps to the same name: rename one of the two",
				key, holder, network.Name, gw.Name)), nil
		}
		if current.Labels[envelope.LabelManagedBy] != r.Opts.Producer {
			adopt = &current
			break
		}
		if stored, held := holds(&current, labels, annotations, scope, revision, bare, maxBytes); held {
			r.Metrics.Publishes.WithLabelValues(base.PublishUnchanged).Inc()
			st.ConfigMapResourceVersion = current.ResourceVersion
			st.Encoding = encoding
			st.RenderedAt = keepRenderedAt(prev, revision, metav1.NewTime(stored.Provenance.RenderedAt))
			st.Phase, st.Reason = v1alpha1.OverlayDistributed, ReasonPublished
			return st, nil
		}
	}
	if hold != nil {
		// What the gateway holds stays: the previous entry's revision.
		r.Metrics.Publishes.WithLabelValues(base.PublishRefused).Inc()
		held := prev
		held.ObservedGeneration, held.Phase = network.Generation, v1alpha1.OverlayError
		held.Reason = hold.reason
		held.Message = fmt.Sprintf("revision %s %s: the previous revision stays", revision, hold.why)
		held.GatewayName, held.Namespace, held.ConfigMapName = gw.Name, gw.Namespace, name
		return held, nil
	}

	// Applied by the one field manager, a form replaces the other: the
	// keys of the form not applied are removed.
	apply := corev1ac.ConfigMap(name, gw.Namespace).
		WithLabels(labels).
		WithAnnotations(annotations)
	if encoding == envelope.EncodingZstd {
		apply.WithBinaryData(map[string][]byte{envelope.CompressedKey(envelope.DataKeyEnvelope): packed})
	} else {
		apply.WithData(map[string]string{
			envelope.DataKeyEnvelope: string(doc),
			envelope.DataKeyBare:     string(bare),
		})
	}
	if err := r.Client.Apply(ctx, apply, client.FieldOwner(r.Opts.Producer), client.ForceOwnership); err != nil {
		r.Metrics.Publishes.WithLabelValues(base.PublishFailed).Inc()
		return fail(ReasonPublishFailed, err.Error()), fmt.Errorf("apply ConfigMap %s: %w", key, err)
	}
	if encoding == envelope.EncodingZstd && (apply.Data[envelope.DataKeyEnvelope] != "" || apply.Data[envelope.DataKeyBare] != "") {
		// Plain copies another manager wrote (the Grid operator's, on a
		// ConfigMap taken over) would be read before the compressed form.
		if err := r.dropPlainCopies(ctx, key); err != nil {
			return fail(ReasonPublishFailed, err.Error()), err
		}
	}
	if adopt != nil {
		if err := r.dropLegacyMetadata(ctx, adopt); err != nil {
			return fail(ReasonPublishFailed, err.Error()), err
		}
		r.Opts.Logger.Info("overlay_adopted", "network", network.Name, "gateway", gw.Name, "namespace", gw.Namespace,
			"config_map", name, "previous_producer", adopt.Labels[envelope.LabelManagedBy])
	}
	r.Metrics.Publishes.WithLabelValues(base.PublishApplied).Inc()
	storedBytes := len(doc) + len(bare)
	if packed != nil {
		storedBytes = len(packed)
	}
	r.Opts.Logger.Info("overlay_published", "network", network.Name, "gateway", gw.Name, "namespace", gw.Namespace,
		"config_map", name, "revision", revision, "candidates", len(overlay.Candidates),
		"encoding", encoding, "envelope_bytes", len(doc), "stored_bytes", storedBytes, "encoding_why", why)
	if apply.ResourceVersion != nil {
		st.ConfigMapResourceVersion = *apply.ResourceVersion
	}
	st.Encoding = encoding
	st.RenderedAt = keepRenderedAt(prev, revision, metav1.NewTime(renderedAt))
	st.Phase, st.Reason = v1alpha1.OverlayDistributed, ReasonPublished
	return st, nil
}

// overlayMetadata is the labels and annotations the contract puts on an
// overlay ConfigMap, and the form it holds.
//
// The plain form carries the contract's annotations only, byte for byte
// what the Grid operator writes; the compressed form is marked.
func (r *Reconciler) overlayMetadata(network, gateway, revision, encoding string) (labels, annotations map[string]string) {
	annotations = map[string]string{
		envelope.AnnotationSchemaVersion: envelope.SchemaVersion,
		envelope.AnnotationRevision:      revision,
		envelope.AnnotationContentDigest: revision,
	}
	if encoding == envelope.EncodingZstd {
		annotations[envelope.AnnotationEncoding] = encoding
	}
	return r.gatewayLabels(network, gateway), annotations
}

// dropPlainCopies removes the plain copies from an overlay ConfigMap
// that now holds the compressed form.
func (r *Reconciler) dropPlainCopies(ctx context.Context, key types.NamespacedName) error {
	patch := []byte(`{"data":{"` + envelope.DataKeyEnvelope + `":null,"` + envelope.DataKeyBare + `":null}}`)
	target := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: key.Name, Namespace: key.Namespace}}
	if err := r.Client.Patch(ctx, target, client.RawPatch(types.MergePatchType, patch), client.FieldOwner(r.Opts.Producer)); err != nil {
		return fmt.Errorf("remove the plain copies from ConfigMap %s: %w", key, err)
	}
	return nil
}

// gatewayLabels are the labels of every ConfigMap the agent manages for a
// network's gateway (its overlay, generated configs, the requirements
// document, the config slot).
func (r *Reconciler) gatewayLabels(network, gateway string) map[string]string {
	return map[string]string{
		envelope.LabelManagedBy: r.Opts.Producer,
		envelope.LabelGateway:   gateway,
		envelope.LabelNetwork:   network,
	}
}

// holds reports whether a managed ConfigMap already carries revision with
// the contract's metadata, checked on the data itself and not only the
// annotation, so that a ConfigMap edited by hand is put back. It returns
// the stored envelope's validation result.
//
// The form is checked too: the plain form's bare copy must be the one
// rendered, and no compressed copy may be left beside it; the compressed
// form must be alone.
func holds(cm *corev1.ConfigMap, labels, annotations map[string]string, scope envelope.Scope, revision string, bare []byte, maxBytes int) (envelope.Result, bool) {
	if !hasAll(cm.Labels, labels) || !hasAll(cm.Annotations, annotations) {
		return envelope.Result{}, false
	}
	_, compressed := cm.BinaryData[envelope.CompressedKey(envelope.DataKeyEnvelope)]
	_, plain := cm.Data[envelope.DataKeyEnvelope]
	_, plainBare := cm.Data[envelope.DataKeyBare]
	switch annotations[envelope.AnnotationEncoding] {
	case envelope.EncodingZstd:
		if !compressed || plain || plainBare {
			return envelope.Result{}, false
		}
	default:
		if compressed || cm.Data[envelope.DataKeyBare] != string(bare) {
			return envelope.Result{}, false
		}
	}
	doc, _, err := storedEnvelope(cm, maxBytes)
	if err != nil {
		return envelope.Result{}, false
	}
	res, err := envelope.Validate(doc, envelope.Options{Expect: scope, MaxBytes: maxBytes})
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
func (r *Reconciler) dropLegacyMetadata(ctx context.Context, cm *corev1.ConfigMap) error {
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
	if err := r.Client.Patch(ctx, target, client.RawPatch(types.MergePatchType, body), client.FieldOwner(r.Opts.Producer)); err != nil {
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

// AnnotationOrphaned marks an overlay ConfigMap whose gateway left its
// network, or whose network was deleted: it holds an authoritative empty
// overlay, so that its gateway routes nowhere, and another network may
// claim its name.
const AnnotationOrphaned = "grid.praxis.fast/orphaned"

// withdraw ends the overlay of a gateway that left network: by default an
// authoritative empty overlay (the sidecar accepts it and the gateway's
// routes are withdrawn) marked orphaned; with DeleteOrphanedOverlays the
// ConfigMap is deleted (which the sidecar treats as an outage, keeping the
// last routes). Only a ConfigMap this agent manages for that network and
// gateway is touched.
func (r *Reconciler) withdraw(ctx context.Context, network, gateway, namespace string) error {
	r.decisions.forget(types.NamespacedName{Namespace: namespace, Name: gateway})
	if err := r.withdrawServing(ctx, network, gateway, namespace); err != nil {
		return err
	}
	key := types.NamespacedName{Namespace: namespace, Name: envelope.ConfigMapName(network, gateway)}
	var cm corev1.ConfigMap
	switch err := r.API.Get(ctx, key, &cm); {
	case apierrors.IsNotFound(err):
		return nil
	case err != nil:
		return fmt.Errorf("get ConfigMap %s: %w", key, err)
	}
	if cm.Labels[envelope.LabelManagedBy] != r.Opts.Producer || cm.Labels[envelope.LabelNetwork] != network || cm.Labels[envelope.LabelGateway] != gateway {
		return nil // not this gateway's: another network holds the name now
	}
	if r.Opts.DeleteOrphanedOverlays {
		err := r.Client.Delete(ctx, &cm, client.Preconditions{UID: &cm.UID})
		if err != nil && !apierrors.IsNotFound(err) {
			r.Metrics.Publishes.WithLabelValues(base.PublishFailed).Inc()
			return fmt.Errorf("delete ConfigMap %s: %w", key, err)
		}
		r.Metrics.Publishes.WithLabelValues(base.PublishDeleted).Inc()
		r.Opts.Logger.Info("overlay_deleted", "network", network, "gateway", gateway, "namespace", namespace, "config_map", key.Name)
		return nil
	}
	// The scope the gateway's sidecar expects is the stored envelope's.
	// Within the ceiling, not today's bound: an envelope published under
	// a larger bound must still name the scope its sidecars expect.
	doc, _, err := storedEnvelope(&cm, envelope.MaxBytesCeiling)
	var stored envelope.Result
	if err == nil {
		stored, err = envelope.Validate(doc, envelope.Options{MaxBytes: envelope.MaxBytesCeiling})
	}
	scope := stored.Scope
	if err != nil {
		scope = envelope.Scope{Network: network, Gateway: gateway, Namespace: namespace, LocalSite: network}
	}
	if err == nil && stored.CandidateCount == 0 && cm.Annotations[AnnotationOrphaned] == "true" {
		return nil // withdrawn already
	}
	empty := envelope.Overlay{Network: scope.Network, LocalSite: scope.LocalSite, Candidates: []envelope.Candidate{}}
	doc, revision, err := envelope.Build(empty, scope, envelope.Provenance{
		Producer: r.Opts.Producer, ProducerVersion: r.Opts.ProducerVersion, SourceName: network, RenderedAt: r.Opts.Now(),
	})
	if err != nil {
		return err
	}
	bare, err := envelope.BareOverlay(empty)
	if err != nil {
		return err
	}
	// The empty overlay is small: the plain form, which every consumer
	// reads (the compressed form's key is removed by the apply).
	labels, annotations := r.overlayMetadata(network, gateway, revision, envelope.EncodingPlain)
	annotations[AnnotationOrphaned] = "true"
	apply := corev1ac.ConfigMap(key.Name, namespace).WithLabels(labels).WithAnnotations(annotations).
		WithData(map[string]string{envelope.DataKeyEnvelope: string(doc), envelope.DataKeyBare: string(bare)})
	if err := r.Client.Apply(ctx, apply, client.FieldOwner(r.Opts.Producer), client.ForceOwnership); err != nil {
		r.Metrics.Publishes.WithLabelValues(base.PublishFailed).Inc()
		return fmt.Errorf("withdraw ConfigMap %s: %w", key, err)
	}
	r.Metrics.Publishes.WithLabelValues(base.PublishApplied).Inc()
	r.Opts.Logger.Info("overlay_withdrawn", "network", network, "gateway", gateway, "namespace", namespace, "config_map", key.Name, "revision", revision)
	return nil
}
