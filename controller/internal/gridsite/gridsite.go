// Package gridsite is the GridSite controller. It owns every GridSite's
// status: it probes the site's gateway over mutual TLS and sets the phase
// the outcome leads to (package sitetrust). Discovery (the network
// reconciler) writes only the spec's network and gateway address. Only an
// Active site's providers reach overlays.
package gridsite

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/gridsync/gridsync/api/v1alpha1"
	"github.com/gridsync/gridsync/controller/internal/base"
	"github.com/gridsync/gridsync/controller/internal/trustmaterial"
	"github.com/gridsync/gridsync/gossip/sites"
	"github.com/gridsync/gridsync/trust/sitetrust"
)

// siteProbeConcurrency is how many sites are probed at once: probes wait
// on the network, not the CPU.
const siteProbeConcurrency = 16

// lastProbeRefresh is how often lastProbeTime is written while nothing
// else of a site's status changes: a status write per site per probe would
// cost the API server more than it tells.
const lastProbeRefresh = 5 * time.Minute

// maxStatusMessage bounds a GridSite's status message.
const maxStatusMessage = 1024

// Reconciler is the GridSite controller; Trust is the networks' trust
// material its probes use.
type Reconciler struct {
	*base.Env
	Trust *trustmaterial.Cache
	mu    sync.Mutex
	memo  map[string]probeMemo // by GridSite name
}

// probeMemo is the last probe of a site and what it was made with: a
// probe is repeated when its inputs change or the period has passed.
type probeMemo struct {
	inputs  string
	at      time.Time
	outcome sitetrust.Outcome
}

