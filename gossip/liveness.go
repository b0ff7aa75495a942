// Site states: suspicion made visible to every site and the reference's
// suspicion window applied, unscaled; stale records swept.

package gossip

import (
	"github.com/hashicorp/memberlist"

	"github.com/gridsync/gridsync/gossip/record"
	"github.com/gridsync/gridsync/gossip/sites"
)

// sweep applies the suspicion window and the stale TTL, dials a dead site
// again when it is time (reconnect.go), expires tombstones and refreshes
// the site gauges, four times a second.
func (r *Runtime) sweep() {
	now := r.cfg.Now()
	r.mu.Lock()
	window := r.running.suspicion
	ml := r.ml
	r.mu.Unlock()
	if ml == nil {
		return
	}
	r.reconnect(ml, now)
	r.resend(now)
	r.verifyAway(ml, now)
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
	for _, site := range r.store.SiteNames() {
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
			networks := r.store.DropSite(site)
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
	r.refreshOwn(now)
	if r.sweeps++; r.sweeps%recheckEvery == 0 {
		r.recheck(now)
	}
	if n := r.store.Expire(now, r.cfg.TombstoneTTL); n > 0 {
		r.log.Debug("swim_tombstones_expired", "count", n)
	}
	r.metrics.records.Set(float64(r.store.Count()))
	r.notifySites(changedSites)
}

// recheckEvery is how many sweeps pass between two checks of the held
// records' certificates (every five seconds).
const recheckEvery = 20

// suspected is called when this site's probe of a member failed: every
// site is told, so that the whole grid sees the suspicion memberlist
// keeps to itself.
func (r *Runtime) suspected(name string) {
	n := record.Notice{Member: name, Suspect: true, At: r.clock.Next()}
	r.applyNotice(n)
	r.broadcastNotice(n)
	// Straight to every member as well: each site starts its window when
	// the notice arrives, and gossip would take a second to reach the
	// last one.
	msg, err := record.EncodeNotice(n)
	r.mu.Lock()
	ml := r.ml
	r.mu.Unlock()
	if err == nil && ml != nil {
		go r.sendReliable(ml, r.aliveNodes(""), msg)
	}
}

// refuted is called when memberlist refuted a suspicion or a death of this
// site. memberlist then tells every member it is alive, but a member that
// only suspected it gives no event for that, and the site view applies
// its own window: a site whose peers declared it dead while a partition
// cut them off (memberlist's own suspicion, stretched with the grid's
// size, outlasting the view's) would stay dead in their views though it
// answers them again. The refutation is said in the view's terms too.
func (r *Runtime) refuted() {
	r.mu.Lock()
	ml := r.ml
	self := record.MemberName(r.cfg.Site, r.generation)
	r.mu.Unlock()
	if ml == nil {
		return
	}
	r.broadcastNotice(record.Notice{Member: self, At: r.clock.Next()})
}

// applyNotice records a suspicion or its refutation. A site that learns it
// is suspected answers that it is alive.
func (r *Runtime) applyNotice(n record.Notice) {
	r.mu.Lock()
	if r.ml != nil && n.Member == record.MemberName(r.cfg.Site, r.generation) {
		r.mu.Unlock()
		if n.Suspect {
			r.broadcastNotice(record.Notice{Member: n.Member, At: r.clock.Next()})
		}
		return
	}
	site := record.SiteOfMember(n.Member)
	m := r.members[site]
	if m == nil || m.name != n.Member {
		r.mu.Unlock()
		return // not the site's current generation
	}
	now := r.cfg.Now()
	changed, fresh, back := false, false, false
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
		// Back from death or from suspicion: what this site changed
		// meanwhile may not have reached it (a cut too short for a death
		// still fails the direct copies).
		back = m.state == sites.SiteDead || m.state == sites.SiteSuspect
		if m.state == sites.SiteSuspect || m.state == sites.SiteDead {
			m.state, m.since, changed = sites.SiteAlive, now, true
		}
	}
	state := m.state
	r.mu.Unlock()
	if fresh {
		r.broadcastNotice(n) // passed on, as gossip is
	}
	if back {
		// What this site changed while the other was dead or suspected
		// may never have reached it (see observe).
		go r.sendOwnTo(n.Member)
	}
	if changed {
		r.log.Info("swim_site_state", "site", site, "member", n.Member, "to", string(state))
		r.notifySites([]string{site})
	}
}

func (r *Runtime) broadcastNotice(n record.Notice) {
	msg, err := record.EncodeNotice(n)
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

func (b *noticeBroadcast) Finished() {}

// siteGaugesLocked sets grid_swim_sites from the members (r.mu held).
func (r *Runtime) siteGaugesLocked() {
	counts := map[sites.SiteState]int{}
	for _, m := range r.members {
		counts[m.state]++
	}
	for _, s := range []sites.SiteState{sites.SiteAlive, sites.SiteSuspect, sites.SiteDead, sites.SiteLeft} {
		r.metrics.sites.WithLabelValues(string(s)).Set(float64(counts[s]))
	}
	// A suspect is still a member memberlist counts.
	r.alive.Store(int64(1 + counts[sites.SiteAlive] + counts[sites.SiteSuspect]))
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
		for _, n := range r.store.NetworksOf(s) {
			r.notify.send(n)
		}
	}
}
