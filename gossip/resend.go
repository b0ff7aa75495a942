// Direct copies of this site's records that did not arrive, sent again.

package gossip

import (
	"time"

	"github.com/gridsync/gridsync/gossip/sites"
)

// owe notes the members a direct copy of this site's records did not
// reach: each is sent every record of this site again after a backoff
// (the reconnection's: the interval doubling to its maximum, jittered),
// until one such send reaches it or it is no longer a current member.
//
// A change is sent straight to every member and gossiped on only when it
// fits a packet: a member the direct copy missed (a connection lost to a
// lossy link, a cut too short for it to be declared dead) would otherwise
// wait for its next push/pull with this site, a minute or more with the
// default timings, or for a change of its state (a site back from suspicion or
// death is sent this site's records at once, which also pays what it is
// owed).
func (r *Runtime) owe(members []string) {
	if len(members) == 0 {
		return
	}
	now := r.cfg.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, name := range members {
		st := r.owed[name]
		if st == nil {
			if len(r.owed) >= maxOwed {
				continue // the push/pull still reaches it
			}
			st = &reconnectState{}
			r.owed[name] = st
		}
		st.failures++
		st.next = now.Add(jitter(min(r.cfg.ReconnectInterval<<min(st.failures-1, 16), r.cfg.ReconnectMaxBackoff)))
	}
}

// maxOwed bounds the members owed records (each is a current member, so
// the grid's size bounds them too); past it the push/pull still reaches a
// member.
const maxOwed = 4096

// resend sends this site's records again to the owed members that are
// alive and due, each in its own goroutine, one send per member at a
// time; members no longer current are forgotten.
func (r *Runtime) resend(now time.Time) {
	r.mu.Lock()
	current := map[string]bool{}
	for _, m := range r.members {
		if m.state == sites.SiteAlive {
			current[m.name] = true
		}
	}
	var due []string
	for name, st := range r.owed {
		switch {
		case !r.isMemberNameLocked(name):
			delete(r.owed, name) // gone, or restarted: a new member gets every record on its join
		case current[name] && !r.resending[name] && !now.Before(st.next):
			r.resending[name] = true
			due = append(due, name)
		}
	}
	r.mu.Unlock()
	for _, name := range due {
		go func() {
			failed := r.sendAllOwnTo(name)
			r.mu.Lock()
			delete(r.resending, name)
			if len(failed) == 0 {
				delete(r.owed, name)
				r.metrics.resends.WithLabelValues("delivered").Inc()
			} else {
				r.metrics.resends.WithLabelValues("failed").Inc()
			}
			r.mu.Unlock()
			r.owe(failed)
		}()
	}
}

// isMemberNameLocked says whether name is the current member of its site
// (r.mu held).
func (r *Runtime) isMemberNameLocked(name string) bool {
	for _, m := range r.members {
		if m.name == name {
			return m.state != sites.SiteLeft
		}
	}
	return false
}
