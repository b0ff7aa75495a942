package membership

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gridsync/gridsync/api/v1alpha1"
	"github.com/gridsync/gridsync/controller/internal/base"
	"github.com/gridsync/gridsync/controller/internal/trustmaterial"
	"github.com/gridsync/gridsync/gossip/seeds"
	"github.com/gridsync/gridsync/gossip/sites"
	"github.com/gridsync/gridsync/gossip/swimkeys"
)

// Member is the membership stage of a network's reconcile: the network's
// SWIM keys, its seeds, this site's records and what is known of the
// other sites; the GridSites of the discovered sites; the poll of the
// Secrets it reads.
type Member struct {
	*base.Env
	Trust *trustmaterial.Cache
	// seedResolver caches seed lookups; seedProblems remembers the seed
	// problems logged, so that each is logged once per change.
	seedResolver seeds.Resolver
	seedProblems base.ReasonLog
	gridSites    writeMemo
	// configured is what the runtime was last given of each network, so
	// that it is given a network's keys, settings, identity and records
	// only when they change (see Reconcile).
	mu         sync.Mutex
	configured map[string]*given
	// openKey is this site's key for the records of networks without a
	// grid CA.
	openKey recordKey
}

// given is what the runtime was last given of a network.
type given struct {
	keys      [32]byte // a digest of the keys (or of their absence or failure)
	settings  *sites.NetworkSettings
	identity  string // the trust material's version it was built from ("" never given)
	cert      string
	providers []sites.Provider
	published bool
	// resetDone is the reset annotation's value last applied.
	resetDone string
}

// NewMember returns the membership stage; seedResolver resolves
// spec.seeds (cached here).
func NewMember(env *base.Env, trust *trustmaterial.Cache, seedResolver seeds.Resolver) *Member {
	return &Member{Env: env, Trust: trust, seedResolver: seeds.NewCachingResolver(seedResolver, seeds.DefaultCacheTTL, env.Opts.Now)}
}

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

// SwimKeyRetry is how soon a network whose SWIM key did not load is tried
// again (the key poll notices a fixed Secret sooner).
const SwimKeyRetry = 10 * time.Second

// Outcome is what one reconcile did with membership, for the network's
// status.
type Outcome struct {
	// KeyFailed stops the reconcile: nothing is announced or published.
	KeyFailed bool
	// SeedsFailed: a seed could not be joined (it is tried again).
	SeedsFailed bool
	Condition   Condition
	View        sites.NetworkView
	// RecordKeyFailed: this site's record key for networks without a grid
	// CA did not load (it is tried again).
	RecordKeyFailed bool
	// Resets are the sites whose keys the reset annotation (ResetValue,
	// removed once the status is written) asked to forget.
	Resets     []string
	ResetValue string
}

