package controller

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
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
	"github.com/gridsync/gridsync/gossip/sites"
	"github.com/gridsync/gridsync/trust/sitetrust"
)

// The GridSite controller owns every GridSite's status: it probes the
// site's gateway over mutual TLS and sets the phase the outcome leads to
// (package sitetrust). Discovery (the network reconciler) writes only the
// spec's network and gateway address. Only an Active site's providers
// reach overlays.

// siteProbeConcurrency is how many sites are probed at once: probes wait
// on the network, not the CPU.
const siteProbeConcurrency = 16

// lastProbeRefresh is how often lastProbeTime is written while nothing
// else of a site's status changes: a status write per site per probe would
// cost the API server more than it tells.
const lastProbeRefresh = 5 * time.Minute

// maxStatusMessage bounds a GridSite's status message.
const maxStatusMessage = 1024

type siteReconciler struct {
	*common
	mu   sync.Mutex
	memo map[string]probeMemo // by GridSite name
}

// probeMemo is the last probe of a site and what it was made with: a
// probe is repeated when its inputs change or the period has passed.
type probeMemo struct {
	inputs  string
	at      time.Time
	outcome sitetrust.Outcome
}

func (r *siteReconciler) setup(mgr ctrl.Manager, reprobe <-chan event.GenericEvent) error {
	r.memo = map[string]probeMemo{}
	return ctrl.NewControllerManagedBy(mgr).
		Named("gridsite").
		For(&v1alpha1.GridSite{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		WatchesRawSource(source.Channel(reprobe, &handler.EnqueueRequestForObject{})).
		WithOptions(controller.Options{MaxConcurrentReconciles: siteProbeConcurrency}).
		Complete(r)
}

// siteOf is the site a GridSite stands for: its grid.praxis.fast/site
// label (discovered sites carry it), else its name without the
// "<network>-" prefix, else its name.
func siteOf(gs *v1alpha1.GridSite) string {
	if s := gs.Labels[v1alpha1.SiteLabel]; s != "" {
		return s
	}
	if p := gs.Spec.GridNetworkRef + "-"; strings.HasPrefix(gs.Name, p) && len(gs.Name) > len(p) {
		return gs.Name[len(p):]
	}
	return gs.Name
}

func (r *siteReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	var gs v1alpha1.GridSite
	if err := r.client.Get(ctx, req.NamespacedName, &gs); err != nil {
		if apierrors.IsNotFound(err) {
			r.forget(req.Name)
			r.written.sites.forget(req.NamespacedName)
			return reconcile.Result{}, nil
		}
		return reconcile.Result{}, err
	}
	gs.Status = *r.written.sites.current(req.NamespacedName, gs.ResourceVersion, &gs.Status).DeepCopy()
	site := siteOf(&gs)
	var network v1alpha1.GridNetwork
	netErr := r.client.Get(ctx, types.NamespacedName{Name: gs.Spec.GridNetworkRef}, &network)
	if netErr != nil && !apierrors.IsNotFound(netErr) {
		return reconcile.Result{}, netErr
	}
	var gossip *sites.Site
	if r.opts.Membership != nil && netErr == nil {
		view := r.opts.Membership.View(network.Name)
		for i := range view.Sites {
			if view.Sites[i].Name == site {
				gossip = &view.Sites[i]
			}
		}
	}
	now := r.opts.Now()
	var outcome sitetrust.Outcome
	var next v1alpha1.SitePhase
	probed := false
	if gossip != nil && gossip.State == sites.SiteLeft {
		// A clean leave: withdrawn as any site that is not Active, and
		// probed again once it is alive.
		outcome = sitetrust.Outcome{Kind: sitetrust.ConnectionFailure, Reason: ReasonSiteLeft,
			Message: "the site left membership (its agent stopped or it left the network)"}
		next = sitetrust.PhaseLeft
		r.forget(gs.Name)
	} else {
		outcome, probed = r.evaluate(ctx, &gs, &network, netErr, site, now)
		next = sitetrust.Next(gs.Status.Phase, outcome)
	}
	reason, message := outcome.Reason, outcome.Message

	// What gossip says is a diagnostic, never trust: it changes no phase.
	certPEM := gs.Status.PublicCertPem
	if gossip != nil {
		certPEM = gossip.CertPEM
		if gossip.CertInvalid {
			message += "; the gossiped certificate PEM has no certificate in it"
			if outcome.Kind == sitetrust.Verified {
				reason = sitetrust.ReasonTrustMaterialInvalid
			}
		}
	}
	if outcome.Kind == sitetrust.Verified && !spiffeMode(&network) && certPEM != "" {
		if advertised, err := sitetrust.ParseCertificates([]byte(certPEM)); err == nil && !sitetrust.Pinned(pinsOf(&gs), advertised[0].Raw) {
			reason = sitetrust.ReasonAdvertisedCertMismatch
			message += "; the gossiped certificate copy matches no pin (a diagnostic: the live leaf was verified, and gossip is not trust material)"
		}
	}
	conds := siteConditions(&gs, netErr, gossip, outcome, next, reason, message)
	if err := r.writeStatus(ctx, &gs, site, next, reason, message, certPEM, gossip, conds, probed, now); err != nil {
		return retryConflicts(err)
	}
	// The next probe comes within the period, whatever the jitter: a
	// demotion is seen within one period of the gateway's change.
	interval := r.opts.SiteProbeInterval
	return reconcile.Result{RequeueAfter: interval*8/10 + rand.N(interval/10+1)}, nil
}

func spiffeMode(n *v1alpha1.GridNetwork) bool {
	return n.Spec.PeerTrust != nil && n.Spec.PeerTrust.Mode == "spiffe"
}

func pinsOf(gs *v1alpha1.GridSite) []string {
	if gs.Spec.Trust == nil {
		return nil
	}
	if fp := gs.Spec.Trust.CertFingerprint; fp != "" {
		return []string{fp}
	}
	return gs.Spec.Trust.CanonicalFingerprints
}

// evaluate probes the site when its inputs changed or the period passed,
// and otherwise returns the last outcome; probed says which.
func (r *siteReconciler) evaluate(ctx context.Context, gs *v1alpha1.GridSite, network *v1alpha1.GridNetwork, netErr error, site string, now time.Time) (sitetrust.Outcome, bool) {
	var addr, mode, serverName string
	mode = "Mutual"
	if ep := gs.Spec.GatewayEndpoint; ep != nil {
		addr = strings.TrimSpace(ep.Address)
		if ep.TLS != nil {
			if ep.TLS.Mode != "" {
				mode = ep.TLS.Mode
			}
			serverName = strings.TrimSpace(ep.TLS.ServerName)
		}
	}
	if addr == "" {
		return sitetrust.Outcome{Kind: sitetrust.AddressMissing, Reason: sitetrust.ReasonGatewayAddressMissing,
			Message: "the site has no gateway address (spec.gatewayEndpoint.address): it advertises none yet, or its gateway Service has no load balancer address"}, false
	}
	if netErr != nil {
		return sitetrust.Outcome{Kind: sitetrust.TrustFailure, Reason: sitetrust.ReasonTrustMaterialMissing,
			Message: fmt.Sprintf("GridNetwork %s (spec.gridNetworkRef) does not exist", gs.Spec.GridNetworkRef)}, false
	}
	// The probe dials under the destination rule, and an address learnt
	// from gossip gets outcomes that do not map what answers there.
	dial := r.opts.ProbeDestinations.Dialer(r.opts.SiteProbeTimeout)
	learnt := r.gossipedAddress(gs.Spec.GridNetworkRef, site) == addr
	told := func(o sitetrust.Outcome) sitetrust.Outcome {
		if !learnt {
			return o
		}
		if o.Kind != sitetrust.Verified {
			r.opts.Logger.Debug("site_probe_failed", "site", site, "address", addr, "reason", o.Reason, "message", o.Message)
		}
		return o.Opaque(addr)
	}
	if mode == "Plaintext" {
		return r.probeOnce(gs.Name, "plaintext\x00"+addr, now, func() sitetrust.Outcome {
			return told(sitetrust.PlaintextProbe(ctx, addr, r.opts.SiteProbeTimeout, dial))
		})
	}
	tm := r.trust.get(ctx, network)
	spiffe := spiffeMode(network)
	var missing []string
	for _, p := range []*trustProblem{tm.rootsProblem, tm.clientProblem} {
		switch {
		case p == nil:
		case p.invalid:
			return sitetrust.Outcome{Kind: sitetrust.TrustFailure, Reason: sitetrust.ReasonTrustMaterialInvalid, Message: p.message}, false
		default:
			missing = append(missing, p.message)
		}
	}
	pins := pinsOf(gs)
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
	inputs := strings.Join([]string{"mutual", addr, serverName, strings.Join(pins, ","), fmt.Sprint(spiffe, tm.version), site}, "\x00")
	return r.probeOnce(gs.Name, inputs, now, func() sitetrust.Outcome {
		return told(sitetrust.Probe(ctx, sitetrust.Target{
			Address: addr, ServerName: serverName, Roots: tm.roots, Client: *tm.client,
			Pins: pins, SPIFFE: spiffe, Site: site, Timeout: r.opts.SiteProbeTimeout, Dial: dial,
		}))
	})
}

// gossipedAddress is the gateway address site gossips in network, "" when
// none is known.
func (r *siteReconciler) gossipedAddress(network, site string) string {
	if r.opts.Membership == nil {
		return ""
	}
	for _, s := range r.opts.Membership.View(network).Sites {
		if s.Name == site {
			return s.GatewayAddress
		}
	}
	return ""
}

// probeOnce runs probe unless the same inputs were probed within half a
// period (a reconcile for gossip alone, which changes no input of the
// probe, does not probe again).
func (r *siteReconciler) probeOnce(name, inputs string, now time.Time, probe func() sitetrust.Outcome) (sitetrust.Outcome, bool) {
	r.mu.Lock()
	m, ok := r.memo[name]
	r.mu.Unlock()
	if ok && m.inputs == inputs && now.Sub(m.at) < r.opts.SiteProbeInterval/2 {
		return m.outcome, false
	}
	start := time.Now()
	o := probe()
	took := time.Since(start).Seconds()
	r.metrics.probeDuration.Observe(took)
	r.metrics.gatewayProbeDuration.Observe(took)
	r.metrics.siteProbes.WithLabelValues(o.Reason).Inc()
	tlsMode := "mtls"
	if strings.HasPrefix(inputs, "plaintext\x00") {
		tlsMode = "plaintext"
	}
	r.metrics.gatewayProbes.WithLabelValues(o.Reason, tlsMode).Inc()
	r.mu.Lock()
	r.memo[name] = probeMemo{inputs: inputs, at: now, outcome: o}
	r.mu.Unlock()
	return o, true
}

func (r *siteReconciler) forget(name string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.memo, name)
}

// writeStatus patches the GridSite's status when it changed; lastProbeTime
// alone is refreshed every lastProbeRefresh.
func (r *siteReconciler) writeStatus(ctx context.Context, gs *v1alpha1.GridSite, site string, phase v1alpha1.SitePhase, reason, message, certPEM string,
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
	if err := r.client.Status().Patch(ctx, gs, client.MergeFrom(orig)); err != nil {
		return fmt.Errorf("patch status of GridSite %s: %w", gs.Name, err)
	}
	r.written.sites.wrote(client.ObjectKeyFromObject(gs), gs.ResourceVersion, gs.Status.DeepCopy())
	r.metrics.statusWrites.WithLabelValues("GridSite").Inc()
	if previous != phase {
		from := string(previous)
		if from == "" {
			from = string(sitetrust.PhasePending) // a new site starts there, as upstream's do
		}
		r.metrics.phaseTransitions.WithLabelValues(from, string(phase), reason).Inc()
		r.opts.Logger.Info("gridsite_phase", "gridsite", gs.Name, "network", gs.Spec.GridNetworkRef, "site", site,
			"from", string(previous), "phase", string(phase), "reason", reason)
		eventType := corev1.EventTypeNormal
		if phase != sitetrust.PhaseActive && (previous == sitetrust.PhaseActive || phase == sitetrust.PhaseUnreachable) {
			eventType = corev1.EventTypeWarning
		}
		r.events.record(ctx, gs, "GridSite", eventType, reason, fmt.Sprintf("%s → %s: %s", orDash(previous), phase, message))
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

// trustProblem is trust material that is missing or invalid.
type trustProblem struct {
	invalid bool
	message string
}

// trustMaterial is what a network's probes need: the grid CA's
// certificates and this site's certificate and key. version changes when
// what the Secrets hold changes, so that every site is probed again.
type trustMaterial struct {
	version uint64
	loaded  uint64 // the load's sequence number

	digest        [sha256.Size]byte
	roots         *x509.CertPool
	rootCerts     []*x509.Certificate
	rootsProblem  *trustProblem
	client        *tls.Certificate
	clientProblem *trustProblem
}

// trustCache holds each network's trust material, loaded from its Secrets
// (the agent gets them by name; it does not watch Secrets) and reloaded by
// refresh: the periodic Secret poll and the network reconciler after it
// wrote one.
type trustCache struct {
	api     client.Reader
	mu      sync.Mutex
	loads   uint64
	entries map[string]*trustMaterial
	changed func(network string)
}

func (c *trustCache) get(ctx context.Context, network *v1alpha1.GridNetwork) *trustMaterial {
	c.mu.Lock()
	tm := c.entries[network.Name]
	c.mu.Unlock()
	if tm != nil {
		return tm
	}
	c.refresh(ctx, network)
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.entries[network.Name]
}

// refresh reloads a network's trust material and, when it differs from
// what was held, bumps its version and reports the change.
func (c *trustCache) refresh(ctx context.Context, network *v1alpha1.GridNetwork) {
	c.mu.Lock()
	c.loads++
	seq := c.loads
	c.mu.Unlock()
	tm := loadTrust(ctx, c.api, network)
	tm.loaded = seq
	c.mu.Lock()
	prev := c.entries[network.Name]
	// A load that started later and already stored wins: an older one
	// (a probe's, begun before the agent wrote a Secret) must not put
	// back what it read.
	if prev != nil && (prev.digest == tm.digest || prev.loaded > seq) {
		c.mu.Unlock()
		return
	}
	if prev != nil {
		tm.version = prev.version + 1
	}
	if c.entries == nil {
		c.entries = map[string]*trustMaterial{}
	}
	c.entries[network.Name] = tm
	c.mu.Unlock()
	if prev != nil && c.changed != nil {
		c.changed(network.Name)
	}
}

func (c *trustCache) forget(network string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.entries, network)
}

// loadTrust reads a network's CA (caConfigMapRef, else ca.crt or tls.crt
// of caSecretRef) and site identity (tls.crt and tls.key of
// siteSecretRef). Messages name fields and objects, never contents.
func loadTrust(ctx context.Context, api client.Reader, network *v1alpha1.GridNetwork) *trustMaterial {
	tm := &trustMaterial{}
	h := sha256.New()
	t := network.Spec.TLS
	if t == nil {
		t = &v1alpha1.GridTLS{}
	}
	var caPEM []byte
	var caAt string
	switch {
	case t.CAConfigMapRef != nil:
		ref := t.CAConfigMapRef
		key := ref.Key
		if key == "" {
			key = keyCACert
		}
		caAt = fmt.Sprintf("spec.tls.caConfigMapRef (ConfigMap %s/%s, key %s)", ref.Namespace, ref.Name, key)
		var cm corev1.ConfigMap
		if err := api.Get(ctx, types.NamespacedName{Namespace: ref.Namespace, Name: ref.Name}, &cm); err != nil {
			tm.rootsProblem = &trustProblem{message: caAt + ": " + apiFailure(err, "get", "ConfigMap")}
		} else if caPEM = []byte(cm.Data[key]); len(caPEM) == 0 {
			tm.rootsProblem = &trustProblem{message: caAt + ": the key is missing or empty"}
		}
	case t.CASecretRef != nil:
		ref := t.CASecretRef
		caAt = fmt.Sprintf("spec.tls.caSecretRef (Secret %s/%s)", ref.Namespace, ref.Name)
		var s corev1.Secret
		if err := api.Get(ctx, types.NamespacedName{Namespace: ref.Namespace, Name: ref.Name}, &s); err != nil {
			tm.rootsProblem = &trustProblem{message: caAt + ": " + apiFailure(err, "get", "Secret")}
		} else if caPEM = s.Data[keyCACert]; len(caPEM) == 0 {
			if caPEM = s.Data[corev1.TLSCertKey]; len(caPEM) == 0 {
				tm.rootsProblem = &trustProblem{message: caAt + ": neither ca.crt nor tls.crt holds the grid CA"}
			}
		}
	default:
		tm.rootsProblem = &trustProblem{message: "spec.tls.caSecretRef (or caConfigMapRef) names no grid CA"}
	}
	if tm.rootsProblem == nil {
		certs, err := sitetrust.ParseCertificates(caPEM)
		if err != nil {
			tm.rootsProblem = &trustProblem{invalid: true, message: caAt + ": the grid CA: " + err.Error()}
		} else {
			tm.roots, tm.rootCerts = x509.NewCertPool(), certs
			for _, c := range certs {
				tm.roots.AddCert(c)
				h.Write(c.Raw)
			}
		}
	}
	h.Write([]byte{0})
	if ref := t.SiteSecretRef; ref == nil {
		tm.clientProblem = &trustProblem{message: "spec.tls.siteSecretRef names no site certificate (the probe's client identity)"}
	} else {
		at := fmt.Sprintf("spec.tls.siteSecretRef (Secret %s/%s)", ref.Namespace, ref.Name)
		var s corev1.Secret
		if err := api.Get(ctx, types.NamespacedName{Namespace: ref.Namespace, Name: ref.Name}, &s); err != nil {
			tm.clientProblem = &trustProblem{message: at + ": " + apiFailure(err, "get", "Secret")}
		} else if len(s.Data[corev1.TLSCertKey]) == 0 || len(s.Data[corev1.TLSPrivateKeyKey]) == 0 {
			tm.clientProblem = &trustProblem{message: at + ": tls.crt or tls.key is missing (not issued yet?)"}
		} else if held, err := sitetrust.ParseHeld(s.Data[corev1.TLSCertKey], s.Data[corev1.TLSPrivateKeyKey]); err != nil {
			tm.clientProblem = &trustProblem{invalid: true, message: at + ": " + err.Error()}
		} else {
			tm.client = &held.Pair
			for _, c := range held.Pair.Certificate {
				h.Write(c)
			}
			h.Write(s.Data[corev1.TLSPrivateKeyKey])
		}
	}
	for _, p := range []*trustProblem{tm.rootsProblem, tm.clientProblem} {
		if p != nil {
			h.Write([]byte(p.message))
		}
	}
	copy(tm.digest[:], h.Sum(nil))
	return tm
}

// gridSitesOf lists the GridSites of a network from the cache.
func (c *common) gridSitesOf(ctx context.Context, network string) ([]v1alpha1.GridSite, error) {
	var list v1alpha1.GridSiteList
	if err := c.client.List(ctx, &list, client.MatchingFields{indexSiteNetwork: network}); err != nil {
		return nil, fmt.Errorf("list GridSites of %s: %w", network, err)
	}
	return list.Items, nil
}

// trustedSites are the sites of a network whose GridSite is Active: the
// only ones whose providers reach overlays. No GridSite, no trust.
func (c *common) trustedSites(ctx context.Context, network string) (map[string]bool, error) {
	sites, err := c.gridSitesOf(ctx, network)
	if err != nil {
		return nil, err
	}
	out := map[string]bool{}
	for i := range sites {
		if sites[i].Status.Phase == sitetrust.PhaseActive && sites[i].DeletionTimestamp.IsZero() {
			out[siteOf(&sites[i])] = true
		}
	}
	return out, nil
}

// reprobeSites has every GridSite of a network reconciled: its trust
// material or its gossip changed. A site whose probe inputs did not change
// is not probed again before its period.
func (c *common) reprobeSites(ctx context.Context, network string, out chan<- event.GenericEvent) {
	sites, err := c.gridSitesOf(ctx, network)
	if err != nil {
		return
	}
	for i := range sites {
		gs := &v1alpha1.GridSite{}
		gs.Name = sites[i].Name
		c.lifetime.send(out, event.GenericEvent{Object: gs})
	}
}

// gridSiteNetwork maps a GridSite to its network, for the network
// reconciler: an overlay follows its sites' phases.
func gridSiteNetwork(_ context.Context, o client.Object) []reconcile.Request {
	gs, ok := o.(*v1alpha1.GridSite)
	if !ok || gs.Spec.GridNetworkRef == "" {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: gs.Spec.GridNetworkRef}}}
}

// sitePhaseChanged passes a GridSite's creation, deletion, phase change
// or move to another network.
var sitePhaseChanged = predicate.Funcs{
	UpdateFunc: func(e event.UpdateEvent) bool {
		o, ok1 := e.ObjectOld.(*v1alpha1.GridSite)
		n, ok2 := e.ObjectNew.(*v1alpha1.GridSite)
		return !ok1 || !ok2 || o.Status.Phase != n.Status.Phase || o.Spec.GridNetworkRef != n.Spec.GridNetworkRef ||
			o.Labels[v1alpha1.SiteLabel] != n.Labels[v1alpha1.SiteLabel]
	},
	GenericFunc: func(event.GenericEvent) bool { return false },
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
	accepted := acceptedCondition(unsupported, gen)
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
