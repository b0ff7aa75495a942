// Package gossip is the agent's SWIM runtime: one memberlist node per
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
package gossip

import (
	"context"
	"fmt"
	"log"
	"log/slog"
	"net"
	"net/netip"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/gridsync/gridsync/gossip/internal/streamgate"
	"github.com/gridsync/gridsync/gossip/internal/verifyqueue"
	"github.com/gridsync/gridsync/gossip/record"
	"github.com/gridsync/gridsync/gossip/seeds"
	"github.com/gridsync/gridsync/gossip/sites"
	"github.com/gridsync/gridsync/gossip/swimkeys"
	"github.com/gridsync/gridsync/trust/bundle"
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
	// GossipNodes is how many peers each gossip round goes to.
	GossipNodes int
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
	// DeadMemory is how long memberlist still gossips to a dead member
	// before it forgets it (memberlist's GossipToTheDeadTime, 30 s when
	// zero); from then on only a dial brings the member back
	// (reconnect.go). Tests shorten it.
	DeadMemory time.Duration
	// ReconnectInterval is how often a site dials one of the sites it
	// holds dead (jittered by half either way), and ReconnectMaxBackoff
	// how long one that keeps failing may be left alone
	// (DefaultReconnectInterval, DefaultReconnectMaxBackoff).
	ReconnectInterval   time.Duration
	ReconnectMaxBackoff time.Duration
	// JoinWait is how long announcing seeds waits for the joins it starts
	// before they go on in the background (DefaultJoinWait).
	JoinWait time.Duration
	// CheckPeer, when set, refuses to send to or dial a member address it
	// returns an error for: members' addresses come from gossip, so the
	// agent applies its probe destination rule to them (loopback,
	// link-local and metadata addresses unless a CIDR allows them).
	CheckPeer func(netip.Addr) error

	// Trust holds each network's trust bundle (the sites its issuer
	// evicted): records of an evicted site are refused and those held
	// dropped, and this site passes on the newest bundle it holds in its
	// site record. Nil: no bundle is read or passed on.
	Trust *bundle.Book

	// InNetwork, when set, runs fn with the calling thread in the network
	// this site's sockets belong to: the listeners are created and every
	// stream dialled inside it. Tests and benchmarks put each of many
	// sites of one process in a network namespace of its own this way;
	// an agent leaves it nil (its process's network).
	InNetwork func(fn func() error) error

	Resolver   seeds.Resolver
	Logger     *slog.Logger
	Registerer prometheus.Registerer
	Now        func() time.Time
}

