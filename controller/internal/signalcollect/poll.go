package signalcollect

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"

	"github.com/gridsync/gridsync/api/v1alpha1"
	"github.com/gridsync/gridsync/controller/internal/base"
	"github.com/gridsync/gridsync/controller/internal/trustmaterial"
	"github.com/gridsync/gridsync/controller/probe"
	"github.com/gridsync/gridsync/gossip/sites"
	"github.com/gridsync/gridsync/shared/h3fallback"
	"github.com/gridsync/gridsync/shared/redial"
	"github.com/gridsync/gridsync/signals"
	"github.com/gridsync/gridsync/trust/sitetrust"
)

// Bounds of one poll of a peer's signals.
const (
	// PollMaxBytes bounds a peer's answer, as upstream's relay does.
	PollMaxBytes = 768 << 10
	// pollMaxProviders and pollMaxSamples bound what one peer may make
	// this site hold.
	pollMaxProviders = 64
	pollMaxSamples   = 4096
	pollTimeout      = 2 * time.Second
	// quicHeadStart is how long a poll waits for its QUIC handshake
	// before it dials HTTPS beside it: half the poll's bound. Over a
	// 100 ms round trip losing 10 % of its packets a whole poll over
	// HTTP/3 took 1,013 ms at p99, so a QUIC path that works is rarely
	// raced; a path that drops UDP leaves HTTPS the other half.
	quicHeadStart = time.Second
	// quicBackoff is how long a peer QUIC got no handshake from is
	// polled over HTTPS alone before QUIC is tried again: the price of
	// the try is one poll a second slower.
	quicBackoff = 5 * time.Minute
)

// Poller is signalTransport poll: every interval each agent reads
// the signals of every Active peer of a poll-mode network, at the peer's
// gossip-advertised host and the signals port, over mutual TLS with the
// site certificate, checking the peer as a site probe does (the grid CA,
// its name and its pin, or its SPIFFE ID); in SPIFFE mode only while
// SWIM runs encrypted. Only the rows the peer holds
// for its own site are kept, keyed by the verified site, never by what
// the body says; a sample's age is the answer's Date minus its stamp, so
// the two sites' clocks never meet.
//
// A poll goes over HTTP/3 first and over HTTPS when QUIC fails: over a
// lossy WAN a new TCP connection costs one more round trip and recovers
// from loss slower (a lost SYN waits a second), and a poll over HTTPS
// passed the 2 s bound where one over HTTP/3 did not. A peer whose path
// drops UDP is polled over HTTPS within the same poll, then over HTTPS
// alone for quicBackoff.
type Poller struct {
	c        *base.Env
	trust    *trustmaterial.Cache
	failures base.ReasonLog // by site
	// heard is when each site's gossiped signals record (by version) was
	// first read here: its samples' ages count from then.
	mu    sync.Mutex
	heard map[string]heardRecord

	polls, transports *prometheus.CounterVec
	// fallback is, by site, the peers polled over HTTPS alone for now;
	// overHTTPS logs a site's change of transport once.
	fallback  h3fallback.Memory
	overHTTPS base.ReasonLog
}

// NewPoller is the peers' signals reader; trust is the networks' trust
// material its polls present and check. It registers its metrics.
func NewPoller(c *base.Env, trust *trustmaterial.Cache) *Poller {
	p := &Poller{c: c, trust: trust, heard: map[string]heardRecord{}}
	p.polls = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "gridsync_signals_polls_total",
		Help: "Polls of peer sites' signals, by outcome (ok, no_address, gossip_unencrypted, trust_material, untrusted_peer, status, too_large, not_exposition, or a probe outcome: timeout, connection_refused, tls_error...).",
	}, []string{"outcome"})
	p.transports = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "gridsync_signals_poll_transports_total",
		Help: "Attempts of the polls of peer sites' signals, by transport (h3, https) and outcome (answered: the peer's answer came over it; failed: none came, and a poll whose QUIC failed goes on over https; abandoned: the other transport answered first).",
	}, []string{"transport", "outcome"})
	for _, tr := range []string{h3fallback.H3, h3fallback.HTTPS} {
		for _, o := range []string{attemptAnswered, attemptFailed, attemptAbandoned} {
			p.transports.WithLabelValues(tr, o)
		}
	}
	p.fallback.For = quicBackoff
	c.Opts.Registerer.MustRegister(p.polls, p.transports)
	return p
}

