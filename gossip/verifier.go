// Records wait for their check on workers of their own, never on
// memberlist's goroutines: a record's check costs a signature (and, for a
// chain not seen before, the chain's), and memberlist handles probes,
// acks and every other message on the goroutines that hand records over.
//
// The workers spend their time on sites this one holds records of first;
// records of unknown sites, and of sites whose records were lately
// refused, get what is left, within a budget of checks a second (beyond
// it they wait). A key holder flooding invented or junk records so spends
// at most that budget, its records are the first dropped when the queue
// is full, and an honest site's update waits for at most the check in
// progress. Nothing is lost for good: a dropped record of an honest site
// comes back with the next push/pull, whose digest shows this site lacks
// it.

package gossip

import (
	"context"
	"runtime"
	"sync"
	"time"

	"github.com/gridsync/gridsync/gossip/internal/verifyqueue"
	"github.com/gridsync/gridsync/gossip/record"
)

// What became of a record received from a peer (the outcome label of
// grid_swim_records_received_total): every record received is counted
// under exactly one.
const (
	outcomeStored   = "stored"    // newer than what was held: kept
	outcomeNotNewer = "not_newer" // not newer than the copy held: nothing to do
	outcomeOwnSite  = "own_site"  // this site's own, which only it writes
	outcomeRefused  = "refused"   // its check failed (grid_swim_records_rejected_total says why)
	outcomeOverCap  = "over_cap"  // a cap of the store (grid_swim_messages_dropped_total says which)
	outcomeShed     = "shed"      // dropped unchecked: the queue was full
	// A copy of a record waiting for its check (push/pull and gossip
	// bring several): it shares that one's fate.
	outcomeDuplicate = "duplicate"
)

var recordOutcomes = []string{outcomeStored, outcomeNotNewer, outcomeOwnSite, outcomeRefused, outcomeOverCap, outcomeShed, outcomeDuplicate}

// maxVerifyWorkers bounds the workers whatever the cores.
const maxVerifyWorkers = 4

// verifyWorkers is how many records are checked at once: half the cores
// (the other half serve memberlist, the controller and the probes), at
// least one.
func verifyWorkers() int {
	return min(max(runtime.GOMAXPROCS(0)/2, 1), maxVerifyWorkers)
}

// receive takes records from a peer on memberlist's goroutine: what it
// can tell without a signature (this site's own, not newer than the copy
// held, an unsigned one) is decided at once,
// the rest waits for a worker. regossip sends what was
// news on by epidemic broadcast.
func (r *Runtime) receive(records []record.Record, regossip bool) {
	now := r.cfg.Now()
	changed := map[string]bool{}
	for _, rec := range records {
		if rec.Site == r.cfg.Site {
			r.outcome(outcomeOwnSite)
			continue
		}
		// What is not newer than the copy held is not checked: it would
		// not be stored anyway, and push/pull brings many such.
		t := r.trustOf(rec.Network)
		if cur, ok := r.store.Get(rec.Key()); ok && !record.Newer(&rec, &cur) && !supersedes(t, &rec, &cur) {
			r.outcome(outcomeNotNewer)
			continue
		}
		if !needsSignatureCheck(t, &rec) {
			// Decided without a signature (one this site is not in, an
			// unsigned record): no worker needed.
			if network := r.admit(rec, regossip); network != "" {
				changed[network] = true
			}
			continue
		}
		p := verifyqueue.Pending{Rec: rec, Regossip: regossip, Size: record.MemorySize(&rec)}
		copied, shed := r.verify.Push(p, r.store.HoldsSite(rec.Network, rec.Site), now)
		if copied {
			r.outcome(outcomeDuplicate)
		}
		if shed > 0 {
			r.metrics.recordsReceived.WithLabelValues(outcomeShed).Add(float64(shed))
			if r.firstTime("swim_records_shed", "queue_full", "") {
				r.log.Warn("swim_records_shed", "why", "the queue of records waiting for their check is full: records of unknown or lately refused sites are dropped first, and come back with push/pull if they are a site's",
					"limit_records", verifyqueue.MaxRecords, "limit_bytes", verifyqueue.MaxBytes)
			}
		}
	}
	r.metrics.pending.Set(float64(r.verify.Len()))
	if len(changed) > 0 {
		r.metrics.records.Set(float64(r.store.Count()))
	}
	for n := range changed {
		r.notify.send(n)
	}
}

// needsSignatureCheck reports whether a record's check verifies a
// signature, the work the verifier's workers are for (a certificate's,
// or in an open network the site's own key's); every other check costs
// no more than reading the record.
func needsSignatureCheck(t *record.NetworkTrust, r *record.Record) bool {
	if t != nil && t.Open {
		return len(r.Sig) > 0
	}
	return t != nil && t.Roots != nil && len(r.Sig) > 0 && len(r.Chain) > 0
}

// checkRecords runs a worker until ctx ends.
func (r *Runtime) checkRecords(ctx context.Context) {
	for {
		p, wait, ok := r.verify.Pop(r.cfg.Now())
		if !ok {
			var budget <-chan time.Time
			var timer *time.Timer
			if wait > 0 {
				timer = time.NewTimer(wait)
				budget = timer.C
			}
			select {
			case <-ctx.Done():
				return
			case <-r.verify.Ready():
			case <-budget:
			}
			if timer != nil {
				timer.Stop()
			}
			continue
		}
		r.metrics.pending.Set(float64(r.verify.Len()))
		if network := r.admit(p.Rec, p.Regossip); network != "" {
			r.metrics.records.Set(float64(r.store.Count()))
			r.notify.send(network)
		}
	}
}

// startVerifiers runs the workers until ctx ends; the returned function
// waits for them.
func (r *Runtime) startVerifiers(ctx context.Context) (wait func()) {
	var wg sync.WaitGroup
	for range verifyWorkers() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.checkRecords(ctx)
		}()
	}
	return wg.Wait
}

func (r *Runtime) outcome(o string) { r.metrics.recordsReceived.WithLabelValues(o).Inc() }