// Setup registers the controller with mgr; a GridSite sent on reprobe is
// reconciled (and probed, when its inputs changed).
func (r *Reconciler) Setup(mgr ctrl.Manager, reprobe <-chan event.GenericEvent) error {
	r.memo = map[string]probeMemo{}
	return ctrl.NewControllerManagedBy(mgr).
		Named("gridsite").
		For(&v1alpha1.GridSite{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		WatchesRawSource(source.Channel(reprobe, &handler.EnqueueRequestForObject{})).
		WithOptions(controller.Options{MaxConcurrentReconciles: siteProbeConcurrency}).
		Complete(r)
}

func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	var gs v1alpha1.GridSite
	if err := r.Client.Get(ctx, req.NamespacedName, &gs); err != nil {
		if apierrors.IsNotFound(err) {
			r.forget(req.Name)
			r.Written.Sites.Forget(req.NamespacedName)
			return reconcile.Result{}, nil
		}
		return reconcile.Result{}, err
	}
	gs.Status = *r.Written.Sites.Current(req.NamespacedName, gs.ResourceVersion, &gs.Status).DeepCopy()
	site := base.SiteOf(&gs)
	var network v1alpha1.GridNetwork
	netErr := r.Client.Get(ctx, types.NamespacedName{Name: gs.Spec.GridNetworkRef}, &network)
	if netErr != nil && !apierrors.IsNotFound(netErr) {
		return reconcile.Result{}, netErr
	}
	var gossip *sites.Site
	if r.Opts.Membership != nil && netErr == nil {
		view := r.Opts.Membership.View(network.Name)
		for i := range view.Sites {
			if view.Sites[i].Name == site {
				gossip = &view.Sites[i]
			}
		}
	}
	now := r.Opts.Now()
	var outcome sitetrust.Outcome
	var next v1alpha1.SitePhase
	probed := false
	evicted := netErr == nil && r.Opts.TrustBundles.Bundle(network.Name).Evicted(site)
	switch {
	case evicted:
		// The issuer's signed word, not a probe: no connection is made to
		// an evicted site, and it stays out until the eviction is lifted.
		outcome = sitetrust.Outcome{Kind: sitetrust.TrustFailure, Reason: sitetrust.ReasonSiteEvicted,
			Message: "the network's issuer evicted the site (spec.tls.siteCertificate.evictedSites at the issuer): its records, connections and providers are refused"}
		next = sitetrust.PhaseEvicted
		r.forget(gs.Name)
	case gossip != nil && gossip.State == sites.SiteLeft:
		// A clean leave: withdrawn as any site that is not Active, and
		// probed again once it is alive.
		outcome = sitetrust.Outcome{Kind: sitetrust.ConnectionFailure, Reason: ReasonSiteLeft,
			Message: "the site left membership (its agent stopped or it left the network)"}
		next = sitetrust.PhaseLeft
		r.forget(gs.Name)
	default:
		outcome, probed = r.evaluate(ctx, &gs, &network, netErr, site, now)
		current := gs.Status.Phase
		if current == sitetrust.PhaseEvicted {
			// Lifted: judged afresh, routable again only by a probe.
			current = sitetrust.PhaseConnecting
		}
		next = sitetrust.Next(current, outcome)
	}
	reason, message := outcome.Reason, outcome.Message

	// What gossip says is a diagnostic, never trust: it changes no phase.
	// A gossiped PEM with no certificate in it is the reason whatever the
	// probe found, as the reference records it (TrustMaterialInvalid in
	// status.reason); the probe's own reason stays in Connected and the
	// message. Only the issuer's eviction says more.
	certPEM := gs.Status.PublicCertPem
	if gossip != nil {
		certPEM = gossip.CertPEM
		if gossip.GatewayInvalid {
			message += "; the site advertises a gateway address that is ambiguous or malformed (not host:port read one way): it is not used"
		}
		if gossip.CertInvalid {
			message += "; the gossiped certificate PEM has no certificate in it"
			if !evicted {
				reason = sitetrust.ReasonTrustMaterialInvalid
			}
		}
	}
	if outcome.Kind == sitetrust.Verified && !base.SpiffeMode(&network) && certPEM != "" {
		if advertised, err := sitetrust.ParseCertificates([]byte(certPEM)); err == nil && !sitetrust.Pinned(base.PinsOf(&gs), advertised[0].Raw) {
			reason = sitetrust.ReasonAdvertisedCertMismatch
			message += "; the gossiped certificate copy matches no pin (a diagnostic: the live leaf was verified, and gossip is not trust material)"
		}
	}
	conds := siteConditions(&gs, netErr, gossip, outcome, next, reason, message)
	if err := r.writeStatus(ctx, &gs, site, next, reason, message, certPEM, gossip, conds, probed, now); err != nil {
		return base.RetryConflicts(err)
	}
	// The next probe comes within the period, whatever the jitter: a
	// demotion is seen within one period of the gateway's change.
	interval := r.Opts.SiteProbeInterval
	return reconcile.Result{RequeueAfter: interval*8/10 + rand.N(interval/10+1)}, nil
}

// evaluate probes the site when its inputs changed or the period passed,
// and otherwise returns the last outcome; probed says which.
func (r *Reconciler) evaluate(ctx context.Context, gs *v1alpha1.GridSite, network *v1alpha1.GridNetwork, netErr error, site string, now time.Time) (sitetrust.Outcome, bool) {
	ep, err := base.GatewayEndpointOf(gs.Spec.GatewayEndpoint)
	switch {
	case errors.Is(err, base.ErrNoGatewayAddress):
		return sitetrust.Outcome{Kind: sitetrust.AddressMissing, Reason: sitetrust.ReasonGatewayAddressMissing,
			Message: "the site has no gateway address (spec.gatewayEndpoint.address): it advertises none yet, or its gateway Service has no load balancer address"}, false
	case err != nil:
		// Never dialled: an endpoint that does not read one way is no
		// endpoint, and a routable site whose endpoint became one is
		// withdrawn.
		return sitetrust.Outcome{Kind: sitetrust.TrustFailure, Reason: sitetrust.ReasonGatewayEndpointInvalid, Message: err.Error()}, false
	}
	addr, serverName := ep.Address(), strings.TrimSpace(ep.ServerName)
	if netErr != nil {
		return sitetrust.Outcome{Kind: sitetrust.TrustFailure, Reason: sitetrust.ReasonTrustMaterialMissing,
			Message: fmt.Sprintf("GridNetwork %s (spec.gridNetworkRef) does not exist", gs.Spec.GridNetworkRef)}, false
	}
	// The probe dials under the destination rule, and an address learnt
	// from gossip gets outcomes that do not map what answers there.
	dial := r.Opts.ProbeDestinations.DialerAlso(r.Opts.SiteProbeTimeout, ep.InScope)
	learnt := r.gossipedAddress(gs.Spec.GridNetworkRef, site) == addr
	told := func(o sitetrust.Outcome) sitetrust.Outcome {
		if !learnt {
			return o
		}
		if o.Kind != sitetrust.Verified {
			r.Opts.Logger.Debug("site_probe_failed", "site", site, "address", addr, "reason", o.Reason, "message", o.Message)
		}
		return o.Opaque(addr)
	}
	if ep.Plaintext {
		return r.probeOnce(gs.Name, "plaintext\x00"+addr+"\x00"+string(ep.Scope), now, func() sitetrust.Outcome {
			return told(sitetrust.PlaintextProbe(ctx, addr, r.Opts.SiteProbeTimeout, dial))
		})
	}
	tm := r.Trust.Get(ctx, network)
	spiffe := base.SpiffeMode(network)
	var missing []string
	for _, p := range []*trustmaterial.Problem{tm.RootsProblem, tm.ClientProblem} {
		switch {
		case p == nil:
		case p.Invalid:
			return sitetrust.Outcome{Kind: sitetrust.TrustFailure, Reason: sitetrust.ReasonTrustMaterialInvalid, Message: p.Message}, false
		default:
			missing = append(missing, p.Message)
		}
	}
	pins := base.PinsOf(gs)
	switch {
	case spiffe && serverName == "":
		serverName = sitetrust.DNSName(site)
	case !spiffe && serverName == "":
		missing = append(missing, "spec.gatewayEndpoint.tls.serverName is not set")
	}
	if !spiffe && len(pins) == 0 {
		missing = append(missing, "spec.trust has no pin (canonicalFingerprints or certFingerprint)")
	}
	if len(missing) > 0 {
		return sitetrust.Outcome{Kind: sitetrust.TrustFailure, Reason: sitetrust.ReasonTrustMaterialMissing,
			Message: strings.Join(missing, "; ") + " (Plaintext is never a fallback for an incomplete Mutual configuration)"}, false
	}
	inputs := strings.Join([]string{"mutual", addr, string(ep.Scope), serverName, strings.Join(pins, ","), fmt.Sprint(spiffe, tm.Version), site}, "\x00")
	return r.probeOnce(gs.Name, inputs, now, func() sitetrust.Outcome {
		return told(sitetrust.Probe(ctx, sitetrust.Target{
			Address: addr, ServerName: serverName, Roots: tm.Roots, Client: *tm.Client,
			Pins: pins, SPIFFE: spiffe, Site: site, Timeout: r.Opts.SiteProbeTimeout, Dial: dial,
			Revoked: func(leaf *x509.Certificate) bool {
				return r.Opts.TrustBundles.Refuses(network.Name, site, leaf.NotBefore)
			},
		}))
	})
}

// gossipedAddress is the gateway address site gossips in network, "" when
// none is known.
func (r *Reconciler) gossipedAddress(network, site string) string {
	if r.Opts.Membership == nil {
		return ""
	}
	for _, s := range r.Opts.Membership.View(network).Sites {
		if s.Name == site {
			return s.GatewayAddress
		}
	}
	return ""
}

// probeOnce runs probe unless the same inputs were probed within half a
// period (a reconcile for gossip alone, which changes no input of the
// probe, does not probe again).
func (r *Reconciler) probeOnce(name, inputs string, now time.Time, probe func() sitetrust.Outcome) (sitetrust.Outcome, bool) {
	r.mu.Lock()
	m, ok := r.memo[name]
	r.mu.Unlock()
	if ok && m.inputs == inputs && now.Sub(m.at) < r.Opts.SiteProbeInterval/2 {
		return m.outcome, false
	}
	start := time.Now()
	o := probe()
	took := time.Since(start).Seconds()
	r.Metrics.ProbeDuration.Observe(took)
	r.Metrics.GatewayProbeDuration.Observe(took)
	r.Metrics.SiteProbes.WithLabelValues(o.Reason).Inc()
	tlsMode := "mtls"
	if strings.HasPrefix(inputs, "plaintext\x00") {
		tlsMode = "plaintext"
	}
	r.Metrics.GatewayProbes.WithLabelValues(o.Reason, tlsMode).Inc()
	r.mu.Lock()
	r.memo[name] = probeMemo{inputs: inputs, at: now, outcome: o}
	r.mu.Unlock()
	return o, true
}

func (r *Reconciler) forget(name string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.memo, name)
}