// Outcomes of one transport's attempt of a poll.
const (
	attemptAnswered  = "answered"
	attemptFailed    = "failed"
	attemptAbandoned = "abandoned"
)

func (p *Poller) round(ctx context.Context) {
	var networks v1alpha1.GridNetworkList
	if err := p.c.Client.List(ctx, &networks); err != nil {
		return
	}
	if p.c.Opts.Membership == nil {
		return
	}
	// The round's polls dial QUIC from one UDP socket, opened by the
	// first that needs it.
	udp := &quicSocket{}
	defer udp.close()
	var wg sync.WaitGroup
	for i := range networks.Items {
		n := &networks.Items[i]
		if transportMode(n) == v1alpha1.SignalTransportGossip {
			p.fromGossip(ctx, n)
			continue
		}
		sites, err := p.c.GridSitesOf(ctx, n.Name)
		if err != nil {
			continue
		}
		view := p.c.Opts.Membership.View(n.Name)
		// The host a poll dials is what gossip says. In SPIFFE mode,
		// which reads no pins, the reference has the operator wait for
		// encrypted gossip: in the clear anyone who reaches the SWIM port
		// could name the host, and the agent would dial it with its site
		// certificate.
		waitForEncryption := base.SpiffeMode(n) && !view.Encrypted
		for j := range sites {
			gs := &sites[j]
			if gs.Status.Phase != sitetrust.PhaseActive || !gs.DeletionTimestamp.IsZero() {
				continue
			}
			if waitForEncryption {
				p.fail(base.SiteOf(gs), "gossip_unencrypted", "peerTrust.mode spiffe polls a site only while SWIM gossip, which carries the address it dials, is encrypted: it runs in the clear (set spec.tls.swimKeySecretRef)")
				continue
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				p.poll(ctx, udp, n, gs, swimHost(view, base.SiteOf(gs)))
			}()
		}
	}
	wg.Wait()
}

func transportMode(n *v1alpha1.GridNetwork) v1alpha1.SignalTransportMode {
	if n.Spec.SignalTransport == nil || n.Spec.SignalTransport.Mode == "" {
		return v1alpha1.SignalTransportGossip
	}
	return n.Spec.SignalTransport.Mode
}

// swimHost is the host a site advertises for its SWIM: its signals are
// at the same host, on the signals port.
func swimHost(view sites.NetworkView, site string) string {
	for _, s := range view.Sites {
		if s.Name == site {
			if host, _, err := net.SplitHostPort(s.SwimAddress); err == nil {
				return host
			}
		}
	}
	return ""
}

