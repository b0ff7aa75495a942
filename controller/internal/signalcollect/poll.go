package signalcollect

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gridsync/gridsync/api/v1alpha1"
	"github.com/gridsync/gridsync/controller/internal/base"
	"github.com/gridsync/gridsync/controller/internal/trustmaterial"
	"github.com/gridsync/gridsync/controller/probe"
	"github.com/gridsync/gridsync/gossip/sites"
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
type Poller struct {
	c        *base.Env
	trust    *trustmaterial.Cache
	failures base.ReasonLog // by site
	// heard is when each site's gossiped signals record (by version) was
	// first read here: its samples' ages count from then.
	mu    sync.Mutex
	heard map[string]heardRecord

	polls *prometheus.CounterVec
}

// NewPoller is the peers' signals reader; trust is the networks' trust
// material its polls present and check. It registers its metrics.
func NewPoller(c *base.Env, trust *trustmaterial.Cache) *Poller {
	p := &Poller{c: c, trust: trust, heard: map[string]heardRecord{}}
	p.polls = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "gridsync_signals_polls_total",
		Help: "Polls of peer sites' signals, by outcome (ok, no_address, gossip_unencrypted, trust_material, untrusted_peer, status, too_large, not_exposition, or a probe outcome: timeout, connection_refused, tls_error...).",
	}, []string{"outcome"})
	c.Opts.Registerer.MustRegister(p.polls)
	return p
}

func (p *Poller) round(ctx context.Context) {
	var networks v1alpha1.GridNetworkList
	if err := p.c.Client.List(ctx, &networks); err != nil {
		return
	}
	if p.c.Opts.Membership == nil {
		return
	}
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
				p.poll(ctx, n, gs, swimHost(view, base.SiteOf(gs)))
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

func (p *Poller) poll(ctx context.Context, n *v1alpha1.GridNetwork, gs *v1alpha1.GridSite, host string) {
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
	var verifyErr error
	cfg := &tls.Config{
		// VerifyConnection checks what a site probe checks, and names why
		// a peer is refused.
		InsecureSkipVerify: true, //nolint:gosec // verified in VerifyConnection
		ServerName:         target.ServerName,
		Certificates:       []tls.Certificate{*tm.Client},
		MinVersion:         tls.VersionTLS13,
		VerifyConnection: func(cs tls.ConnectionState) error {
			verifyErr = target.Verify(cs.PeerCertificates, time.Now())
			return verifyErr
		},
	}
	client := &http.Client{Timeout: pollTimeout, Transport: &http.Transport{
		TLSClientConfig: cfg, Proxy: nil, DisableKeepAlives: true, ForceAttemptHTTP2: true,
		// The peer's host comes from gossip: the destination rule
		// applies, as it does to every address the agent did not take
		// from its own configuration.
		// A new connect when one goes unanswered (see redial): over a
		// lossy link the kernel's SYN backoff passes the poll's bound.
		DialContext: redial.Dialer(pollTimeout, p.c.Opts.ProbeDestinations.Dialer(pollTimeout)),
	}, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	url := "https://" + net.JoinHostPort(host, fmt.Sprint(p.c.Opts.SignalsPeerPort)) + signals.Path
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, http.NoBody)
	if err != nil {
		p.fail(site, "no_address", err.Error())
		return
	}
	resp, err := client.Do(req)
	switch {
	case verifyErr != nil:
		p.fail(site, "untrusted_peer", verifyErr.Error())
		return
	case err != nil:
		// The address was learnt from gossip: what failed (closed,
		// silent, not TLS) is not told apart, and no address is named.
		outcome := "unreachable"
		if probe.OutcomeOf(err) == probe.OutcomeDestinationDenied {
			outcome = probe.OutcomeDestinationDenied
		}
		p.fail(site, outcome, "polling the site's signals failed: "+outcome)
		return
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		p.fail(site, "status", fmt.Sprintf("the peer answered %d", resp.StatusCode))
		return
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, PollMaxBytes+1))
	if err != nil || len(body) > PollMaxBytes {
		p.fail(site, "too_large", "the answer passed its bound")
		return
	}
	parsed, err := signals.Parse(body, nil)
	if err != nil {
		p.fail(site, "not_exposition", "the answer is not Prometheus text")
		return
	}
	now := p.c.Opts.Now()
	date, err := http.ParseTime(resp.Header.Get("Date"))
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
