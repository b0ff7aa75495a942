package overlay

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/gridsync/gridsync/api/v1alpha1"
	"github.com/gridsync/gridsync/controller/internal/base"
	"github.com/gridsync/gridsync/controller/internal/membership"
	"github.com/gridsync/gridsync/controller/render"
	"github.com/gridsync/gridsync/gossip/seeds"
	"github.com/gridsync/gridsync/gossip/sites"
	"github.com/gridsync/gridsync/gossip/swimkeys"
	"github.com/gridsync/gridsync/shared/envelope"
)

// Reasons of the Membership condition (and of Ready when membership
// keeps the network from being reconciled).
const (
	ReasonSwimNotRunning    = "SwimNotRunning"
	ReasonSwimKeyMissing    = "SwimKeyMissing"
	ReasonSwimKeyInvalid    = "SwimKeyInvalid"
	ReasonSwimKeyUnreadable = "SwimKeyUnreadable"
	ReasonSwimKeyPending    = "SwimKeyPending"
	ReasonSeedsUnresolvable = "SeedsUnresolvable"
	ReasonGridIDConflict    = "GridIdConflict"
	ReasonSiteCertInvalid   = "SiteCertificateInvalid"
	ReasonMembershipRunning = "MembershipRunning"
	ReasonStandby           = "Standby"
)

// ConditionMembership is the network's SWIM condition.
const ConditionMembership = "Membership"

// swimKeyRetry is how soon a network whose SWIM key did not load is tried
// again (the key poll notices a fixed Secret sooner).
const swimKeyRetry = 10 * time.Second

// membershipOutcome is what one reconcile did with membership, for the
// network's status.
type membershipOutcome struct {
	// keyFailed stops the reconcile: nothing is announced or published.
	keyFailed bool
	condition conditionSpec
	view      sites.NetworkView
}

// conditionSpec is a condition's verdict, reason and message, as a stage
// reports it.
type conditionSpec = membership.Condition

// loadSwimKey reads a network's SWIM key Secret. The error's message names
// the field and the Secret, never its bytes; reason is the status reason.
func (r *Reconciler) loadSwimKey(ctx context.Context, network *v1alpha1.GridNetwork) (ks *swimkeys.Set, reason string, err error) {
	if network.Spec.TLS == nil || network.Spec.TLS.SwimKeySecretRef == nil {
		return nil, "", nil
	}
	ref := network.Spec.TLS.SwimKeySecretRef
	at := fmt.Sprintf("spec.tls.swimKeySecretRef (Secret %s/%s)", ref.Namespace, ref.Name)
	var s corev1.Secret
	switch err := r.API.Get(ctx, types.NamespacedName{Namespace: ref.Namespace, Name: ref.Name}, &s); {
	case apierrors.IsNotFound(err):
		return nil, ReasonSwimKeyMissing, fmt.Errorf("%s: the Secret does not exist", at)
	case err != nil:
		return nil, ReasonSwimKeyUnreadable, fmt.Errorf("%s: %s", at, base.APIFailure(err, "get", "Secret"))
	}
	ks, err = swimkeys.FromSecret(s.Data, ref.Key)
	switch {
	case errors.Is(err, swimkeys.ErrMissing):
		return nil, ReasonSwimKeyMissing, fmt.Errorf("%s: %w", at, err)
	case err != nil:
		return nil, ReasonSwimKeyInvalid, fmt.Errorf("%s: %w", at, err)
	}
	return ks, "", nil
}