func (p *Poller) poll(ctx context.Context, udp *quicSocket, n *v1alpha1.GridNetwork, gs *v1alpha1.GridSite, host string) {
	site := base.SiteOf(gs)
	if p.c.Opts.SignalsPeerPort == 0 {
		p.fail(site, "no_address", "no signals port is known for peers (--signals-peer-port)")
		return
	}
	if host == "" {
		p.fail(site, "no_address", "the site advertises no SWIM address to find its signals at")
		return
	}
	tm := p.trust.Get(ctx, n)
	if tm == nil || tm.Roots == nil || tm.Client == nil {
		p.fail(site, "trust_material", "this site has no grid CA or site certificate to poll with")
		return
	}
	target := sitetrust.Target{ServerName: sitetrust.DNSName(site), Roots: tm.Roots, Pins: base.PinsOf(gs), SPIFFE: base.SpiffeMode(n), Site: site}
	// The handshakes of both transports may run at once, HTTP/3's on a
	// goroutine of its own: the first refusal is kept.
	var verifyErr atomic.Pointer[error]
	cfg := &tls.Config{
		// VerifyConnection checks what a site probe checks, and names why
		// a peer is refused.
		InsecureSkipVerify: true, //nolint:gosec // verified in VerifyConnection
		ServerName:         target.ServerName,
		Certificates:       []tls.Certificate{*tm.Client},
		MinVersion:         tls.VersionTLS13,
		VerifyConnection: func(cs tls.ConnectionState) error {
			err := target.Verify(cs.PeerCertificates, time.Now())
			if err != nil {
				verifyErr.CompareAndSwap(nil, &err)
			}
			return err
		},
	}
	url := "https://" + net.JoinHostPort(host, fmt.Sprint(p.c.Opts.SignalsPeerPort)) + signals.Path
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, http.NoBody)
	if err != nil {
		p.fail(site, "no_address", err.Error())
		return
	}
	a := p.exchange(ctx, udp, site, req, cfg)
	switch {
	case verifyErr.Load() != nil && a.err != nil:
		p.fail(site, "untrusted_peer", (*verifyErr.Load()).Error())
		return
	case a.err != nil:
		// The address was learnt from gossip: what failed (closed,
		// silent, not TLS) is not told apart, and no address is named.
		outcome := "unreachable"
		if probe.OutcomeOf(a.err) == probe.OutcomeDestinationDenied {
			outcome = probe.OutcomeDestinationDenied
		}
		p.fail(site, outcome, "polling the site's signals failed: "+outcome)
		return
	case a.status != http.StatusOK:
		p.fail(site, "status", fmt.Sprintf("the peer answered %d", a.status))
		return
	case a.tooLarge:
		p.fail(site, "too_large", "the answer passed its bound")
		return
	}
	parsed, err := signals.Parse(a.body, nil)
	if err != nil {
		p.fail(site, "not_exposition", "the answer is not Prometheus text")
		return
	}
	now := p.c.Opts.Now()
	date, err := http.ParseTime(a.date)
	if err != nil {
		date = now
	}
	byProvider := map[string][]signals.Sample{}
	kept := 0
	for _, ps := range parsed {
		// Only what the verified peer says of itself.
		if ps.Label(signals.LabelSite) != site || kept >= pollMaxSamples {
			continue
		}
		provider := ps.Label(signals.LabelProvider)
		if _, ok := byProvider[provider]; !ok && len(byProvider) >= pollMaxProviders || provider == "" {
			continue
		}
		if ps.StampMillis != 0 {
			age := date.Sub(time.UnixMilli(ps.StampMillis))
			ps.At = now.Add(-max(age, 0))
		} else {
			ps.At = now
		}
		byProvider[provider] = append(byProvider[provider], ps.Sample)
		kept++
	}
	p.storePeer(site, byProvider, now)
	p.polls.WithLabelValues("ok").Inc()
	if p.failures.Set(site, "") != "" {
		p.c.Opts.Logger.Info("signals_poll_recovered", "site", site)
	}
}

// answer is what one transport's attempt of a poll got: the peer's
// status, Date and body (nil unless 200 and within PollMaxBytes), or err
// when no answer came.
type answer struct {
	transport string
	status    int
	date      string
	body      []byte
	tooLarge  bool
	err       error
}

