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

	"golang.org/x/time/rate"

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

// Bounds of the verifier.
const (
	// maxPendingRecords and maxPendingBytes bound the queue: a few
	// seconds of a full grid's churn.
	maxPendingRecords = 1024
	maxPendingBytes   = 16 << 20
	// doubtfulChecksPerSecond and doubtfulBurst are the budget of checks
	// of doubtful records (of a site not held, or lately refused): a
	// grid of a few hundred sites joining at once fits in the burst, and
	// a flood of invented chains (each at most a few milliseconds with
	// the keys keypolicy accepts) costs at most a fraction of a core.
	doubtfulChecksPerSecond = 100
	doubtfulBurst           = 400
	// refusalsAllowed and refusalRefill: a site holds its place once a
	// few of its records were refused (a certificate renewal can cost a
	// record or two); beyond that its records are doubtful until the
	// allowance refills.
	refusalsAllowed = 4
	refusalRefill   = rate.Limit(0.2)
	// maxTrackedSenders bounds the refusal allowances remembered; beyond
	// it they start again.
	maxTrackedSenders = 4096
	// maxVerifyWorkers bounds the workers whatever the cores.
	maxVerifyWorkers = 4
)

// pendingID tells copies of one signed record apart from anything else:
// another record, or another claim of the same version, is never taken
// for a copy.
type pendingID struct {
	key     record.Key
	version uint64
	sig     string
}

func idOf(r *record.Record) pendingID {
	return pendingID{key: r.Key(), version: r.Version, sig: string(r.Sig)}
}

// pendingRecord is a record waiting for its check.
type pendingRecord struct {
	rec      record.Record
	regossip bool
	size     int64
}

// verifyQueue holds records waiting for their check: those of trusted
// senders apart from doubtful ones, each in arrival order.
type verifyQueue struct {
	mu       sync.Mutex
	trusted  []pendingRecord
	doubtful []pendingRecord
	bytes    int64
	// waiting are the records queued, so that a second copy of one (as
	// push/pull and gossip bring) is not queued again.
	waiting map[pendingID]struct{}
	// refusals is each sender's allowance of refused records, by network
	// and site.
	refusals map[string]*rate.Limiter
	budget   *rate.Limiter
	ready    chan struct{}
}

func newVerifyQueue() *verifyQueue {
	return &verifyQueue{refusals: map[string]*rate.Limiter{}, waiting: map[pendingID]struct{}{}, ready: make(chan struct{}, 1),
		budget: rate.NewLimiter(doubtfulChecksPerSecond, doubtfulBurst)}
}

func senderKey(r *record.Record) string { return r.Network + "/" + r.Site }

// penalized reports whether a sender spent its allowance of refusals
// (q.mu held).
func (q *verifyQueue) penalizedLocked(key string, now time.Time) bool {
	l, ok := q.refusals[key]
	return ok && l.TokensAt(now) < 1
}

// refused charges a sender for a refused record.
func (q *verifyQueue) refused(r *record.Record, now time.Time) {
	key := senderKey(r)
	q.mu.Lock()
	defer q.mu.Unlock()
	l, ok := q.refusals[key]
	if !ok {
		if len(q.refusals) >= maxTrackedSenders {
			q.refusals = map[string]*rate.Limiter{}
		}
		l = rate.NewLimiter(refusalRefill, refusalsAllowed)
		q.refusals[key] = l
	}
	l.AllowN(now, 1)
}

// push queues a record; trusted says its site is held here. It returns
// whether the record was a copy of one already queued (and not queued
// again), and the records dropped to make room (the arrival itself when
// there is none): doubtful ones go first, the newest first.
func (q *verifyQueue) push(p pendingRecord, trusted bool, now time.Time) (copied bool, shed int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	id := idOf(&p.rec)
	if _, ok := q.waiting[id]; ok {
		return true, 0
	}
	trusted = trusted && !q.penalizedLocked(senderKey(&p.rec), now)
	for q.full(p.size) {
		if !trusted || len(q.doubtful) == 0 {
			shed++
			return false, shed
		}
		last := q.doubtful[len(q.doubtful)-1]
		q.doubtful = q.doubtful[:len(q.doubtful)-1]
		q.forgetLocked(last)
		shed++
	}
	q.waiting[id] = struct{}{}
	if trusted {
		q.trusted = append(q.trusted, p)
	} else {
		q.doubtful = append(q.doubtful, p)
	}
	q.bytes += p.size
	select {
	case q.ready <- struct{}{}:
	default:
	}
	return false, shed
}

// forgetLocked takes a record that leaves the queue out of its accounts
// (q.mu held).
func (q *verifyQueue) forgetLocked(p pendingRecord) {
	q.bytes -= p.size
	delete(q.waiting, idOf(&p.rec))
}

func (q *verifyQueue) full(size int64) bool {
	return len(q.trusted)+len(q.doubtful) >= maxPendingRecords || q.bytes+size > maxPendingBytes
}

// pop takes the next record to check, trusted ones first. A doubtful one
// waits for the budget: when none is left, pop returns how long until
// there is (ok false), and a trusted arrival is taken before it.
func (q *verifyQueue) pop(now time.Time) (p pendingRecord, wait time.Duration, ok bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	switch {
	case len(q.trusted) > 0:
		p, q.trusted = q.trusted[0], q.trusted[1:]
	case len(q.doubtful) > 0:
		r := q.budget.ReserveN(now, 1)
		if d := r.DelayFrom(now); d > 0 {
			r.CancelAt(now)
			return pendingRecord{}, d, false
		}
		p, q.doubtful = q.doubtful[0], q.doubtful[1:]
	default:
		return pendingRecord{}, 0, false
	}
	q.forgetLocked(p)
	return p, 0, true
}

func (q *verifyQueue) len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.trusted) + len(q.doubtful)
}

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
		p := pendingRecord{rec: rec, regossip: regossip, size: record.MemorySize(&rec)}
		copied, shed := r.verify.push(p, r.store.HoldsSite(rec.Network, rec.Site), now)
		if copied {
			r.outcome(outcomeDuplicate)
		}
		if shed > 0 {
			r.metrics.recordsReceived.WithLabelValues(outcomeShed).Add(float64(shed))
			if r.firstTime("swim_records_shed", "queue_full", "") {
				r.log.Warn("swim_records_shed", "why", "the queue of records waiting for their check is full: records of unknown or lately refused sites are dropped first, and come back with push/pull if they are a site's",
					"limit_records", maxPendingRecords, "limit_bytes", maxPendingBytes)
			}
		}
	}
	r.metrics.pending.Set(float64(r.verify.len()))
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
		p, wait, ok := r.verify.pop(r.cfg.Now())
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
			case <-r.verify.ready:
			case <-budget:
			}
			if timer != nil {
				timer.Stop()
			}
			continue
		}
		r.metrics.pending.Set(float64(r.verify.len()))
		if network := r.admit(p.rec, p.regossip); network != "" {
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
