// Reconnecting to the sites this one holds dead, as Serf's reconnect
// does: how a healed partition or an ended outage is noticed.

package gossip

import (
	"math/rand/v2"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/gridsync/gridsync/gossip/sites"
)

// Defaults of the reconnection.
const (
	// DefaultReconnectInterval is how often a site dials one site it holds
	// dead, jittered by half either way.
	DefaultReconnectInterval = 2 * time.Second
	// DefaultReconnectMaxBackoff bounds how long a site that keeps failing
	// is left alone between two dials.
	DefaultReconnectMaxBackoff = time.Minute
)

// reconnectState is what this site knows of its dials to one dead site.
type reconnectState struct {
	failures int
	next     time.Time // not dialled before
}

// reconnect dials one dead site when the interval has passed.
//
// memberlist alone never notices that a dead member came back: it probes
// and gossips to alive members only, and forgets dead ones after
// GossipToTheDeadTime. Two sides of a partition that each declared the
// other dead stay apart for good unless something joins across, and a
// grid whose sites all lost one another in an outage stays in pieces.
// Every interval, jittered so that the grid's sites do not dial at once
// when an outage ends, this site dials one site it holds dead, picked at
// random among those whose backoff has passed; a failed dial doubles that
// site's backoff up to the maximum, jittered too. One dial is in flight
// at a time: a dead address holds it for memberlist's TCP timeout. One
// join across a healed cut is enough: its push/pull gives each side the
// other's members, which their gossip carries on. Left sites (they said
// goodbye) and evicted ones are not dialled.
func (r *Runtime) reconnect(ml *memberlist.Memberlist, now time.Time) {
	r.mu.Lock()
	if now.Before(r.nextReconnect) || r.reconnecting {
		r.mu.Unlock()
		return
	}
	r.nextReconnect = now.Add(jitter(r.cfg.ReconnectInterval))
	var candidates []string
	for site, m := range r.members {
		st := r.reconnects[site]
		if m.state != sites.SiteDead || r.evictedEverywhereLocked(site) || st != nil && now.Before(st.next) {
			continue
		}
		candidates = append(candidates, site)
	}
	// Sites no longer dead (back, left or gone) lose their backoff.
	for site := range r.reconnects {
		if m := r.members[site]; m == nil || m.state != sites.SiteDead {
			delete(r.reconnects, site)
		}
	}
	if len(candidates) == 0 {
		r.mu.Unlock()
		return
	}
	site := candidates[rand.IntN(len(candidates))]
	m := r.members[site]
	addr, name := m.addr, m.name
	r.reconnecting = true
	r.mu.Unlock()

	go func() {
		err := r.joinAddr(ml, addr)
		r.mu.Lock()
		defer r.mu.Unlock()
		r.reconnecting = false
		if err == nil {
			delete(r.reconnects, site)
			r.metrics.reconnects.WithLabelValues("joined").Inc()
			r.log.Info("swim_reconnected", "site", site, "member", name)
			return
		}
		r.metrics.reconnects.WithLabelValues("failed").Inc()
		st := r.reconnects[site]
		if st == nil {
			st = &reconnectState{}
			r.reconnects[site] = st
		}
		st.failures++
		backoff := min(r.cfg.ReconnectInterval<<min(st.failures, 16), r.cfg.ReconnectMaxBackoff)
		st.next = r.cfg.Now().Add(jitter(backoff))
		r.log.Debug("swim_reconnect_failed", "site", site, "failures", st.failures, "error", err.Error())
	}()
}

// jitter spreads d uniformly over half of it either way.
func jitter(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return d/2 + rand.N(d)
}