// writeStatus patches the GridSite's status when it changed; lastProbeTime
// alone is refreshed every lastProbeRefresh.
func (r *Reconciler) writeStatus(ctx context.Context, gs *v1alpha1.GridSite, site string, phase v1alpha1.SitePhase, reason, message, certPEM string,
	gossip *sites.Site, conds []metav1.Condition, probed bool, now time.Time,
) error {
	if len(message) > maxStatusMessage {
		message = message[:maxStatusMessage-3] + "..."
	}
	next := gs.Status.DeepCopy()
	previous := next.Phase
	next.Phase, next.Reason, next.Message, next.PublicCertPem = phase, reason, message, certPEM
	next.ObservedGeneration = gs.Generation
	if gossip != nil {
		// What the site advertises: providers in the network are its
		// inference capability (gridsync sites offer no agent tools).
		next.Capabilities = &v1alpha1.SiteCapabilities{Inference: gossip.Inference}
	}
	for _, c := range conds {
		meta.SetStatusCondition(&next.Conditions, c)
	}
	stamp := metaTime(now)
	if previous != phase {
		next.LastTransitionTime = &stamp
	}
	same := equality.Semantic.DeepEqual(&gs.Status, next)
	if probed && (!same || next.LastProbeTime == nil || now.Sub(next.LastProbeTime.Time) >= lastProbeRefresh) {
		next.LastProbeTime = &stamp
		same = false
	}
	if same {
		return nil
	}
	orig := gs.DeepCopy()
	gs.Status = *next
	if err := r.Client.Status().Patch(ctx, gs, client.MergeFrom(orig)); err != nil {
		return fmt.Errorf("patch status of GridSite %s: %w", gs.Name, err)
	}
	r.Written.Sites.Wrote(client.ObjectKeyFromObject(gs), gs.ResourceVersion, gs.Status.DeepCopy())
	r.Metrics.StatusWrites.WithLabelValues("GridSite").Inc()
	if previous != phase {
		from := string(previous)
		if from == "" {
			from = string(sitetrust.PhasePending) // a new site starts there, as upstream's do
		}
		r.Metrics.PhaseTransitions.WithLabelValues(from, string(phase), reason).Inc()
		r.Opts.Logger.Info("gridsite_phase", "gridsite", gs.Name, "network", gs.Spec.GridNetworkRef, "site", site,
			"from", string(previous), "phase", string(phase), "reason", reason)
		eventType := corev1.EventTypeNormal
		if phase != sitetrust.PhaseActive && (previous == sitetrust.PhaseActive || phase == sitetrust.PhaseUnreachable) {
			eventType = corev1.EventTypeWarning
		}
		r.Events.Record(ctx, gs, "GridSite", eventType, reason, fmt.Sprintf("%s → %s: %s", orDash(previous), phase, message))
	}
	return nil
}