// Defaults of the timings.
const (
	DefaultProbeInterval  = 5 * time.Second
	DefaultProbeTimeout   = 3 * time.Second
	DefaultSuspectPeriods = 3
	DefaultGossipNodes    = 3
	DefaultGossipInterval = 200 * time.Millisecond
	// DefaultPushPullInterval is memberlist's own WAN default. Each
	// push/pull sends both sides' whole member list and record digest
	// (about 45 KB on the wire between 50 sites): at 30 s (a minute above
	// 32 sites) it was 738 of the 2,167 B/s each of 50 idle sites sent
	// over a 100 ms, 5 % loss WAN. Nothing waits for it: a change goes
	// straight to every member and a missed copy is sent again
	// (resend.go), a healed cut is found by the dials of dead sites
	// (reconnect.go), and memberlist's own gossip carries the members'
	// states.
	DefaultPushPullInterval = time.Minute
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
	if c.GossipNodes <= 0 {
		c.GossipNodes = DefaultGossipNodes
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
	if c.ReconnectInterval <= 0 {
		c.ReconnectInterval = DefaultReconnectInterval
	}
	if c.ReconnectMaxBackoff <= 0 {
		c.ReconnectMaxBackoff = DefaultReconnectMaxBackoff
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

// Runtime is the site's SWIM membership.
type Runtime struct {
	cfg       Config
	bind      netip.AddrPort
	advertise netip.AddrPort
	metrics   *metrics
	log       *slog.Logger
	store     *record.Store
	clock     record.VersionClock
	notify    *notifier
	verify    *verifyqueue.Queue

	mu         sync.Mutex
	ml         *memberlist.Memberlist
	queue      *memberlist.TransmitLimitedQueue
	keyring    *memberlist.Keyring
	encrypted  bool
	generation uint64
	grid       record.GridID
	leading    bool
	netKeys    map[string]*swimkeys.Set // networks whose key loaded
	netKeyFail map[string]bool          // networks whose declared key did not load
	netNoKey   map[string]bool          // networks that declare no key
	seeds      map[string][]string
	members    map[string]*member // by site
	awaySince  map[string]time.Time
	departed   map[string]map[string]bool // network -> sites whose records were dropped
	joinFailed map[string]joinFailure     // seed address -> last failed join
	joining    map[string]chan struct{}   // seed address -> join in flight, closed when done
	reconnects map[string]*reconnectState // dead site -> its dials' backoff
	// nextReconnect is when a dead site is dialled next; reconnecting
	// while a dial is in flight.
	nextReconnect time.Time
	reconnecting  bool
	// owed are the members a direct copy of this site's records did not
	// reach, with the backoff of sending them again (resend.go); resending
	// those being sent now.
	owed      map[string]*reconnectState
	resending map[string]bool
	// checked is when each member the view holds away (suspect or dead)
	// while memberlist holds it alive was last pinged (verify.go);
	// checking those being pinged now.
	checked     map[string]time.Time
	checking    map[string]bool
	tr          *streamgate.Transport
	gatewayAddr string
	locals      map[string]localState // what this site announced, per network
	settings    map[string]sites.NetworkSettings
	running     timings                         // the node's, as created
	said        map[string]bool                 // line/reason/site already logged (firstTime)
	trust       map[string]*record.NetworkTrust // how each network's records are signed and checked
	wake        chan struct{}
	lastGen     uint64
	sweeps      uint64     // only the run loop's goroutine counts them
	metaUpdates sync.Mutex // one memberlist UpdateNode at a time

	// vanish stops without leaving, as a killed process does (tests).
	vanish atomic.Bool
	// alive counts the members not dead or left, this site included, for
	// the broadcast queue's retransmit limit. The queue asks for it while
	// it holds its own lock; memberlist's NumMembers would take the node
	// lock there, and memberlist holds the node lock while it logs and
	// calls delegates that queue broadcasts: a lock-order cycle that
	// froze a 200-site grid. memberlist's own queue reads a counter too.
	alive atomic.Int64
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
		store:      record.NewStore(),
		clock:      record.VersionClock{Now: cfg.Now},
		netKeys:    map[string]*swimkeys.Set{},
		netKeyFail: map[string]bool{},
		netNoKey:   map[string]bool{},
		seeds:      map[string][]string{},
		members:    map[string]*member{},
		awaySince:  map[string]time.Time{},
		departed:   map[string]map[string]bool{},
		joinFailed: map[string]joinFailure{},
		joining:    map[string]chan struct{}{},
		reconnects: map[string]*reconnectState{},
		owed:       map[string]*reconnectState{},
		resending:  map[string]bool{},
		checked:    map[string]time.Time{},
		checking:   map[string]bool{},
		locals:     map[string]localState{},
		settings:   map[string]sites.NetworkSettings{},
		said:       map[string]bool{},
		trust:      map[string]*record.NetworkTrust{},
		wake:       make(chan struct{}, 1),
	}
	r.notify = newNotifier()
	r.verify = verifyqueue.New()
	r.updateKeyPending()
	if cfg.Trust != nil {
		// A new bundle is CA-signed and rare; following it costs a walk
		// of the network's records, off the goroutine that offered it.
		cfg.Trust.Subscribe(func(network string) { go r.followBundle(network) })
	}
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
	verifyCtx, stopVerifiers := context.WithCancel(ctx)
	waitVerifiers := r.startVerifiers(verifyCtx)
	defer waitVerifiers()
	defer stopVerifiers()
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
		"advertise", r.advertise.String(), "encrypted", encrypted, "keys", r.Status().KeysInstalled,
		"probe_interval", r.running.probe.String(), "suspicion", r.running.suspicion.String(), "gossip_nodes", r.running.gossipNodes)
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
			r.mu.Lock()
			retime := r.timingsLocked() != r.running
			r.mu.Unlock()
			if retime {
				r.log.Info("swim_restarting", "why", "a network's spec.swim changed the timings")
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

	mlLog := log.New(newMemberlistLog(r.log, r.metrics, r.suspected, r.refuted), "", 0)
	var nt *memberlist.NetTransport
	err := r.inNetwork(func() (err error) {
		nt, err = memberlist.NewNetTransport(&memberlist.NetTransportConfig{
			BindAddrs: []string{r.bind.Addr().String()},
			BindPort:  int(r.bind.Port()),
			Logger:    mlLog,
		})
		return err
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
	conf.Name = record.MemberName(r.cfg.Site, gen)
	gate := streamgate.NewGate(r.cfg.Gate, conf.Keyring, r.cfg.Now, func(reason string) {
		r.metrics.rejected.WithLabelValues(reason).Inc()
	})
	tr := streamgate.NewTransport(nt, streamgate.ByteCounters{
		UDPSent: r.metrics.bytesSent.WithLabelValues("udp"), UDPReceived: r.metrics.bytesReceived.WithLabelValues("udp"),
		TCPSent: r.metrics.bytesSent.WithLabelValues("tcp"), TCPReceived: r.metrics.bytesReceived.WithLabelValues("tcp"),
	}, gate)
	tr.CheckPeer = r.cfg.CheckPeer
	if r.cfg.InNetwork != nil {
		tr.Dial = func(addr string, timeout time.Duration) (c net.Conn, err error) {
			err = r.cfg.InNetwork(func() (err error) {
				c, err = nt.DialTimeout(addr, timeout)
				return err
			})
			return c, err
		}
	}
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
	r.mu.Lock()
	t := r.timingsLocked()
	r.running = t
	r.mu.Unlock()
	conf.ProbeInterval = t.probe
	conf.ProbeTimeout = t.probeTimeout
	// Membership's own suspicion (scaled by the grid's size) is at least
	// the reference's window; the site view applies the window itself,
	// unscaled (see sweep).
	conf.SuspicionMult = max(1, int((t.suspicion+t.probe-1)/t.probe))
	conf.GossipNodes = t.gossipNodes
	conf.GossipInterval = r.cfg.GossipInterval
	conf.PushPullInterval = r.cfg.PushPullInterval
	conf.Logger = mlLog
	conf.LogOutput = nil
	conf.DeadNodeReclaimTime = time.Nanosecond
	if r.cfg.DeadMemory > 0 {
		conf.GossipToTheDeadTime = r.cfg.DeadMemory
	}
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
	r.queue = &memberlist.TransmitLimitedQueue{NumNodes: r.numAlive, RetransmitMult: conf.RetransmitMult}
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

// inNetwork runs fn in the network of this site's sockets.
func (r *Runtime) inNetwork(fn func() error) error {
	if r.cfg.InNetwork == nil {
		return fn()
	}
	return r.cfg.InNetwork(fn)
}

func (r *Runtime) shutdown(ml *memberlist.Memberlist) {
	if !r.vanish.Load() {
		r.mu.Lock()
		self := record.MemberName(r.cfg.Site, r.generation)
		r.mu.Unlock()
		r.broadcastNotice(record.Notice{Member: self, Leaving: true, At: r.clock.Next()})
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

// numAlive is the broadcast queue's count of members (never below one:
// this site). It takes no lock.
func (r *Runtime) numAlive() int { return int(max(1, r.alive.Load())) }

func (r *Runtime) transport() *streamgate.Transport {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.tr
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
	st.Records = r.store.Count()
	return st
}

// GridID is the grid this site belongs to; empty until negotiated.
func (r *Runtime) GridID() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.grid.ID
}

// hostPort formats a memberlist node's address.
func hostPort(n *memberlist.Node) string {
	return net.JoinHostPort(n.Addr.String(), strconv.Itoa(int(n.Port)))
}