// reconcileMembership loads the network's key, announces its seeds and
// publishes this site's state (its public certificate cert, as the
// identity step read or issued it, and its providers), in that order:
// with a key configured that does not load, nothing is announced or
// published.
func (r *Reconciler) reconcileMembership(ctx context.Context, network *v1alpha1.GridNetwork, local []sites.Provider, cert string, certErr error) membershipOutcome {
	m := r.Opts.Membership
	if m == nil {
		if membershipRequested(network) {
			return membershipOutcome{condition: conditionSpec{Reason: ReasonSwimNotRunning,
				Message: "the agent runs without a SWIM bind address (--swim-bind-addr, GRID_SWIM_BIND_ADDR): spec.seeds, spec.tls.swimKeySecretRef and site discovery have no effect"}}
		}
		return membershipOutcome{condition: conditionSpec{OK: true, Reason: ReasonSwimNotRunning, Message: "SWIM is not configured on this agent"}}
	}
	r.ranStage(base.StageGossipConfig)
	ks, reason, err := r.loadSwimKey(ctx, network)
	if err != nil {
		m.SetNetworkKeys(network.Name, nil, true)
		r.Opts.Logger.Error("swim_key_failed", "network", network.Name, "field", "spec.tls.swimKeySecretRef", "reason", reason, "error", err.Error())
		return membershipOutcome{keyFailed: true, condition: conditionSpec{Reason: reason,
			Message: err.Error() + "; nothing is announced or published for this network until it loads"}}
	}
	m.SetNetworkKeys(network.Name, ks, false)

	out := membershipOutcome{condition: conditionSpec{OK: true, Reason: ReasonMembershipRunning}}
	var notes []string
	settings, problem := networkSettings(&network.Spec)
	if problem != "" {
		notes = append(notes, problem)
	}
	m.SetNetworkSettings(network.Name, settings)
	resolved, problems := seeds.Resolve(ctx, r.seedResolver, network.Spec.Seeds, seeds.DefaultTimeout, seeds.DefaultTotalTimeout)
	// A seed's problem is logged when it changes, not at every reconcile.
	said := map[string]bool{}
	for _, p := range problems {
		key := network.Name + "/resolve/" + p.Entry
		said[key] = true
		if r.seedProblems.Set(key, p.Err.Error()) != p.Err.Error() {
			r.Opts.Logger.Warn("swim_seed_skipped", "network", network.Name, "field", "spec.seeds", "entry", p.Entry, "error", p.Err.Error())
		}
	}
	if len(problems) > 0 {
		bad := make([]string, 0, len(problems))
		for _, p := range problems {
			bad = append(bad, fmt.Sprintf("%q (%v)", p.Entry, p.Err))
		}
		notes = append(notes, "spec.seeds skipped: "+base.JoinLimited(bad, 3))
		if len(resolved) == 0 {
			out.condition = conditionSpec{Reason: ReasonSeedsUnresolvable}
		}
	}
	// A wholly failed non-empty list keeps the last resolved set.
	var res sites.SeedResult
	if len(resolved) == 0 && len(network.Spec.Seeds) > 0 {
		res = m.RejoinSeeds(network.Name)
	} else {
		res = m.AnnounceSeeds(network.Name, resolved)
	}
	for _, f := range res.Failed {
		key := network.Name + "/join/" + f.Entry
		said[key] = true
		if r.seedProblems.Set(key, f.Err.Error()) != f.Err.Error() {
			r.Opts.Logger.Warn("swim_seed_join_failed", "network", network.Name, "field", "spec.seeds", "address", f.Entry, "error", f.Err.Error())
		}
	}
	r.seedProblems.Keep(network.Name+"/", said)
	if res.Conflict {
		out.condition = conditionSpec{Reason: ReasonGridIDConflict}
		notes = append(notes, "a seed belongs to another grid (its grid ID differs): the merge was refused")
	}

	if certErr != nil {
		r.Opts.Logger.Error("swim_site_certificate_refused", "network", network.Name, "field", "spec.tls.siteSecretRef", "error", certErr.Error())
		notes = append(notes, certErr.Error())
		if out.condition.OK {
			out.condition = conditionSpec{Reason: ReasonSiteCertInvalid}
		}
	}
	id := r.membershipIdentity(ctx, network)
	switch {
	case id.Open:
	case id.Roots == nil:
		notes = append(notes, "the grid CA did not load: records of the other sites are refused until it does (they are signed)")
	case id.Signer == nil:
		notes = append(notes, "this site has no certificate yet: nothing of it is announced until it has one (records are signed)")
	}
	m.SetIdentity(network.Name, id)
	if err := m.Publish(network.Name, cert, local); err != nil {
		notes = append(notes, err.Error())
	}
	out.view = m.View(network.Name)
	switch {
	case out.view.KeyPending:
		out.condition = conditionSpec{Reason: ReasonSwimKeyPending}
		notes = append([]string{"SWIM holds every send and receive until a key loads (another network's key, or GRID_SWIM_REQUIRE_KEY=false)"}, notes...)
	case !out.view.Running && out.condition.OK:
		out.condition = conditionSpec{OK: true, Reason: ReasonStandby, Message: "this replica is not the site's member"}
	case out.condition.OK:
		out.condition.Message = fmt.Sprintf("%d of %d remote sites alive, %d remote provider records", out.view.Connected(), len(out.view.Sites), len(out.view.Providers))
	}
	if len(notes) > 0 {
		if out.condition.Message != "" {
			notes = append([]string{out.condition.Message}, notes...)
		}
		out.condition.Message = strings.Join(notes, "; ")
	}
	return out
}