func metaTime(t time.Time) metav1.Time { return metav1.NewTime(t.Truncate(time.Second)) }

func orDash(p v1alpha1.SitePhase) string {
	if p == "" {
		return "-"
	}
	return string(p)
}

// ReprobeSites has every GridSite of a network reconciled: its trust
// material or its gossip changed. A site whose probe inputs did not change
// is not probed again before its period.
func ReprobeSites(ctx context.Context, c *base.Env, network string, out chan<- event.GenericEvent) {
	sites, err := c.GridSitesOf(ctx, network)
	if err != nil {
		return
	}
	for i := range sites {
		gs := &v1alpha1.GridSite{}
		gs.Name = sites[i].Name
		c.Lifetime.Send(out, event.GenericEvent{Object: gs})
	}
}

// Condition types and reasons of a GridSite, as kubectl wait and GitOps
// health checks read them.
const (
	ConditionDiscovered = "Discovered"
	ConditionConnected  = "Connected"
	ReasonSiteLeft      = "SiteLeft"
	ReasonNotDiscovered = "NotDiscovered"
	ReasonNetworkAbsent = "GridNetworkNotFound"
)

// siteConditions are the GridSite's Accepted (the spec is usable),
// Discovered (membership holds the site), Connected (the last probe
// verified its gateway) and Ready (Active: routable) conditions.
func siteConditions(gs *v1alpha1.GridSite, netErr error, gossip *sites.Site, o sitetrust.Outcome, phase v1alpha1.SitePhase, reason, message string) []metav1.Condition {
	gen := gs.Generation
	var unsupported []string
	if gs.Spec.SovereigntyZone != "" {
		unsupported = append(unsupported, "spec.sovereigntyZone")
	}
	accepted := base.AcceptedCondition(unsupported, gen)
	if netErr != nil {
		accepted.Status, accepted.Reason = metav1.ConditionFalse, ReasonNetworkAbsent
		accepted.Message = fmt.Sprintf("GridNetwork %s (spec.gridNetworkRef) does not exist", gs.Spec.GridNetworkRef)
	}
	discovered := metav1.Condition{Type: ConditionDiscovered, Status: metav1.ConditionFalse, Reason: ReasonNotDiscovered,
		Message: "membership holds no record of this site in the network", ObservedGeneration: gen}
	if gossip != nil {
		discovered.Status, discovered.Reason = metav1.ConditionTrue, "Site"+string(gossip.State)
		discovered.Message = fmt.Sprintf("membership holds the site (%s)", gossip.State)
		if gossip.State == sites.SiteLeft {
			discovered.Status = metav1.ConditionFalse
		}
	}
	connected := metav1.Condition{Type: ConditionConnected, Status: metav1.ConditionFalse, Reason: o.Reason, Message: o.Message, ObservedGeneration: gen}
	if o.Kind == sitetrust.Verified {
		connected.Status = metav1.ConditionTrue
	}
	ready := metav1.Condition{Type: "Ready", Status: metav1.ConditionFalse, Reason: reason, Message: message, ObservedGeneration: gen}
	if phase == sitetrust.PhaseActive {
		ready.Status = metav1.ConditionTrue
	}
	for _, c := range []*metav1.Condition{&connected, &ready} {
		if len(c.Message) > maxStatusMessage {
			c.Message = c.Message[:maxStatusMessage-3] + "..."
		}
		if c.Reason == "" {
			c.Reason = "Unknown"
		}
	}
	return []metav1.Condition{accepted, discovered, connected, ready}
}
