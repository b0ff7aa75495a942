// The view's suspicions and deaths checked against the site itself.

package gossip

import (
	"net"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/gridsync/gridsync/gossip/sites"
)

// verifyAway pings, once a probe period each, the sites the view holds
// suspect or dead while this site's memberlist holds their member alive;
// a site that answers is alive in the view again, and is sent this
// site's records.
//
// The view's suspicion is every site's: one site's failed probe is told
// to the grid (suspected), and the window runs everywhere. Its end comes
// from the suspected site, whose alive notice follows memberlist's
// refutation; a notice said across a cut, or lost with every copy, never
// comes, and nothing else would end the suspicion here: memberlist tells
// no event when a member it suspected is alive again, and none at all
// when it never suspected it. This site's own ping settles it. A member
// that does not answer keeps its state, and memberlist's own suspicion of
// a member (its state suspect) is left to run: this site's probe of it
// failed.
func (r *Runtime) verifyAway(ml *memberlist.Memberlist, now time.Time) {
	type away struct{ site, addr string }
	r.mu.Lock()
	every := r.running.probe
	candidates := map[string]away{}
	for site, m := range r.members {
		if (m.state != sites.SiteSuspect && m.state != sites.SiteDead) || m.leaving || r.evictedEverywhereLocked(site) ||
			r.checking[m.name] || now.Sub(r.checked[m.name]) < every {
			continue
		}
		candidates[m.name] = away{site: site, addr: m.addr}
	}
	for name := range r.checked {
		if !r.isMemberNameLocked(name) {
			delete(r.checked, name)
		}
	}
	r.mu.Unlock()
	if len(candidates) == 0 {
		return
	}
	// Read outside r.mu: memberlist calls this site's delegate under its
	// own lock.
	for _, n := range ml.Members() {
		c, ok := candidates[n.Name]
		if !ok || n.State != memberlist.StateAlive {
			continue
		}
		ua, err := net.ResolveUDPAddr("udp", c.addr)
		if err != nil {
			continue
		}
		name := n.Name
		r.mu.Lock()
		r.checking[name] = true
		r.mu.Unlock()
		go func() {
			_, err := ml.Ping(name, ua)
			r.mu.Lock()
			delete(r.checking, name)
			r.checked[name] = r.cfg.Now()
			m := r.members[c.site]
			back := err == nil && m != nil && m.name == name && (m.state == sites.SiteSuspect || m.state == sites.SiteDead)
			if back {
				m.state, m.since = sites.SiteAlive, r.cfg.Now()
			}
			r.mu.Unlock()
			if !back {
				return
			}
			r.metrics.verified.Inc()
			r.log.Info("swim_site_state", "site", c.site, "member", name, "to", string(sites.SiteAlive), "why", "answered this site's ping")
			r.notifySites([]string{c.site})
			// As for a site back by its own notice (applyNotice): what
			// changed here meanwhile may not have reached it.
			r.sendOwnTo(name)
		}()
	}
}

// MemberlistState is what memberlist holds of a site's current member
// ("alive", "suspect", or "none": dead, left or forgotten), beside the
// view's state of it (Status): for diagnostics, where the two disagree.
func (r *Runtime) MemberlistState(site string) string {
	r.mu.Lock()
	ml := r.ml
	name := ""
	if m := r.members[site]; m != nil {
		name = m.name
	}
	r.mu.Unlock()
	if ml == nil || name == "" {
		return "none"
	}
	for _, n := range ml.Members() {
		if n.Name == name {
			if n.State == memberlist.StateSuspect {
				return "suspect"
			}
			return "alive"
		}
	}
	return "none"
}
