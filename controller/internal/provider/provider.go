// Package provider is the InferenceProvider controller: each provider's
// health probe, phase and conditions (Accepted, Hosted, Ready, Draining,
// MetricsScraped), and the endpoint settings (TLS material, scraper
// tokens) its probes and the signals collector's scrapes use.
package provider

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/gridsync/gridsync/api/v1alpha1"
	"github.com/gridsync/gridsync/controller/internal/base"
	"github.com/gridsync/gridsync/controller/probe"
	"github.com/gridsync/gridsync/controller/providerpolicy"
	"github.com/gridsync/gridsync/trust/endpointtls"
)

// Reconciler is the InferenceProvider controller: it keeps each hosted
// provider's health probe running and reports its phase and conditions.
type Reconciler struct {
	*base.Env
	Endpoints *Endpoints
	// ScrapeStatus is each provider's last metrics scrape, for its
	// MetricsScraped condition.
	ScrapeStatus *ScrapeStatus
}

// Setup registers the controller with mgr; a provider sent on health is
// reconciled (its probe's health or its scrape outcome changed).
func (r *Reconciler) Setup(mgr ctrl.Manager, health <-chan event.GenericEvent) error {
	return ctrl.NewControllerManagedBy(mgr).
		Named("inferenceprovider").
		For(&v1alpha1.InferenceProvider{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		// Secrets are not watched (the agent only gets them): a rotated
		// or deleted one is noticed at the periodic resync.
		WatchesRawSource(source.Channel(health, &handler.EnqueueRequestForObject{})).
		Complete(r)
}

// Reconcile keeps the provider's health probe running and reports its
// phase.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	var p v1alpha1.InferenceProvider
	err := r.Client.Get(ctx, req.NamespacedName, &p)
	if apierrors.IsNotFound(err) || (err == nil && !p.DeletionTimestamp.IsZero()) {
		r.Prober.Remove(req.Name)
		r.Written.Providers.Forget(req.NamespacedName)
		return reconcile.Result{}, nil
	}
	if err != nil {
		return reconcile.Result{}, err
	}
	p.Status = *r.Written.Providers.Current(req.NamespacedName, p.ResourceVersion, &p.Status).DeepCopy()
	network, err := r.NetworkOf(ctx, &p)
	if err != nil {
		return reconcile.Result{}, err
	}
	hosted, why := r.Hosted(&p, network)
	var v providerpolicy.Verdict
	if hosted {
		if err := r.ensureProbe(&p); err != nil {
			return reconcile.Result{}, err
		}
		if v, err = r.Assess(&p, base.NewSecretReader(ctx, r.API)); err != nil {
			return reconcile.Result{}, err
		}
	} else {
		// Another site offers it: nothing here probes, scrapes or
		// routes it, and the chain's first check decides without
		// reading anything.
		r.Prober.Remove(p.Name)
		if v, err = providerpolicy.Assess(&p, providerpolicy.Options{Elsewhere: why}); err != nil {
			return reconcile.Result{}, err
		}
	}
	before := p.Status.Phase
	next := p.Status.DeepCopy()
	next.ObservedGeneration = p.Generation
	next.Phase, next.Reason, next.Message = v.Phase, v.Reason, v.Message
	meta.SetStatusCondition(&next.Conditions, base.AcceptedCondition(base.UnsupportedProviderFields(&p), p.Generation))
	if p.Spec.SiteSelector == nil {
		meta.RemoveStatusCondition(&next.Conditions, ConditionHosted)
	} else {
		hc := metav1.Condition{Type: ConditionHosted, Status: metav1.ConditionTrue, Reason: providerpolicy.ReasonSiteSelected, Message: why, ObservedGeneration: p.Generation}
		if !hosted {
			hc.Status, hc.Reason = metav1.ConditionFalse, providerpolicy.ReasonSiteNotSelected
		}
		meta.SetStatusCondition(&next.Conditions, hc)
	}
	ready := metav1.Condition{Type: "Ready", Status: metav1.ConditionFalse, Reason: v.Reason, Message: v.Message, ObservedGeneration: p.Generation}
	if v.Phase == v1alpha1.ProviderAvailable {
		ready.Status = metav1.ConditionTrue
	}
	meta.SetStatusCondition(&next.Conditions, ready)
	setDrainingCondition(&p, next)
	r.setScrapedCondition(&p, next)
	if equality.Semantic.DeepEqual(&p.Status, next) {
		return r.Opts.Resync(), nil
	}
	orig := p.DeepCopy()
	p.Status = *next
	if err := r.Client.Status().Patch(ctx, &p, client.MergeFrom(orig)); err != nil {
		return base.RetryConflicts(fmt.Errorf("patch status of InferenceProvider %s: %w", p.Name, err))
	}
	r.Written.Providers.Wrote(req.NamespacedName, p.ResourceVersion, p.Status.DeepCopy())
	r.Metrics.StatusWrites.WithLabelValues("InferenceProvider").Inc()
	if before != v.Phase {
		r.Opts.Logger.Info("provider_phase", "provider", p.Name, "phase", v.Phase, "reason", v.Reason)
		eventType := corev1.EventTypeNormal
		if v.Phase != v1alpha1.ProviderAvailable {
			eventType = corev1.EventTypeWarning
		}
		r.Events.Record(ctx, &p, "InferenceProvider", eventType, v.Reason, v.Message)
	}
	return r.Opts.Resync(), nil
}

// setDrainingCondition says so while the provider is drained; otherwise
// the condition is absent.
func setDrainingCondition(p *v1alpha1.InferenceProvider, next *v1alpha1.InferenceProviderStatus) {
	base.SetConditionWhile(&next.Conditions, base.Drained(p), metav1.Condition{Type: ConditionDraining, Status: metav1.ConditionTrue,
		Reason: providerpolicy.ReasonDrainRequested, ObservedGeneration: p.Generation,
		Message: "trafficPolicy.drain: every overlay lists the provider existing_only; sessions on it continue, new ones go elsewhere"})
}

// setScrapedCondition says whether the provider's metrics are scraped
// into the site's signals, for a provider with spec.metricsConfig once
// the collector has tried; otherwise the condition is absent.
func (r *Reconciler) setScrapedCondition(p *v1alpha1.InferenceProvider, next *v1alpha1.InferenceProviderStatus) {
	res, known := r.ScrapeStatus.get(p.Name)
	if p.Spec.MetricsConfig == nil || !known {
		meta.RemoveStatusCondition(&next.Conditions, ConditionMetricsScraped)
		return
	}
	c := metav1.Condition{Type: ConditionMetricsScraped, Status: metav1.ConditionFalse, Reason: res.Reason, Message: res.Message, ObservedGeneration: p.Generation}
	if res.OK {
		c.Status = metav1.ConditionTrue
	}
	meta.SetStatusCondition(&next.Conditions, c)
}

// ensureProbe starts, updates or stops the provider's health probe.
func (r *Reconciler) ensureProbe(p *v1alpha1.InferenceProvider) error {
	hc := p.Spec.HealthCheck
	if hc == nil {
		r.Prober.Remove(p.Name)
		return nil
	}
	ctx, err := r.Lifetime.Context()
	if err != nil {
		return err
	}
	url := hc.Endpoint
	if url == "" {
		url = p.Spec.Endpoint // no override: the provider's own endpoint
	}
	if hc.Path != "" {
		url = JoinPath(url, hc.Path)
	}
	target := probe.Target{URL: url, Origin: p.Spec.Endpoint, Period: HealthPeriod(hc), Timeout: ParseDuration(hc.Timeout)}
	// Externally managed credentials are not Grid's to send.
	if auth := p.Spec.Auth; auth != nil && auth.Strategy == v1alpha1.AuthStrategyBearerToken && auth.SecretRef != nil &&
		!auth.CredentialsManagedExternally && r.Opts.Watches(auth.SecretRef.Namespace) {
		target.Token = base.ReadToken(r.API, auth.SecretRef.Namespace, auth.SecretRef.Name, auth.SecretRef.Key, r.Opts.ProbeSecretSelector)
	}
	// A probe reads its material afresh: a rotation is used from the
	// next probe on.
	target.Endpoint = r.Endpoints.EndpointFor(p, FeatureHealthCheck, hc.TLS, hc.Auth,
		func(ctx context.Context) endpointtls.Source { return r.Endpoints.NewMaterialReader(ctx) })
	r.Prober.Ensure(ctx, p.Name, target)
	return nil
}

// defaultHealthPeriod is the interval of a health check that sets none.
const defaultHealthPeriod = 30 * time.Second

// HealthPeriod is the health check's interval: interval, or
// periodSeconds (its earlier name), or 30 s.
func HealthPeriod(hc *v1alpha1.HealthCheck) time.Duration {
	if d := ParseDuration(hc.Interval); d > 0 {
		return d
	}
	if hc.PeriodSeconds > 0 {
		return time.Duration(hc.PeriodSeconds) * time.Second
	}
	return defaultHealthPeriod
}

// JoinPath appends a path to a base URL, with one slash between them (the
// probes' and scrapes' path fields).
func JoinPath(base, path string) string {
	return strings.TrimSuffix(base, "/") + "/" + strings.TrimPrefix(path, "/")
}

// ParseDuration reads a duration the schema admitted; 0 when empty,
// unreadable or not positive (the default applies).
func ParseDuration(s string) time.Duration {
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		return 0
	}
	return d
}