// exchange is one poll's request, within pollTimeout: over HTTP/3
// unless QUIC failed to the site lately, with HTTPS dialled beside it
// when the QUIC attempt fails or has not finished its handshake within
// quicHeadStart. The first answer is the poll's, and the other attempt
// is abandoned; when none comes, err joins why each failed. A poll
// whose QUIC got no handshake starts the site's fallback to HTTPS alone.
func (p *Poller) exchange(parent context.Context, udp *quicSocket, site string, req *http.Request, cfg *tls.Config) answer {
	ctx, cancel := context.WithTimeout(parent, pollTimeout)
	defer cancel()
	https := &http.Transport{
		// A copy: net/http adds h2 to the config it is given, while
		// HTTP/3's dial may be copying it.
		TLSClientConfig: cfg.Clone(), Proxy: nil, DisableKeepAlives: true, ForceAttemptHTTP2: true,
		// The peer's host comes from gossip: the destination rule
		// applies, as it does to every address the agent did not take
		// from its own configuration.
		// A new connect when one goes unanswered (see redial): over a
		// lossy link the kernel's SYN backoff passes the poll's bound.
		DialContext: redial.Dialer(pollTimeout, p.c.Opts.ProbeDestinations.Dialer(pollTimeout)),
	}
	defer https.CloseIdleConnections()
	if p.fallback.First(site, time.Now()) == h3fallback.HTTPS {
		a := get(ctx, h3fallback.HTTPS, https, req)
		p.attempted(a, false)
		return a
	}
	var handshook atomic.Bool
	h3 := &http3.Transport{TLSClientConfig: cfg,
		// The poll's context bounds the handshake (the transport's dial
		// outlives a cancelled request; closing the transport ends it).
		QUICConfig: &quic.Config{HandshakeIdleTimeout: pollTimeout},
		Dial: func(ctx context.Context, addr string, tlsCfg *tls.Config, qc *quic.Config) (*quic.Conn, error) {
			c, err := p.dialQUIC(ctx, udp, addr, tlsCfg, qc)
			if err == nil {
				handshook.Store(true)
			}
			return c, err
		}}
	defer func() { _ = h3.Close() }()

	results := make(chan answer, 2)
	running := 0
	start := func(transport string, rt http.RoundTripper) {
		running++
		go func() { results <- get(ctx, transport, rt, req) }()
	}
	start(h3fallback.H3, h3)
	headStart := time.NewTimer(quicHeadStart)
	defer headStart.Stop()
	httpsStarted := false
	startHTTPS := func() {
		if !httpsStarted {
			httpsStarted = true
			start(h3fallback.HTTPS, https)
		}
	}
	var served *answer
	var errs []error
	for running > 0 && served == nil {
		select {
		case <-headStart.C:
			if !handshook.Load() {
				startHTTPS()
			}
		case a := <-results:
			running--
			p.attempted(a, false)
			if a.err == nil {
				served = &a
				continue
			}
			errs = append(errs, a.err)
			if a.transport == h3fallback.H3 {
				startHTTPS()
			}
		}
	}
	cancel()
	for ; running > 0; running-- {
		p.attempted(<-results, true)
	}
	switch {
	case served != nil && served.transport == h3fallback.H3:
		p.fallback.Clear(site)
		if p.overHTTPS.Set(site, "") != "" {
			p.c.Opts.Logger.Info("signals_poll_transport", "site", site, "transport", h3fallback.H3)
		}
	case served != nil && !handshook.Load():
		// HTTPS answered where QUIC got no handshake: the path drops
		// UDP. HTTPS alone for a while. A peer that answered neither is
		// down, not QUIC-less: it is asked over HTTP/3 first again when
		// it is back.
		p.fallback.Failed(site, time.Now())
		if p.overHTTPS.Set(site, "no QUIC handshake") == "" {
			p.c.Opts.Logger.Info("signals_poll_transport", "site", site, "transport", h3fallback.HTTPS,
				"reason", "no QUIC handshake", "retry_after", quicBackoff.String())
		}
	}
	if served != nil {
		return *served
	}
	return answer{err: errors.Join(errs...)}
}

// attempted counts one attempt of a poll; abandoned: the poll had its
// answer before this attempt ended.
func (p *Poller) attempted(a answer, abandoned bool) {
	outcome := attemptAnswered
	switch {
	case abandoned:
		outcome = attemptAbandoned
	case a.err != nil:
		outcome = attemptFailed
	}
	p.transports.WithLabelValues(a.transport, outcome).Inc()
}

// get is one attempt of a poll over rt: the answer read whole, within
// PollMaxBytes (a read that fails counts as too large, as it always has).
func get(ctx context.Context, transport string, rt http.RoundTripper, req *http.Request) answer {
	client := &http.Client{Transport: rt, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := client.Do(req.WithContext(ctx))
	if err != nil {
		return answer{transport: transport, err: err}
	}
	defer func() { _ = resp.Body.Close() }()
	a := answer{transport: transport, status: resp.StatusCode, date: resp.Header.Get("Date")}
	if resp.StatusCode != http.StatusOK {
		return a
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, PollMaxBytes+1))
	if err != nil || len(body) > PollMaxBytes {
		a.tooLarge = true
		return a
	}
	a.body = body
	return a
}