// loadSwimKey reads a network's SWIM key Secret. The error's message names
// the field and the Secret, never its bytes; reason is the status reason.
func (r *Member) loadSwimKey(ctx context.Context, network *v1alpha1.GridNetwork) (ks *swimkeys.Set, reason string, err error) {
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

// Reconcile loads the network's key, announces its seeds and
// publishes this site's state (its public certificate cert, as the
// identity step read or issued it, and its providers local, once the
// overlay reconciler assessed them: known), in that order: with a key
// configured that does not load, nothing is announced or published. The
// runtime is given the network's keys, settings, identity and records
// only when they changed since it was last given them (a gossip record or
// a Secret poll that changed none of them configures nothing); the seeds
// are joined at every reconcile (the runtime joins only those not alive,
// and retries a failed one after a pause).
func (r *Member) Reconcile(ctx context.Context, network *v1alpha1.GridNetwork, local []sites.Provider, known bool, cert string, certErr error) Outcome {
	m := r.Opts.Membership
	reset := r.resetRequested(network)
	if m == nil {
		out := Outcome{Condition: Condition{OK: true, Reason: ReasonSwimNotRunning, Message: "SWIM is not configured on this agent"}, Resets: reset.sites, ResetValue: reset.value}
		if membershipRequested(network) {
			out.Condition = Condition{Reason: ReasonSwimNotRunning,
				Message: "the agent runs without a SWIM bind address (--swim-bind-addr, GRID_SWIM_BIND_ADDR): spec.seeds, spec.tls.swimKeySecretRef and site discovery have no effect"}
		}
		return out
	}
	g := r.given(network.Name)
	ks, reason, err := r.loadSwimKey(ctx, network)
	if err != nil {
		if r.changed(&g.keys, keysDigest(nil, reason)) {
			m.SetNetworkKeys(network.Name, nil, true)
		}
		r.Opts.Logger.Error("swim_key_failed", "network", network.Name, "field", "spec.tls.swimKeySecretRef", "reason", reason, "error", err.Error())
		return Outcome{KeyFailed: true, Condition: Condition{Reason: reason,
			Message: err.Error() + "; nothing is announced or published for this network until it loads"}}
	}
	if r.changed(&g.keys, keysDigest(ks, "")) {
		m.SetNetworkKeys(network.Name, ks, false)
	}

	out := Outcome{Condition: Condition{OK: true, Reason: ReasonMembershipRunning}, Resets: reset.sites, ResetValue: reset.value}
	var notes []string
	settings, problem := networkSettings(&network.Spec)
	if problem != "" {
		notes = append(notes, problem)
	}
	if g.settings == nil || *g.settings != settings {
		r.RanStage(base.StageGossipConfig)
		g.settings = &settings
		m.SetNetworkSettings(network.Name, settings)
	}
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
			out.Condition = Condition{Reason: ReasonSeedsUnresolvable}
		}
	}
	// A wholly failed non-empty list keeps the last resolved set; with
	// none, SWIM runs without seeds (this site is found only by sites
	// that have it as a seed), which is warned of once.
	var res sites.SeedResult
	if len(resolved) == 0 && len(network.Spec.Seeds) > 0 {
		res = m.RejoinSeeds(network.Name)
		if len(res.Seeds) > 0 {
			notes = append(notes, "no seed resolved: the addresses last resolved are kept: "+base.JoinLimited(res.Seeds, 3))
		} else {
			notes = append(notes, "no seed has resolved yet: SWIM runs without seeds until one does")
			key := network.Name + "/seedless"
			said[key] = true
			if r.seedProblems.Set(key, "seedless") == "" {
				r.Opts.Logger.Warn("swim_seedless", "network", network.Name, "field", "spec.seeds", "entries", len(network.Spec.Seeds),
					"why", "no entry has resolved yet: this site joins no other until one does")
			}
		}
	} else {
		res = m.AnnounceSeeds(network.Name, resolved)
	}
	out.SeedsFailed = len(res.Failed) > 0 || len(problems) > 0
	for _, f := range res.Failed {
		key := network.Name + "/join/" + f.Entry
		said[key] = true
		if r.seedProblems.Set(key, f.Err.Error()) != f.Err.Error() {
			r.Opts.Logger.Warn("swim_seed_join_failed", "network", network.Name, "field", "spec.seeds", "address", f.Entry, "error", f.Err.Error())
		}
	}
	r.seedProblems.Keep(network.Name+"/", said)
	if res.Conflict {
		out.Condition = Condition{Reason: ReasonGridIDConflict}
		notes = append(notes, "a seed belongs to another grid (its grid ID differs): the merge was refused")
	}

	if certErr != nil {
		r.Opts.Logger.Error("swim_site_certificate_refused", "network", network.Name, "field", "spec.tls.siteSecretRef", "error", certErr.Error())
		notes = append(notes, certErr.Error())
		if out.Condition.OK {
			out.Condition = Condition{Reason: ReasonSiteCertInvalid}
		}
	}
	id, version, keyNote := r.membershipIdentity(ctx, network)
	switch {
	case id.Open && keyNote != "":
		out.RecordKeyFailed = true
		notes = append(notes, keyNote)
	case id.Open:
	case id.Roots == nil:
		notes = append(notes, "the grid CA did not load: records of the other sites are refused until it does (they are signed)")
	case id.Signer == nil:
		notes = append(notes, "this site has no certificate yet: nothing of it is announced until it has one (records are signed)")
	}
	if g.identity != version {
		r.RanStage(base.StageGossipConfig)
		g.identity = version
		m.SetIdentity(network.Name, id)
	}
	// After the identity, which gives membership the keys the status
	// kept: a reset forgets one of them.
	r.resetSiteKeys(network, reset, g)
	// This site's records wait for its providers: announcing none would
	// withdraw them from the other sites until the overlay reconciler ran.
	if known && (!g.published || g.cert != cert || !reflect.DeepEqual(g.providers, local)) {
		r.RanStage(base.StageGossipConfig)
		if err := m.Publish(network.Name, cert, local); err != nil {
			notes = append(notes, err.Error())
		} else {
			g.cert, g.providers, g.published = cert, local, true
		}
	}
	out.View = m.View(network.Name)
	switch {
	case out.View.KeyPending:
		out.Condition = Condition{Reason: ReasonSwimKeyPending}
		notes = append([]string{"SWIM holds every send and receive until a key loads (another network's key, or GRID_SWIM_REQUIRE_KEY=false)"}, notes...)
	case !out.View.Running && out.Condition.OK:
		out.Condition = Condition{OK: true, Reason: ReasonStandby, Message: "this replica is not the site's member"}
	case out.Condition.OK:
		out.Condition.Message = fmt.Sprintf("%d of %d remote sites alive, %d remote provider records", out.View.Connected(), len(out.View.Sites), len(out.View.Providers))
	}
	if len(notes) > 0 {
		if out.Condition.Message != "" {
			notes = append([]string{out.Condition.Message}, notes...)
		}
		out.Condition.Message = strings.Join(notes, "; ")
	}
	return out
}

