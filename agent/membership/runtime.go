// Package membership is the agent's SWIM runtime: one memberlist node per
// site, joined only by the replica that leads, encrypted and
// authenticated with AES-256-GCM through memberlist's keyring (keys
// rotated live), carrying each site's gateway address, public certificate
// and provider records per network as versioned records that merge last
// writer wins.
//
// Membership is discovery, never authorization: nothing here makes a
// remote site routable. The controller reads a network's view (its sites,
// their states, their records) for status and GridSites; trust is
// decided elsewhere.
package membership

import (
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/gridsync/gridsync/controller/seeds"
	"github.com/gridsync/gridsync/controller/sites"
	"github.com/gridsync/gridsync/controller/swimkeys"
)

// Config configures the runtime.
type Config struct {
	// Site is this site's name, a DNS label.
	Site string
	// BindAddr is the IP:port SWIM listens on (UDP and TCP).
	BindAddr string
	// AdvertiseAddr is the address peers reach this site at (IP:port,
	// [IPv6]:port or hostname:port); BindAddr when empty.
	AdvertiseAddr string
	// Seeds are joined once the runtime runs, in addition to every
	// network's spec.seeds.
	Seeds []string
	// EnvKey is GRID_SWIM_ENCRYPT_KEY: a key loaded before anything is
	// sent, the primary while set.
	EnvKey []byte
	// RequireKey holds SWIM (nothing sent or received) until a key is
	// loaded or a network declares that it uses none.
	RequireKey bool

	// ProbeInterval, ProbeTimeout and SuspectPeriods are the reference's
	// timings: a probe every 5 s, 3 s for a direct answer before indirect
	// probes, a suspect kept at least three probe periods before it is
	// dead.
	ProbeInterval  time.Duration
	ProbeTimeout   time.Duration
	SuspectPeriods int
	// GossipInterval is how often pending broadcasts are sent.
	GossipInterval time.Duration
	// PushPullInterval is how often a site compares record versions with
	// a random peer (scaled up by memberlist above 32 sites).
	PushPullInterval time.Duration
	// StaleTTL is how long records of a site that is not alive are kept
	// (marked stale) before they are dropped.
	StaleTTL time.Duration
	// TombstoneTTL is how long a deleted record is remembered.
	TombstoneTTL time.Duration
	// GridIDSettle is how long a new grid ID may give way to another new
	// one (sites started together).
	GridIDSettle time.Duration
	// Gate bounds what an inbound stream may spend before it is
	// authenticated; DefaultGateLimits when zero.
	Gate GateLimits
	// JoinWait is how long announcing seeds waits for the joins it starts
	// before they go on in the background (DefaultJoinWait).
	JoinWait time.Duration
	// CheckPeer, when set, refuses to send to or dial a member address it
	// returns an error for: members' addresses come from gossip, so the
	// agent applies its probe destination rule to them (loopback,
	// link-local and metadata addresses unless a CIDR allows them).
	CheckPeer func(netip.Addr) error

	Resolver   seeds.Resolver
	Logger     *slog.Logger
	Registerer prometheus.Registerer
	Now        func() time.Time
}

// Defaults of the timings.
const (
	DefaultProbeInterval    = 5 * time.Second
	DefaultProbeTimeout     = 3 * time.Second
	DefaultSuspectPeriods   = 3
	DefaultGossipInterval   = 200 * time.Millisecond
	DefaultPushPullInterval = 30 * time.Second
	DefaultStaleTTL         = 10 * time.Minute
	DefaultTombstoneTTL     = 10 * time.Minute
	// DefaultJoinWait: a join that answers on a real network takes a few
	// round trips; one that takes longer does not hold the reconcile.
	DefaultJoinWait = 200 * time.Millisecond
)

