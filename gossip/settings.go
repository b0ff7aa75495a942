// What the networks' specs ask of the one membership node every network
// shares: a pinned grid ID (spec.gridId), where the site runs (spec.region
// and spec.zone, signed into its site records) and the SWIM timings
// (spec.swim, the agent's flags being the defaults).

package gossip

import (
	"slices"
	"time"

	"github.com/gridsync/gridsync/gossip/record"
	"github.com/gridsync/gridsync/gossip/sites"
)

// timings are the memberlist node's probe, suspicion and gossip
// settings.
type timings struct {
	probe, probeTimeout, suspicion time.Duration
	gossipNodes                    int
}

// defaultTimings are the flags' timings.
func (c Config) defaultTimings() timings {
	return timings{probe: c.ProbeInterval, probeTimeout: c.ProbeTimeout,
		suspicion: time.Duration(c.SuspectPeriods) * c.ProbeInterval, gossipNodes: c.GossipNodes}
}

// SetNetworkSettings records what a network's spec asks of membership.
// Networks share one node, so their timings combine to the most careful
// of them (the shortest probe interval, the longest suspicion, the widest
// gossip), and the first network by name that pins a grid ID pins it; a
// change of timings restarts the node (peers see this site leave and
// join again).
func (r *Runtime) SetNetworkSettings(network string, s sites.NetworkSettings) {
	r.mu.Lock()
	before, had := r.settings[network]
	r.settings[network] = s
	pin := r.pinnedGridLocked()
	repin := pin != "" && (r.grid.ID != pin || !r.grid.Pinned)
	if repin {
		r.adoptLocked(record.GridID{ID: pin, By: r.cfg.Site, At: r.cfg.Now().Unix(), Pinned: true}, "pinned")
	}
	// Poked whether or not a node runs: a change that lands while the
	// node restarts (after the new node read the timings, before it is
	// up) is then seen by the new node's loop, which compares again.
	restart := r.timingsLocked() != r.running
	local, announced := r.locals[network]
	r.mu.Unlock()
	if restart {
		r.poke()
	}
	if announced && (!had || before.Region != s.Region || before.Zone != s.Zone) {
		r.announce(network, local)
	}
}

// pinnedGridLocked is the grid ID the first network by name pins, "" when
// none does.
func (r *Runtime) pinnedGridLocked() string {
	names := make([]string, 0, len(r.settings))
	for n, s := range r.settings {
		if s.GridID != "" {
			names = append(names, n)
		}
	}
	if len(names) == 0 {
		return ""
	}
	slices.Sort(names)
	return r.settings[names[0]].GridID
}

// timingsLocked combines the networks' timings with the flags'.
func (r *Runtime) timingsLocked() timings {
	t := r.cfg.defaultTimings()
	var probe, suspicion time.Duration
	gossip := 0
	for _, s := range r.settings {
		if d := s.Swim.ProbeInterval; d > 0 && (probe == 0 || d < probe) {
			probe = d
		}
		suspicion = max(suspicion, s.Swim.SuspicionTimeout)
		gossip = max(gossip, s.Swim.GossipNodes)
	}
	if probe > 0 {
		t.probe = probe
		t.suspicion = time.Duration(r.cfg.SuspectPeriods) * probe
	}
	if suspicion > 0 {
		t.suspicion = suspicion
	}
	if gossip > 0 {
		t.gossipNodes = gossip
	}
	// A direct probe's answer is awaited for at most three fifths of the
	// interval, so that the indirect probes fit in it.
	t.probeTimeout = min(t.probeTimeout, t.probe*3/5)
	return t
}