// dialQUIC makes a poll's QUIC connection from the round's UDP socket.
// The address passes the destination rule first, as the HTTPS path's
// dialer passes it: a UDP dial through the rule's dialer resolves the
// host and checks each address before it connects its socket (which
// sends nothing), and the handshake goes to the address it connected
// to, never to another resolution of the name.
func (p *Poller) dialQUIC(ctx context.Context, udp *quicSocket, addr string, tlsCfg *tls.Config, qc *quic.Config) (*quic.Conn, error) {
	checked, err := p.c.Opts.ProbeDestinations.Dialer(pollTimeout)(ctx, "udp", addr)
	if err != nil {
		return nil, err
	}
	raddr, ok := checked.RemoteAddr().(*net.UDPAddr)
	_ = checked.Close()
	if !ok {
		return nil, fmt.Errorf("signals poll: %s is no UDP address", addr)
	}
	tr, err := udp.transport()
	if err != nil {
		return nil, err
	}
	return tr.Dial(ctx, raddr, tlsCfg, qc)
}

// quicSocket is the UDP socket a round's polls dial QUIC from, opened
// when the first needs it and closed when the round ends.
type quicSocket struct {
	mu sync.Mutex
	tr *quic.Transport
}

func (s *quicSocket) transport() (*quic.Transport, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.tr == nil {
		pc, err := net.ListenUDP("udp", nil)
		if err != nil {
			return nil, err
		}
		s.tr = &quic.Transport{Conn: pc}
	}
	return s.tr, nil
}

func (s *quicSocket) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.tr != nil {
		_ = s.tr.Close()
		_ = s.tr.Conn.Close()
		s.tr = nil
	}
}

// storePeer replaces a peer's rows with what it now says: each provider's
// samples, served until three intervals past the oldest of them.
func (p *Poller) storePeer(site string, byProvider map[string][]signals.Sample, now time.Time) {
	stale := 3 * p.c.Opts.SignalsInterval
	seen := map[string]bool{}
	for provider, samples := range byProvider {
		seen[provider] = true
		oldest := now
		for _, s := range samples {
			if s.At.Before(oldest) {
				oldest = s.At
			}
		}
		p.c.Opts.Signals.Set(site, provider, signals.PartPeer, samples, oldest.Add(stale))
	}
	p.c.Opts.Signals.Retain(site, signals.PartPeer, seen)
}

func (p *Poller) fail(site, outcome, why string) {
	p.polls.WithLabelValues(outcome).Inc()
	if p.failures.Set(site, why) != why {
		p.c.Opts.Logger.Warn("signals_poll_failed", "site", site, "outcome", outcome, "reason", why)
	}
}

type heardRecord struct {
	version uint64
	at      time.Time
}

// fromGossip is signalTransport gossip: the signals of the network's
// Active sites, as their records carry them, into the store. A site not
// trusted has none taken.
func (p *Poller) fromGossip(ctx context.Context, n *v1alpha1.GridNetwork) {
	trusted, err := p.c.TrustedSites(ctx, n.Name)
	if err != nil {
		return
	}
	now := p.c.Opts.Now()
	for _, rs := range p.c.Opts.Membership.View(n.Name).Signals {
		if !trusted[rs.Site] {
			continue
		}
		p.mu.Lock()
		h, ok := p.heard[rs.Site]
		if !ok || h.version != rs.Version {
			h = heardRecord{version: rs.Version, at: now}
			p.heard[rs.Site] = h
		}
		p.mu.Unlock()
		byProvider := map[string][]signals.Sample{}
		for _, sg := range rs.Signals {
			if _, ok := byProvider[sg.Provider]; !ok && len(byProvider) >= pollMaxProviders {
				continue
			}
			smp := signals.Sample{Metric: sg.Metric, Value: sg.Value, At: h.at.Add(-time.Duration(sg.AgeMs) * time.Millisecond)}
			for k, v := range sg.Labels {
				smp.Labels = append(smp.Labels, signals.Label{Name: k, Value: v})
			}
			byProvider[sg.Provider] = append(byProvider[sg.Provider], smp)
		}
		p.storePeer(rs.Site, byProvider, now)
	}
}
