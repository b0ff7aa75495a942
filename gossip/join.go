// Joining the seeds of the networks: announced by the controller,
// joined asynchronously, retried, remembered across restarts of the node.

package gossip

import (
	"context"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/gridsync/gridsync/gossip/record"
	"github.com/gridsync/gridsync/gossip/seeds"
	"github.com/gridsync/gridsync/gossip/sites"
)

// seedRetry is how long a seed whose join failed is left alone.
const seedRetry = 30 * time.Second

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
		return sites.SeedResult{Seeds: addrs}
	}
	res := r.join(ml, addrs)
	res.Seeds = addrs
	return res
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

// joinOne joins one seed address and remembers the outcome.
func (r *Runtime) joinOne(ml *memberlist.Memberlist, a string, done chan struct{}) {
	err := r.joinAddr(ml, a)
	r.mu.Lock()
	before, hadFailed := r.joinFailed[a]
	if err != nil {
		r.joinFailed[a] = joinFailure{at: r.cfg.Now(), err: err, conflict: strings.Contains(err.Error(), record.ErrGridIDConflict.Error())}
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

// joinAddr joins one address. A join counts only when another member
// answered: an address that reflects this site's own request (a TCP echo
// service) is not a member.
func (r *Runtime) joinAddr(ml *memberlist.Memberlist, a string) error {
	// The transport stamps an echo with the wall clock: so is the join.
	start := time.Now()
	_, err := ml.Join([]string{a})
	if err == nil && r.transport().ReflectedSince(a, start) {
		err = errors.New("the address answered with this site's own join request (an echo, not a member)")
	}
	return err
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