// membershipIdentity is how the network's records are signed and checked:
// with the site certificate and against the grid CA the trust probes use.
// A network that declares no grid CA is open: its records are neither
// signed nor checked.
func (r *Reconciler) membershipIdentity(ctx context.Context, network *v1alpha1.GridNetwork) sites.Identity {
	t := network.Spec.TLS
	if t == nil || t.CASecretRef == nil && t.CAConfigMapRef == nil {
		return sites.Identity{Open: true}
	}
	tm := r.Trust.Get(ctx, network)
	return sites.Identity{Roots: tm.Roots, RootCerts: tm.RootCerts, Signer: tm.Client}
}

// membershipRequested reports whether a network asks for anything only
// SWIM does.
func membershipRequested(n *v1alpha1.GridNetwork) bool {
	return len(n.Spec.Seeds) > 0 || n.Spec.TLS != nil && n.Spec.TLS.SwimKeySecretRef != nil || n.Labels[AutoDiscoverSitesLabel] == "true"
}

// gossipProviders is what the other sites learn of this site's providers.
func gossipProviders(items []v1alpha1.InferenceProvider, assessed []render.Provider) []sites.Provider {
	phase := map[string]render.Provider{}
	for _, p := range assessed {
		phase[p.Name] = p
	}
	var out []sites.Provider
	for i := range items {
		p := &items[i]
		a, ok := phase[p.Name]
		if !ok {
			continue
		}
		mp := sites.Provider{
			Name: p.Name, Models: a.Models, Cluster: a.Cluster, Phase: string(a.Phase),
			ProviderKind: p.Spec.ProviderKind, BackendKind: p.Spec.BackendKind,
			Credentialed: a.Credential != nil,
			Drained:      base.Drained(p),
			Load:         measuredLoad(p),
			Weight:       capacityWeight(p),
		}
		if a.Sites != nil {
			mp.Sites = a.Sites.String()
		}
		out = append(out, mp)
	}
	return out
}

// GridSite management: one GridSite per remote site of a network that
// carries the auto-discover label, named as the reference names them.
// The agent writes the spec's network and gateway address (server-side
// apply: pins and server name are the user's); a departed site is never
// deleted.

// gridSiteName is "<network>-<site>", lowercased, other characters as
// dashes, dashes trimmed at the ends.
func gridSiteName(network, site string) string {
	clean := func(s string) string {
		b := []byte(strings.ToLower(s))
		for i, c := range b {
			if (c < 'a' || c > 'z') && (c < '0' || c > '9') {
				b[i] = '-'
			}
		}
		return strings.Trim(string(b), "-")
	}
	name := strings.Trim(clean(network)+"-"+clean(site), "-")
	if name == "" {
		return "discovered-site"
	}
	if len(name) > 253 {
		sum := sha256.Sum256([]byte(name))
		name = name[:236] + "-" + hex.EncodeToString(sum[:8])
	}
	return name
}

// syncGridSites creates the GridSites of the network's remote sites and
// keeps their gateway address, writing only what changed since the last
// write. Their status is the GridSite controller's.
func (r *Reconciler) syncGridSites(ctx context.Context, network *v1alpha1.GridNetwork, view sites.NetworkView) error {
	if network.Labels[AutoDiscoverSitesLabel] != "true" {
		return nil
	}
	r.ranStage(base.StageGridSites)
	var firstErr error
	for _, s := range view.Sites {
		if err := r.syncGridSite(ctx, network.Name, s); err != nil && firstErr == nil {
			firstErr = err
		}
	}
	return firstErr
}

func (r *Reconciler) syncGridSite(ctx context.Context, network string, s sites.Site) error {
	name := gridSiteName(network, s.Name)
	memo := s.GatewayAddress + "\x00" + s.Region + "\x00" + s.Zone
	if r.gridSites.seen(name, memo) {
		return nil
	}
	spec := map[string]any{"gridNetworkRef": network}
	if s.GatewayAddress != "" {
		spec["gatewayEndpoint"] = map[string]any{"address": s.GatewayAddress}
	}
	// Where the site runs, as it signed it into its records.
	if s.Region != "" {
		spec["region"] = s.Region
	}
	if s.Zone != "" {
		spec["zone"] = s.Zone
	}
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": v1alpha1.GroupVersion.String(), "kind": "GridSite",
		"metadata": map[string]any{"name": name, "labels": map[string]any{
			envelope.LabelManagedBy: r.Opts.Producer, envelope.LabelNetwork: network, v1alpha1.SiteLabel: s.Name,
		}},
		"spec": spec,
	}}
	if err := r.Client.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner(r.Opts.Producer), client.ForceOwnership); err != nil {
		return fmt.Errorf("apply GridSite %s: %w", name, err)
	}
	r.gridSites.remember(name, memo)
	return nil
}