// given is what the runtime was last given of a network.
func (r *Member) given(network string) *given {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.configured == nil {
		r.configured = map[string]*given{}
	}
	g, ok := r.configured[network]
	if !ok {
		g = &given{}
		r.configured[network] = g
	}
	return g
}

// changed records a network's key digest, reporting (and counting as a
// gossip configuration) whether it differs from the last.
func (r *Member) changed(last *[32]byte, digest [32]byte) bool {
	if *last == digest {
		return false
	}
	*last = digest
	r.RanStage(base.StageGossipConfig)
	return true
}

// keysDigest stands for a network's keys, or for a key that failed to
// load (reason) or none: keys are compared, never kept here or logged.
func keysDigest(ks *swimkeys.Set, reason string) [32]byte {
	h := sha256.New()
	switch {
	case reason != "":
		h.Write([]byte("failed\x00" + reason))
	case ks == nil:
		h.Write([]byte("none"))
	default:
		for _, k := range ks.All() {
			h.Write([]byte{byte(len(k))})
			h.Write(k)
		}
	}
	var sum [32]byte
	copy(sum[:], h.Sum(nil))
	return sum
}

// Forget withdraws this site from a network (its records become
// tombstones) and drops what the runtime was given of it.
func (r *Member) Forget(network string) {
	r.mu.Lock()
	delete(r.configured, network)
	r.mu.Unlock()
	if r.Opts.Membership != nil {
		r.Opts.Membership.Forget(network)
	}
}

// membershipIdentity is how the network's records are signed and checked:
// with the site certificate and against the grid CA the trust probes use,
// and the version of that trust material (it changes with either). A
// network that declares no grid CA is open: its records are signed with
// this site's record key and held to the first key of each site
// (openIdentity; note says why this site has no key).
func (r *Member) membershipIdentity(ctx context.Context, network *v1alpha1.GridNetwork) (id sites.Identity, version, note string) {
	if base.OpenNetwork(network) {
		return r.openIdentity(ctx, network)
	}
	tm := r.Trust.Get(ctx, network)
	return sites.Identity{Roots: tm.Roots, RootCerts: tm.RootCerts, Signer: tm.Client}, strconv.FormatUint(tm.Version, 10), ""
}

// membershipRequested reports whether a network asks for anything only
// SWIM does.
func membershipRequested(n *v1alpha1.GridNetwork) bool {
	return len(n.Spec.Seeds) > 0 || n.Spec.TLS != nil && n.Spec.TLS.SwimKeySecretRef != nil || n.Labels[AutoDiscoverSitesLabel] == "true"
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