func (c Config) withDefaults() Config {
	if c.ProbeInterval <= 0 {
		c.ProbeInterval = DefaultProbeInterval
	}
	if c.ProbeTimeout <= 0 {
		c.ProbeTimeout = DefaultProbeTimeout
	}
	if c.SuspectPeriods <= 0 {
		c.SuspectPeriods = DefaultSuspectPeriods
	}
	if c.GossipInterval <= 0 {
		c.GossipInterval = DefaultGossipInterval
	}
	if c.PushPullInterval <= 0 {
		c.PushPullInterval = DefaultPushPullInterval
	}
	if c.StaleTTL <= 0 {
		c.StaleTTL = DefaultStaleTTL
	}
	if c.TombstoneTTL <= 0 {
		c.TombstoneTTL = DefaultTombstoneTTL
	}
	if c.GridIDSettle <= 0 {
		c.GridIDSettle = DefaultGridIDSettle
	}
	if c.JoinWait <= 0 {
		c.JoinWait = DefaultJoinWait
	}
	if c.Gate == (GateLimits{}) {
		c.Gate = DefaultGateLimits()
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Registerer == nil {
		c.Registerer = prometheus.NewRegistry()
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

// maxGossipRecordBytes is the largest record message sent by epidemic
// broadcast: it must fit one UDP packet with memberlist's and the
// encryption's overhead. Larger ones (a certificate, many providers) go
// to every member over TCP.
const maxGossipRecordBytes = 1024

// seedRetry is how long a seed whose join failed is left alone.
const seedRetry = 30 * time.Second

// errGridIDConflict marks a merge refused because the peer belongs to
// another grid.
var errGridIDConflict = errors.New("grid ID conflict: the peer belongs to another grid")

// Runtime is the site's SWIM membership.
type Runtime struct {
	cfg       Config
	bind      netip.AddrPort
	advertise netip.AddrPort
	metrics   *metrics
	log       *slog.Logger
	store     *store
	clock     versionClock
	notify    *notifier

	mu          sync.Mutex
	ml          *memberlist.Memberlist
	queue       *memberlist.TransmitLimitedQueue
	keyring     *memberlist.Keyring
	encrypted   bool
	generation  uint64
	grid        gridID
	leading     bool
	netKeys     map[string]*swimkeys.Set // networks whose key loaded
	netKeyFail  map[string]bool          // networks whose declared key did not load
	netNoKey    map[string]bool          // networks that declare no key
	seeds       map[string][]string
	members     map[string]*member // by site
	awaySince   map[string]time.Time
	departed    map[string]map[string]bool // network -> sites whose records were dropped
	joinFailed  map[string]joinFailure     // seed address -> last failed join
	joining     map[string]chan struct{}   // seed address -> join in flight, closed when done
	tr          *countingTransport
	gatewayAddr string
	locals      map[string]localState // what this site announced, per network
	capSaid     map[string]bool       // reason/site whose cap was reported
	wake        chan struct{}
	lastGen     uint64

	// vanish stops without leaving, as a killed process does (tests).
	vanish atomic.Bool
}

// member is the current generation of a remote site.
type member struct {
	name       string
	generation uint64
	addr       string
	state      sites.SiteState
	since      time.Time
	// The last notices applied: a notice is applied once.
	suspectAt, aliveAt uint64
	leaving            bool
}

// localState is what this site announces in a network.
type localState struct {
	certPEM   string
	providers []sites.Provider
}

// New validates cfg and returns a runtime that does nothing until Start.
// An advertise address that does not resolve is an error: peers could
// never answer this site.
func New(ctx context.Context, cfg Config) (*Runtime, error) {
	cfg = cfg.withDefaults()
	bind, err := netip.ParseAddrPort(cfg.BindAddr)
	if err != nil {
		return nil, fmt.Errorf("SWIM bind address %q is not IP:port: %w", cfg.BindAddr, err)
	}
	// Unset, the bind address is advertised (its port, when 0, once
	// bound).
	advertise := bind
	switch {
	case cfg.AdvertiseAddr != "":
		if advertise, err = seeds.ResolveAdvertise(ctx, cfg.Resolver, cfg.AdvertiseAddr); err != nil {
			return nil, fmt.Errorf("SWIM advertise address %q: %w", cfg.AdvertiseAddr, err)
		}
	case bind.Addr().IsUnspecified():
		return nil, fmt.Errorf("SWIM bind address %s is unspecified: set the advertise address peers reach this site at", cfg.BindAddr)
	}
	if errs := validation.IsDNS1123Label(cfg.Site); len(errs) > 0 {
		return nil, fmt.Errorf("site name %q: %s", cfg.Site, strings.Join(errs, "; "))
	}
	m, err := newMetrics(cfg.Registerer)
	if err != nil {
		return nil, err
	}
	r := &Runtime{
		cfg: cfg, bind: bind, advertise: advertise, metrics: m,
		log:        cfg.Logger.With("component", "swim"),
		store:      newStore(),
		clock:      versionClock{now: cfg.Now},
		netKeys:    map[string]*swimkeys.Set{},
		netKeyFail: map[string]bool{},
		netNoKey:   map[string]bool{},
		seeds:      map[string][]string{},
		members:    map[string]*member{},
		awaySince:  map[string]time.Time{},
		departed:   map[string]map[string]bool{},
		joinFailed: map[string]joinFailure{},
		joining:    map[string]chan struct{}{},
		locals:     map[string]localState{},
		capSaid:    map[string]bool{},
		wake:       make(chan struct{}, 1),
	}
	r.notify = newNotifier()
	r.updateKeyPending()
	return r, nil
}

// Site is this site's name.
func (r *Runtime) Site() string { return r.cfg.Site }

// AdvertiseAddr is the address peers reach this site at.
func (r *Runtime) AdvertiseAddr() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.advertise.String()
}

// OnChange registers fn, called (from one goroutine, never concurrently)
// with the name of each network whose view changed. Changes that arrive
// while fn runs are coalesced.
func (r *Runtime) OnChange(fn func(network string)) { r.notify.subscribe(fn) }

// NeedLeaderElection: only the leading replica is the site's member; a
// standby never appears as a second member of the same site.
func (r *Runtime) NeedLeaderElection() bool { return true }

// Start runs the site's membership until ctx ends (the process stops or
// leadership is lost), then leaves so that peers see the departure at
// once instead of suspecting it.
func (r *Runtime) Start(ctx context.Context) error {
	go r.notify.run(ctx)
	r.mu.Lock()
	r.leading = true
	r.mu.Unlock()
	r.updateKeyPending()
	defer func() {
		r.mu.Lock()
		r.leading = false
		r.mu.Unlock()
		r.updateKeyPending()
	}()
	for {
		encrypted, ok := r.released()
		if !ok {
			select {
			case <-ctx.Done():
				return nil
			case <-r.wake:
				continue
			}
		}
		restart, err := r.run(ctx, encrypted)
		if err != nil {
			return err
		}
		if !restart {
			return nil
		}
	}
}

// Vanish makes the runtime stop without a word when its context ends, as
// a killed process does: peers find out by probing. For fault tests and
// benchmarks; an agent always leaves.
func (r *Runtime) Vanish() { r.vanish.Store(true) }

// released says whether the key hold is over, and whether to encrypt.
func (r *Runtime) released() (encrypted, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.releasedLocked()
}

func (r *Runtime) releasedLocked() (encrypted, ok bool) {
	switch {
	case r.cfg.EnvKey != nil || len(r.netKeys) > 0:
		return true, true
	case len(r.netKeyFail) > 0:
		return false, false // a declared key that did not load: never the clear
	case len(r.netNoKey) > 0 || !r.cfg.RequireKey:
		return false, true
	}
	return false, false
}

func (r *Runtime) updateKeyPending() {
	r.mu.Lock()
	_, ok := r.releasedLocked()
	pending := r.leading && !ok
	r.mu.Unlock()
	if pending {
		r.metrics.keyPending.Set(1)
	} else {
		r.metrics.keyPending.Set(0)
	}
}

func (r *Runtime) poke() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// run is one memberlist node's life. It returns restart when the node
// must be created again: the clear gave way to a key.
func (r *Runtime) run(ctx context.Context, encrypted bool) (restart bool, err error) {
	ml, err := r.create(encrypted)
	if err != nil {
		return false, err
	}
	r.log.Info("swim_started", "site", r.cfg.Site, "generation", r.generation, "bind", r.bind.String(),
		"advertise", r.advertise.String(), "encrypted", encrypted, "keys", r.Status().KeysInstalled)
	r.joinAll(ctx)

	// The suspicion window is applied to a quarter of a second.
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	defer r.shutdown(ml)
	for {
		select {
		case <-ctx.Done():
			return false, nil
		case <-r.wake:
			if enc, ok := r.released(); ok && enc && !encrypted {
				r.log.Info("swim_restarting", "why", "a key was loaded; the clear ends")
				return true, nil
			}
			r.applyKeys()
		case <-tick.C:
			r.sweep()
		}
	}
}

// create starts the memberlist node of a new generation.
func (r *Runtime) create(encrypted bool) (*memberlist.Memberlist, error) {
	r.mu.Lock()
	gen := uint64(r.cfg.Now().UnixNano())
	if gen <= r.lastGen {
		gen = r.lastGen + 1
	}
	r.lastGen, r.generation = gen, gen
	r.mu.Unlock()

	mlLog := log.New(newMemberlistLog(r.log, r.metrics, r.suspected), "", 0)
	nt, err := memberlist.NewNetTransport(&memberlist.NetTransportConfig{
		BindAddrs: []string{r.bind.Addr().String()},
		BindPort:  int(r.bind.Port()),
		Logger:    mlLog,
	})
	if err != nil {
		return nil, fmt.Errorf("SWIM listen on %s: %w", r.bind, err)
	}
	conf := memberlist.DefaultLANConfig()
	if encrypted {
		kr, err := r.buildKeyring()
		if err != nil {
			_ = nt.Shutdown()
			return nil, err
		}
		conf.Keyring = kr
		conf.GossipVerifyIncoming, conf.GossipVerifyOutgoing = true, true
	}
	conf.Name = memberName(r.cfg.Site, gen)
	gate := newStreamGate(r.cfg.Gate, conf.Keyring, r.cfg.Now, func(reason string) {
		r.metrics.rejected.WithLabelValues(reason).Inc()
	})
	tr := newCountingTransport(nt, r.metrics, gate)
	tr.checkPeer = r.cfg.CheckPeer
	conf.Transport = tr
	r.mu.Lock()
	r.tr = tr
	r.mu.Unlock()
	conf.AdvertiseAddr = r.advertise.Addr().String()
	conf.AdvertisePort = int(r.advertise.Port())
	if conf.AdvertisePort == 0 {
		conf.AdvertisePort = nt.GetAutoBindPort()
		r.mu.Lock()
		r.advertise = netip.AddrPortFrom(r.advertise.Addr(), uint16(conf.AdvertisePort))
		r.mu.Unlock()
	}
	conf.ProbeInterval = r.cfg.ProbeInterval
	conf.ProbeTimeout = r.cfg.ProbeTimeout
	// Membership's own suspicion (scaled by the grid's size) is at least
	// the reference's window; the site view applies the window itself,
	// unscaled (see sweep).
	conf.SuspicionMult = r.cfg.SuspectPeriods
	conf.GossipInterval = r.cfg.GossipInterval
	conf.PushPullInterval = r.cfg.PushPullInterval
	conf.Logger = mlLog
	conf.LogOutput = nil
	conf.DeadNodeReclaimTime = time.Nanosecond
	// The state messages are small JSON and the idle traffic a few bytes
	// a second; compressing every packet cost more CPU than it saved.
	conf.EnableCompression = false
	d := &delegate{r: r}
	conf.Delegate = d
	conf.Events = d
	conf.Merge = d
	conf.Alive = d
	ml, err := memberlist.Create(conf)
	if err != nil {
		_ = nt.Shutdown()
		return nil, fmt.Errorf("start SWIM: %w", err)
	}
	r.mu.Lock()
	r.ml = ml
	r.keyring = conf.Keyring
	r.encrypted = encrypted
	r.queue = &memberlist.TransmitLimitedQueue{NumNodes: ml.NumMembers, RetransmitMult: conf.RetransmitMult}
	r.mu.Unlock()
	r.metrics.generation.Set(float64(gen))
	if encrypted {
		r.metrics.encrypted.Set(1)
		r.metrics.keysInstalled.Set(float64(len(conf.Keyring.GetKeys())))
	} else {
		r.metrics.encrypted.Set(0)
		r.metrics.keysInstalled.Set(0)
		r.log.Warn("swim_plaintext", "why", "no network declares spec.tls.swimKeySecretRef and no GRID_SWIM_ENCRYPT_KEY is set: gossip is neither encrypted nor authenticated")
	}
	return ml, nil
}

func (r *Runtime) shutdown(ml *memberlist.Memberlist) {
	if !r.vanish.Load() {
		r.mu.Lock()
		self := memberName(r.cfg.Site, r.generation)
		r.mu.Unlock()
		r.broadcastNotice(noticeBody{Member: self, Leaving: true, At: r.clock.next()})
		if err := ml.Leave(2 * time.Second); err != nil {
			r.log.Warn("swim_leave_failed", "error", err)
		}
	}
	if err := ml.Shutdown(); err != nil {
		r.log.Warn("swim_shutdown_failed", "error", err)
	}
	r.mu.Lock()
	r.ml, r.queue = nil, nil
	r.members = map[string]*member{}
	r.mu.Unlock()
	r.metrics.generation.Set(0)
	r.metrics.encrypted.Set(0)
	for _, s := range []sites.SiteState{sites.SiteAlive, sites.SiteSuspect, sites.SiteDead, sites.SiteLeft} {
		r.metrics.sites.WithLabelValues(string(s)).Set(0)
	}
	r.log.Info("swim_stopped", "site", r.cfg.Site)
}

// desiredKeys is the keyring the networks and the environment ask for:
// the environment's key is primary while set, else the primary of the
// first network (by name) with a key; every key of every network
// decrypts. One membership serves every network of the site.
func (r *Runtime) desiredKeys() (primary []byte, all [][]byte) {
	if r.cfg.EnvKey != nil {
		primary = r.cfg.EnvKey
		all = append(all, r.cfg.EnvKey)
	}
	names := make([]string, 0, len(r.netKeys))
	for n := range r.netKeys {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		ks := r.netKeys[n]
		if primary == nil {
			primary = ks.Primary
		}
		for _, k := range ks.All() {
			if !swimkeys.Contains(all, k) {
				all = append(all, k)
			}
		}
	}
	return primary, all
}

func (r *Runtime) buildKeyring() (*memberlist.Keyring, error) {
	r.mu.Lock()
	primary, all := r.desiredKeys()
	r.mu.Unlock()
	var others [][]byte
	for _, k := range all {
		if !slices.Equal(k, primary) {
			others = append(others, k)
		}
	}
	return memberlist.NewKeyring(others, primary)
}

// applyKeys brings the live keyring to the desired keys: new keys are
// installed first, then the primary switched, then retired keys removed,
// so that no packet in flight is refused. With no key left configured the
// last ones stay: a running membership never falls back to the clear.
func (r *Runtime) applyKeys() {
	r.mu.Lock()
	kr := r.keyring
	primary, all := r.desiredKeys()
	r.mu.Unlock()
	if kr == nil || primary == nil {
		return
	}
	installed := kr.GetKeys()
	for _, k := range all {
		if !swimkeys.Contains(installed, k) {
			if err := kr.AddKey(k); err != nil {
				r.log.Error("swim_key_install_failed", "error", err)
				return
			}
			r.log.Info("swim_key_installed", "keys", len(kr.GetKeys()))
		}
	}
	if !slices.Equal(kr.GetPrimaryKey(), primary) {
		if err := kr.UseKey(primary); err != nil {
			r.log.Error("swim_key_switch_failed", "error", err)
			return
		}
		r.log.Info("swim_primary_key_switched", "keys", len(kr.GetKeys()))
	}
	for _, k := range kr.GetKeys() {
		if !swimkeys.Contains(all, k) {
			if err := kr.RemoveKey(k); err != nil {
				r.log.Error("swim_key_remove_failed", "error", err)
				continue
			}
			r.log.Info("swim_key_removed", "keys", len(kr.GetKeys()))
		}
	}
	r.metrics.keysInstalled.Set(float64(len(kr.GetKeys())))
}

// SetNetworkKeys records a network's SWIM keys: ks nil means the network
// declares no key (which alone releases the hold to the clear), failed
// means it declares one that did not load (which keeps the hold, and never
// lets the clear in).
func (r *Runtime) SetNetworkKeys(network string, ks *swimkeys.Set, failed bool) {
	r.mu.Lock()
	delete(r.netKeys, network)
	delete(r.netKeyFail, network)
	delete(r.netNoKey, network)
	switch {
	case failed:
		r.netKeyFail[network] = true
	case ks != nil:
		r.netKeys[network] = ks
	default:
		r.netNoKey[network] = true
	}
	r.mu.Unlock()
	r.updateKeyPending()
	r.poke()
}

// AnnounceSeeds joins a network's resolved seed addresses (this site's
// own address removed) that are not already alive members. The set is
// remembered and joined again when the node restarts. Removing a seed
// does not disconnect its site.
func (r *Runtime) AnnounceSeeds(network string, addrs []string) sites.SeedResult {
	return r.announceSeeds(network, addrs)
}

// RejoinSeeds joins the network's last announced seeds again: what a
// network whose every seed entry failed to resolve keeps.
func (r *Runtime) RejoinSeeds(network string) sites.SeedResult {
	r.mu.Lock()
	addrs := r.seeds[network]
	r.mu.Unlock()
	return r.announceSeeds(network, addrs)
}

func (r *Runtime) announceSeeds(network string, addrs []string) sites.SeedResult {
	own := r.AdvertiseAddr()
	addrs = slices.DeleteFunc(slices.Clone(addrs), func(a string) bool { return a == own })
	r.mu.Lock()
	r.seeds[network] = addrs
	ml := r.ml
	r.mu.Unlock()
	if ml == nil {
		return sites.SeedResult{}
	}
	return r.join(ml, addrs)
}

func (r *Runtime) joinAll(ctx context.Context) {
	r.mu.Lock()
	ml := r.ml
	var addrs []string
	for _, s := range r.seeds {
		addrs = append(addrs, s...)
	}
	r.mu.Unlock()
	resolved, problems := seeds.Resolve(ctx, r.cfg.Resolver, r.cfg.Seeds, seeds.DefaultTimeout, seeds.DefaultTotalTimeout)
	for _, p := range problems {
		r.log.Warn("swim_seed_skipped", "source", "GRID_SWIM_SEEDS", "entry", p.Entry, "error", p.Err.Error())
	}
	addrs = append(addrs, resolved...)
	slices.Sort(addrs)
	own := r.AdvertiseAddr()
	addrs = slices.DeleteFunc(slices.Compact(addrs), func(a string) bool { return a == own })
	if ml != nil && len(addrs) > 0 {
		res := r.join(ml, addrs)
		r.log.Info("swim_seeds_joined", "joined", len(res.Joined), "failed", len(res.Failed))
	}
}

// join joins each address not already an alive member, concurrently and
// off the caller's path: it waits at most JoinWait for the joins it
// starts, and a join still running then goes on in the background (its
// outcome is remembered for the next call, and the networks are told). An
// address whose join is in flight is not dialled again, and one that just
// failed is left alone for seedRetry: a seed that accepts a connection and
// never answers holds a join for memberlist's TCP timeout, never the
// reconcile of every network.
func (r *Runtime) join(ml *memberlist.Memberlist, addrs []string) sites.SeedResult {
	alive := map[string]bool{}
	for _, n := range r.aliveNodes("") {
		alive[n.Address()] = true
	}
	var res sites.SeedResult
	now := r.cfg.Now()
	var started []chan struct{}
	var startedAddrs []string
	for _, a := range addrs {
		if alive[a] {
			continue
		}
		r.mu.Lock()
		failure, failed := r.joinFailed[a]
		done, inFlight := r.joining[a]
		if !inFlight && (!failed || now.Sub(failure.at) >= seedRetry) {
			done = make(chan struct{})
			r.joining[a] = done
		}
		r.mu.Unlock()
		switch {
		case inFlight:
			started = append(started, done)
			startedAddrs = append(startedAddrs, a)
			continue
		case failed && now.Sub(failure.at) < seedRetry:
			res.Failed = append(res.Failed, seeds.Problem{Entry: a, Err: failure.err})
			res.Conflict = res.Conflict || failure.conflict
			continue
		}
		started = append(started, done)
		startedAddrs = append(startedAddrs, a)
		go r.joinOne(ml, a, done)
	}
	deadline := time.After(r.cfg.JoinWait)
	var finished []string
	for i, done := range started {
		select {
		case <-done:
			finished = append(finished, startedAddrs[i])
			continue
		default:
		}
		select {
		case <-done:
			finished = append(finished, startedAddrs[i])
		case <-deadline:
			res.Pending = append(res.Pending, startedAddrs[i])
		}
	}
	r.mu.Lock()
	for _, a := range finished {
		if f, ok := r.joinFailed[a]; ok {
			res.Failed = append(res.Failed, seeds.Problem{Entry: a, Err: f.err})
			res.Conflict = res.Conflict || f.conflict
		} else {
			res.Joined = append(res.Joined, a)
		}
	}
	r.mu.Unlock()
	slices.Sort(res.Joined)
	return res
}

// joinFailure is a seed's last failed join.
type joinFailure struct {
	at       time.Time
	err      error
	conflict bool
}

// joinOne joins one address and remembers the outcome. A join counts only
// when another member answered: a seed that reflects this site's own
// request (a TCP echo service) is not a member.
func (r *Runtime) joinOne(ml *memberlist.Memberlist, a string, done chan struct{}) {
	// The transport stamps an echo with the wall clock: so is the join.
	start := time.Now()
	_, err := ml.Join([]string{a})
	if err == nil && r.transport().reflectedSince(a, start) {
		err = errors.New("the seed answered with this site's own join request (an echo, not a member)")
	}
	r.mu.Lock()
	before, hadFailed := r.joinFailed[a]
	if err != nil {
		r.joinFailed[a] = joinFailure{at: r.cfg.Now(), err: err, conflict: strings.Contains(err.Error(), errGridIDConflict.Error())}
	} else {
		delete(r.joinFailed, a)
	}
	delete(r.joining, a)
	networks := r.networksSeeding(a)
	r.mu.Unlock()
	close(done)
	if err != nil {
		r.metrics.seedJoinFailures.Inc()
	}
	// The networks' status changes only when the outcome does.
	if (err == nil) == hadFailed || err != nil && before.err != nil && before.err.Error() != err.Error() {
		for _, n := range networks {
			r.notify.send(n)
		}
	}
}

// networksSeeding are the networks that announced address a (r.mu held).
func (r *Runtime) networksSeeding(a string) []string {
	var out []string
	for n, addrs := range r.seeds {
		if slices.Contains(addrs, a) {
			out = append(out, n)
		}
	}
	return out
}

func (r *Runtime) transport() *countingTransport {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.tr
}

// SetGatewayAddress sets the data-plane gateway address this site
// advertises in every network.
func (r *Runtime) SetGatewayAddress(addr string) {
	r.mu.Lock()
	if r.gatewayAddr == addr {
		r.mu.Unlock()
		return
	}
	r.gatewayAddr = addr
	networks := make([]string, 0, len(r.locals))
	for n := range r.locals {
		networks = append(networks, n)
	}
	r.mu.Unlock()
	sort.Strings(networks)
	for _, n := range networks {
		r.mu.Lock()
		l := r.locals[n]
		r.mu.Unlock()
		r.announce(n, l)
	}
	r.log.Info("swim_gateway_address", "address", addr)
}

// Publish announces this site's state in a network: its public
// certificate (tls.crt of the site Secret, never a key) and its
// providers. Only what changed is sent.
// PublishSignals gossips this site's provider signals in a network
// (signalTransport gossip). Ages are as of now.
func (r *Runtime) PublishSignals(network string, signals []sites.Signal) error {
	if len(signals) > maxSignals {
		return fmt.Errorf("%d signals: at most %d ride membership", len(signals), maxSignals)
	}
	sg := slices.Clone(signals)
	r.putLocal(Record{Network: network, Site: r.cfg.Site, Kind: KindSignals, Signals: sg})
	return nil
}

func (r *Runtime) Publish(network, certPEM string, providers []sites.Provider) error {
	if classifyPEM(certPEM) == certPrivateKey {
		return errors.New("the site certificate holds a private key: it is never gossiped")
	}
	ps := make([]sites.Provider, len(providers))
	copy(ps, providers)
	for i := range ps {
		ps[i].Models = slices.Clone(ps[i].Models)
		slices.Sort(ps[i].Models)
	}
	sort.Slice(ps, func(i, j int) bool { return ps[i].Name < ps[j].Name })
	l := localState{certPEM: certPEM, providers: ps}
	r.mu.Lock()
	r.locals[network] = l
	r.mu.Unlock()
	r.announce(network, l)
	return nil
}

func (r *Runtime) announce(network string, l localState) {
	r.mu.Lock()
	gw := r.gatewayAddr
	r.mu.Unlock()
	site := Record{Network: network, Site: r.cfg.Site, Kind: KindSite, GatewayAddress: gw, CertPEM: l.certPEM}
	provs := Record{Network: network, Site: r.cfg.Site, Kind: KindProviders, Providers: l.providers}
	for _, rec := range []Record{site, provs} {
		r.putLocal(rec)
	}
}

// putLocal stores and sends one of this site's records when its content
// changed.
func (r *Runtime) putLocal(rec Record) {
	if cur, ok := r.store.get(rec.key()); ok {
		cur.Version, rec.Version = 0, 0
		if equalRecords(&cur, &rec) {
			return
		}
	}
	rec.Version = r.clock.next()
	r.store.merge(rec, r.cfg.Now())
	r.send(rec)
}

// Forget withdraws this site from a network: its records become
// tombstones, and the network's key and seeds are dropped.
func (r *Runtime) Forget(network string) {
	r.mu.Lock()
	_, had := r.locals[network]
	delete(r.locals, network)
	delete(r.seeds, network)
	delete(r.netKeys, network)
	delete(r.netKeyFail, network)
	delete(r.netNoKey, network)
	delete(r.departed, network)
	r.mu.Unlock()
	r.updateKeyPending()
	r.poke()
	if !had {
		return
	}
	for _, k := range recordKinds {
		r.putLocal(Record{Network: network, Site: r.cfg.Site, Kind: k, Deleted: true})
	}
}

// send disseminates a record of this site: by epidemic gossip when it
// fits a packet, else directly to every member.
func (r *Runtime) send(rec Record) {
	direct, err := encodeDirectRecords([]Record{rec})
	if err != nil {
		r.log.Error("swim_encode_failed", "error", err)
		return
	}
	r.mu.Lock()
	q, ml := r.queue, r.ml
	r.mu.Unlock()
	if ml == nil {
		return // sent with the full state when the node joins
	}
	// Straight to every member: gossip shares packets with membership's
	// own messages, which come first, so a change could wait behind a
	// busy grid's; a direct copy does not. Receivers do not pass a
	// direct copy on.
	go r.sendReliable(ml, r.aliveNodes(""), direct)
	// And by epidemic gossip when it fits a packet, for a member the
	// direct copy missed.
	if msg, err := encodeRecords([]Record{rec}); err == nil && len(msg) <= maxGossipRecordBytes {
		q.QueueBroadcast(&recordBroadcast{key: rec.key(), msg: msg})
		r.metrics.sends.WithLabelValues("gossip").Inc()
	}
}

// aliveNodes are the current members of the alive remote sites (or only
// the one named), built from what the member events said: the nodes
// memberlist's Members returns are its own, written while it runs.
func (r *Runtime) aliveNodes(only string) []*memberlist.Node {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []*memberlist.Node
	for _, m := range r.members {
		if m.state != sites.SiteAlive || only != "" && m.name != only {
			continue
		}
		ap, err := netip.ParseAddrPort(m.addr)
		if err != nil {
			continue
		}
		out = append(out, &memberlist.Node{Name: m.name, Addr: ap.Addr().AsSlice(), Port: ap.Port()})
	}
	return out
}

// sendReliable sends msg over TCP to every given member but this one, a
// few at a time.
func (r *Runtime) sendReliable(ml *memberlist.Memberlist, to []*memberlist.Node, msg []byte) {
	sem := make(chan struct{}, 16)
	var wg sync.WaitGroup
	for _, n := range to {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if err := ml.SendReliable(n, msg); err != nil {
				r.log.Debug("swim_send_failed", "to", n.Name, "error", err)
				return
			}
			r.metrics.sends.WithLabelValues("reliable").Inc()
		}()
	}
	wg.Wait()
}

// sendOwnTo sends every record of this site to one member.
func (r *Runtime) sendOwnTo(member string) {
	own := r.store.ofSite(r.cfg.Site)
	r.mu.Lock()
	ml := r.ml
	r.mu.Unlock()
	to := r.aliveNodes(member)
	if len(own) == 0 || ml == nil || len(to) == 0 {
		return
	}
	msg, err := encodeDirectRecords(own)
	if err != nil {
		return
	}
	r.sendReliable(ml, to, msg)
}

// receive merges records from a peer. Records of this site are its own
// to write, and ignored. regossip sends what was news on by epidemic
// broadcast.
func (r *Runtime) receive(records []Record, regossip bool) {
	now := r.cfg.Now()
	changed := map[string]bool{}
	for _, rec := range records {
		if rec.Site == r.cfg.Site {
			continue
		}
		if classifyPEM(rec.CertPEM) == certPrivateKey {
			// Never kept, never passed on: the record goes on without it.
			r.metrics.dropped.WithLabelValues(dropPrivateKey).Inc()
			r.log.Error("swim_private_key_discarded", "site", rec.Site, "network", rec.Network,
				"why", "a gossiped certificate PEM carries a private key; it is discarded")
			rec.CertPEM = ""
		}
		ok, refused := r.store.mergeCapped(rec, now, true)
		if refused != "" {
			r.overCap(rec, refused)
			continue
		}
		if ok {
			changed[rec.Network] = true
			if regossip {
				if msg, err := encodeRecords([]Record{rec}); err == nil && len(msg) <= maxGossipRecordBytes {
					r.mu.Lock()
					q := r.queue
					r.mu.Unlock()
					if q != nil {
						q.QueueBroadcast(&recordBroadcast{key: rec.key(), msg: msg})
					}
				}
			}
		}
	}
	r.metrics.records.Set(float64(r.store.count()))
	for n := range changed {
		r.notify.send(n)
	}
}

// overCap counts a record dropped for a cap, and says so once per site
// and reason (a flood of invented records is one line, not thousands).
func (r *Runtime) overCap(rec Record, reason string) {
	r.metrics.dropped.WithLabelValues(reason).Inc()
	r.mu.Lock()
	defer r.mu.Unlock()
	key := reason + "/" + rec.Site
	if r.capSaid[key] || len(r.capSaid) >= maxCapLines {
		return
	}
	r.capSaid[key] = true
	r.log.Warn("swim_records_over_cap", "site", rec.Site, "network", rec.Network, "reason", reason,
		"limits", fmt.Sprintf("%d sites per network, %d networks per site, %d records, %d MiB", maxSitesPerNetwork, maxNetworksPerSite, maxRecords, maxRecordBytes>>20))
}

// maxCapLines bounds the sites whose cap is reported in the log.
const maxCapLines = 256

// sweep applies the suspicion window and the stale TTL, expires
// tombstones and refreshes the site gauges, four times a second.
func (r *Runtime) sweep() {
	now := r.cfg.Now()
	window := time.Duration(r.cfg.SuspectPeriods) * r.cfg.ProbeInterval
	r.mu.Lock()
	ml := r.ml
	r.mu.Unlock()
	if ml == nil {
		return
	}
	var changedSites []string
	r.mu.Lock()
	for site, m := range r.members {
		if m.state == sites.SiteSuspect && now.Sub(m.since) >= window {
			r.log.Info("swim_site_state", "site", site, "generation", m.generation, "from", string(m.state), "to", string(sites.SiteDead))
			m.state, m.since = sites.SiteDead, now
			changedSites = append(changedSites, site)
		}
	}
	r.siteGaugesLocked()
	r.mu.Unlock()

	// Records of sites away longer than the stale TTL are dropped.
	for _, site := range r.store.siteNames() {
		if site == r.cfg.Site {
			continue
		}
		r.mu.Lock()
		m := r.members[site]
		away := m == nil || m.state != sites.SiteAlive
		if !away {
			delete(r.awaySince, site)
			r.mu.Unlock()
			continue
		}
		since, ok := r.awaySince[site]
		if !ok {
			r.awaySince[site] = now
			since = now
		}
		r.mu.Unlock()
		if now.Sub(since) >= r.cfg.StaleTTL {
			networks := r.store.dropSite(site)
			r.mu.Lock()
			delete(r.awaySince, site)
			// The site stays known to its networks (dead, no records):
			// departure is evidence, and the network stays Degraded.
			for _, n := range networks {
				if r.departed[n] == nil {
					r.departed[n] = map[string]bool{}
				}
				r.departed[n][site] = true
			}
			r.mu.Unlock()
			r.log.Info("swim_site_records_dropped", "site", site, "networks", networks, "away_for", now.Sub(since).String())
			for _, n := range networks {
				r.notify.send(n)
			}
		}
	}
	if n := r.store.expire(now, r.cfg.TombstoneTTL); n > 0 {
		r.log.Debug("swim_tombstones_expired", "count", n)
	}
	r.metrics.records.Set(float64(r.store.count()))
	r.notifySites(changedSites)
}

// suspected is called when this site's probe of a member failed: every
// site is told, so that the whole grid sees the suspicion memberlist
// keeps to itself.
func (r *Runtime) suspected(name string) {
	n := noticeBody{Member: name, Suspect: true, At: r.clock.next()}
	r.applyNotice(n)
	r.broadcastNotice(n)
	// Straight to every member as well: each site starts its window when
	// the notice arrives, and gossip would take a second to reach the
	// last one.
	msg, err := encodeNotice(n)
	r.mu.Lock()
	ml := r.ml
	r.mu.Unlock()
	if err == nil && ml != nil {
		go r.sendReliable(ml, r.aliveNodes(""), msg)
	}
}

// applyNotice records a suspicion or its refutation. A site that learns it
// is suspected answers that it is alive.
func (r *Runtime) applyNotice(n noticeBody) {
	r.mu.Lock()
	if r.ml != nil && n.Member == memberName(r.cfg.Site, r.generation) {
		r.mu.Unlock()
		if n.Suspect {
			r.broadcastNotice(noticeBody{Member: n.Member, At: r.clock.next()})
		}
		return
	}
	site := siteOfMember(n.Member)
	m := r.members[site]
	if m == nil || m.name != n.Member {
		r.mu.Unlock()
		return // not the site's current generation
	}
	now := r.cfg.Now()
	changed, fresh := false, false
	switch {
	case n.Leaving:
		fresh = !m.leaving
		m.leaving = true
		// The leave itself may have come first (memberlist puts its own
		// messages before ours in a packet), and was taken for a death:
		// a site that is gone and said it was leaving has left.
		if m.state == sites.SiteDead {
			m.state, m.since, changed = sites.SiteLeft, now, true
		}
	case n.Suspect && n.At > m.suspectAt:
		m.suspectAt, fresh = n.At, true
		if m.state == sites.SiteAlive {
			m.state, m.since, changed = sites.SiteSuspect, now, true
		}
	case !n.Suspect && n.At > m.aliveAt:
		m.aliveAt, fresh = n.At, true
		if m.state == sites.SiteSuspect || m.state == sites.SiteDead {
			m.state, m.since, changed = sites.SiteAlive, now, true
		}
	}
	state := m.state
	r.mu.Unlock()
	if fresh {
		r.broadcastNotice(n) // passed on, as gossip is
	}
	if changed {
		r.log.Info("swim_site_state", "site", site, "member", n.Member, "to", string(state))
		r.notifySites([]string{site})
	}
}

func (r *Runtime) broadcastNotice(n noticeBody) {
	msg, err := encodeNotice(n)
	if err != nil {
		return
	}
	r.mu.Lock()
	q := r.queue
	r.mu.Unlock()
	if q != nil {
		q.QueueBroadcast(&noticeBroadcast{member: n.Member, suspect: n.Suspect, leaving: n.Leaving, msg: msg})
	}
}

// noticeBroadcast is a notice in the broadcast queue; a newer notice of
// the same kind on the same member replaces it.
type noticeBroadcast struct {
	member           string
	suspect, leaving bool
	msg              []byte
}

func (b *noticeBroadcast) Invalidates(o memberlist.Broadcast) bool {
	ob, ok := o.(*noticeBroadcast)
	return ok && ob.member == b.member && ob.suspect == b.suspect && ob.leaving == b.leaving
}
func (b *noticeBroadcast) Message() []byte { return b.msg }
func (b *noticeBroadcast) Finished()       {}

// siteGaugesLocked sets grid_swim_sites from the members (r.mu held).
func (r *Runtime) siteGaugesLocked() {
	counts := map[sites.SiteState]int{}
	for _, m := range r.members {
		counts[m.state]++
	}
	for _, s := range []sites.SiteState{sites.SiteAlive, sites.SiteSuspect, sites.SiteDead, sites.SiteLeft} {
		r.metrics.sites.WithLabelValues(string(s)).Set(float64(counts[s]))
	}
}

// notifySites tells the networks that a site has records in that its
// state changed, and refreshes the site gauges.
func (r *Runtime) notifySites(names []string) {
	if len(names) == 0 {
		return
	}
	r.mu.Lock()
	r.siteGaugesLocked()
	r.mu.Unlock()
	for _, s := range names {
		for _, n := range r.store.networksOf(s) {
			r.notify.send(n)
		}
	}
}

// View is what membership knows of a network: the remote sites that
// announced it, their states and their provider records.
func (r *Runtime) View(network string) sites.NetworkView {
	r.mu.Lock()
	_, released := r.releasedLocked()
	v := sites.NetworkView{Enabled: true, Running: r.ml != nil, KeyPending: r.leading && !released}
	members := make(map[string]member, len(r.members))
	for s, m := range r.members {
		members[s] = *m
	}
	departed := make([]string, 0, len(r.departed[network]))
	for s := range r.departed[network] {
		departed = append(departed, s)
	}
	r.mu.Unlock()
	known := map[string]*sites.Site{}
	for _, name := range departed {
		s := &sites.Site{Name: name, State: sites.SiteDead}
		if m, ok := members[name]; ok {
			s.Generation, s.State, s.Since, s.SwimAddress = m.generation, m.state, m.since, m.addr
		}
		known[name] = s
	}
	for _, rec := range r.store.ofNetwork(network) {
		if rec.Site == r.cfg.Site || rec.Deleted {
			continue
		}
		s := known[rec.Site]
		if s == nil {
			s = &sites.Site{Name: rec.Site, State: sites.SiteUnknown}
			if m, ok := members[rec.Site]; ok {
				s.Generation, s.State, s.Since, s.SwimAddress = m.generation, m.state, m.since, m.addr
			}
			known[rec.Site] = s
		}
		switch rec.Kind {
		case KindSite:
			s.GatewayAddress = rec.GatewayAddress
			switch classifyPEM(rec.CertPEM) {
			case certValid:
				s.CertPEM = rec.CertPEM
			case certInvalid:
				s.CertInvalid = true
			}
		case KindProviders:
			for _, p := range rec.Providers {
				v.Providers = append(v.Providers, sites.RemoteProvider{Site: rec.Site, Provider: p})
			}
		case KindSignals:
			if len(rec.Signals) > 0 {
				v.Signals = append(v.Signals, sites.RemoteSignals{Site: rec.Site, Version: rec.Version, Signals: rec.Signals})
			}
		}
	}
	for _, s := range known {
		v.Sites = append(v.Sites, *s)
	}
	for i := range v.Providers {
		v.Providers[i].Stale = known[v.Providers[i].Site].State != sites.SiteAlive
	}
	sortView(&v)
	return v
}

// Status is the runtime's state for /status.
func (r *Runtime) Status() Status {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, released := r.releasedLocked()
	st := Status{
		Enabled: true, Running: r.ml != nil, KeyPending: r.leading && !released, Encrypted: r.ml != nil && r.encrypted,
		Site: r.cfg.Site, GridID: r.grid.ID, AdvertiseAddr: r.advertise.String(), GatewayAddress: r.gatewayAddr,
		Members: []MemberStatus{},
	}
	if r.ml != nil {
		st.Generation = r.generation
	}
	if r.keyring != nil && r.ml != nil {
		st.KeysInstalled = len(r.keyring.GetKeys())
	}
	for site, m := range r.members {
		st.Members = append(st.Members, MemberStatus{Site: site, Generation: m.generation, State: m.state, Address: m.addr})
	}
	sort.Slice(st.Members, func(i, j int) bool { return st.Members[i].Site < st.Members[j].Site })
	st.Records = r.store.count()
	return st
}

// GridID is the grid this site belongs to; empty until negotiated.
func (r *Runtime) GridID() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.grid.ID
}

// recordBroadcast is a record in memberlist's broadcast queue; a newer
// version of the same record replaces it there.
type recordBroadcast struct {
	key recordKey
	msg []byte
}

func (b *recordBroadcast) Invalidates(o memberlist.Broadcast) bool {
	ob, ok := o.(*recordBroadcast)
	return ok && ob.key == b.key
}
func (b *recordBroadcast) Message() []byte { return b.msg }
func (b *recordBroadcast) Finished()       {}

func equalRecords(a, b *Record) bool {
	ea, _ := encodeRecords([]Record{*a})
	eb, _ := encodeRecords([]Record{*b})
	return string(ea) == string(eb)
}

// hostPort formats a memberlist node's address.
func hostPort(n *memberlist.Node) string {
	return net.JoinHostPort(n.Addr.String(), strconv.Itoa(int(n.Port)))
}