// writeMemo remembers what was last written per object, so that an idle
// reconcile writes nothing.
type writeMemo struct {
	mu   sync.Mutex
	last map[string]string
}

func (m *writeMemo) seen(name, memo string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.last[name] == memo
}

func (m *writeMemo) remember(name, memo string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.last == nil {
		m.last = map[string]string{}
	}
	m.last[name] = memo
}

// SecretPoller is the runnable that polls the networks' Secrets (see
// secretPoller); it sends the networks to reconcile to out.
func (r *Reconciler) SecretPoller(out chan<- event.GenericEvent) manager.Runnable {
	return &secretPoller{r: r, out: out}
}

// secretPoller reads the networks' SWIM key and trust Secrets every
// SwimKeyPollInterval (the agent gets Secrets, it does not watch them).
// A SWIM key Secret that changed has its network reconciled: that is how
// the steps of a key rotation are followed without a restart. Trust
// material (the grid CA, the site certificate) that changed has the
// network reconciled (a deleted site Secret is issued again) and its
// sites probed again.
type secretPoller struct {
	r    *Reconciler
	out  chan<- event.GenericEvent
	last map[string][32]byte
}

// NeedLeaderElection: only the leader runs membership and probes.
func (p *secretPoller) NeedLeaderElection() bool { return true }

func (p *secretPoller) Start(ctx context.Context) error {
	p.last = map[string][32]byte{}
	t := time.NewTicker(p.r.Opts.SwimKeyPollInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			p.poll(ctx)
		}
	}
}

func (p *secretPoller) poll(ctx context.Context) {
	var list v1alpha1.GridNetworkList
	if err := p.r.Client.List(ctx, &list); err != nil {
		return
	}
	for i := range list.Items {
		n := &list.Items[i]
		if n.Spec.TLS == nil || !n.DeletionTimestamp.IsZero() {
			continue
		}
		if n.Spec.TLS.CASecretRef != nil || n.Spec.TLS.CAConfigMapRef != nil || n.Spec.TLS.SiteSecretRef != nil {
			p.r.Trust.Refresh(ctx, n) // reports a change itself
		}
		if n.Spec.TLS.SwimKeySecretRef == nil || p.r.Opts.Membership == nil {
			continue
		}
		ks, reason, err := p.r.loadSwimKey(ctx, n)
		// A digest of what was read: keys are compared, never kept here
		// or logged.
		h := sha256.New()
		if err != nil {
			h.Write([]byte(reason))
		} else {
			for _, k := range ks.All() {
				h.Write(k)
			}
		}
		var sum [32]byte
		copy(sum[:], h.Sum(nil))
		prev, seen := p.last[n.Name]
		p.last[n.Name] = sum
		if seen && prev != sum {
			p.r.Opts.Logger.Info("swim_key_secret_changed", "network", n.Name)
			select {
			case p.out <- event.GenericEvent{Object: &v1alpha1.GridNetwork{ObjectMeta: metav1.ObjectMeta{Name: n.Name}}}:
			case <-ctx.Done():
				return
			}
		}
	}
}

// networkSettings is what the network's spec asks of membership; problem
// names a spec.swim duration that does not parse (the agent's own timing
// is kept for it).
func networkSettings(spec *v1alpha1.GridNetworkSpec) (sites.NetworkSettings, string) {
	out := sites.NetworkSettings{GridID: spec.GridID, Region: spec.Region, Zone: spec.Zone}
	sw := spec.Swim
	if sw == nil {
		return out, ""
	}
	var bad []string
	for _, d := range []struct {
		field, value string
		to           *time.Duration
	}{
		{"spec.swim.probeInterval", sw.ProbeInterval, &out.Swim.ProbeInterval},
		{"spec.swim.suspicionTimeout", sw.SuspicionTimeout, &out.Swim.SuspicionTimeout},
	} {
		if d.value == "" {
			continue
		}
		v, err := time.ParseDuration(d.value)
		if err != nil || v < 100*time.Millisecond || v > time.Hour {
			bad = append(bad, fmt.Sprintf("%s %q is not a duration from 100ms to 1h: the agent's own is kept", d.field, d.value))
			continue
		}
		*d.to = v
	}
	if sw.GossipNodes != nil {
		out.Swim.GossipNodes = int(*sw.GossipNodes)
	}
	return out, strings.Join(bad, "; ")
}
