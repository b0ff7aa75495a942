// Package verifyqueue is the queue of records waiting for their check:
// those of sites held here apart from doubtful ones (of unknown sites, or
// of sites whose records were lately refused), each in arrival order,
// bounded in records and bytes, the doubtful ones checked within a budget
// of checks a second. A key holder flooding invented or junk records so
// spends at most that budget, and its records are the first dropped when
// the queue is full.
package verifyqueue

import (
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/gridsync/gridsync/gossip/record"
)

// Bounds of the queue.
const (
	// MaxRecords and MaxBytes bound the queue: a few
	// seconds of a full grid's churn.
	MaxRecords = 1024
	MaxBytes   = 16 << 20
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
)

// recordID tells copies of one signed record apart from anything else:
// another record, or another claim of the same version, is never taken
// for a copy.
type recordID struct {
	key     record.Key
	version uint64
	sig     string
}

func idOf(r *record.Record) recordID {
	return recordID{key: r.Key(), version: r.Version, sig: string(r.Sig)}
}

// Pending is a record waiting for its check.
type Pending struct {
	Rec      record.Record
	Regossip bool
	Size     int64
}

// Queue holds records waiting for their check: those of trusted
// senders apart from doubtful ones, each in arrival order.
type Queue struct {
	mu       sync.Mutex
	trusted  []Pending
	doubtful []Pending
	bytes    int64
	// waiting are the records queued, so that a second copy of one (as
	// push/pull and gossip bring) is not queued again.
	waiting map[recordID]struct{}
	// refusals is each sender's allowance of refused records, by network
	// and site.
	refusals map[string]*rate.Limiter
	budget   *rate.Limiter
	ready    chan struct{}
}

func New() *Queue {
	return &Queue{refusals: map[string]*rate.Limiter{}, waiting: map[recordID]struct{}{}, ready: make(chan struct{}, 1),
		budget: rate.NewLimiter(doubtfulChecksPerSecond, doubtfulBurst)}
}

func senderKey(r *record.Record) string { return r.Network + "/" + r.Site }

// penalized reports whether a sender spent its allowance of refusals
// (q.mu held).
func (q *Queue) penalizedLocked(key string, now time.Time) bool {
	l, ok := q.refusals[key]
	return ok && l.TokensAt(now) < 1
}

// refused charges a sender for a refused record.
func (q *Queue) Refused(r *record.Record, now time.Time) {
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
func (q *Queue) Push(p Pending, trusted bool, now time.Time) (copied bool, shed int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	id := idOf(&p.Rec)
	if _, ok := q.waiting[id]; ok {
		return true, 0
	}
	trusted = trusted && !q.penalizedLocked(senderKey(&p.Rec), now)
	for q.full(p.Size) {
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
	q.bytes += p.Size
	select {
	case q.ready <- struct{}{}:
	default:
	}
	return false, shed
}

// forgetLocked takes a record that leaves the queue out of its accounts
// (q.mu held).
func (q *Queue) forgetLocked(p Pending) {
	q.bytes -= p.Size
	delete(q.waiting, idOf(&p.Rec))
}

func (q *Queue) full(size int64) bool {
	return len(q.trusted)+len(q.doubtful) >= MaxRecords || q.bytes+size > MaxBytes
}

// pop takes the next record to check, trusted ones first. A doubtful one
// waits for the budget: when none is left, pop returns how long until
// there is (ok false), and a trusted arrival is taken before it.
func (q *Queue) Pop(now time.Time) (p Pending, wait time.Duration, ok bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	switch {
	case len(q.trusted) > 0:
		p, q.trusted = q.trusted[0], q.trusted[1:]
	case len(q.doubtful) > 0:
		r := q.budget.ReserveN(now, 1)
		if d := r.DelayFrom(now); d > 0 {
			r.CancelAt(now)
			return Pending{}, d, false
		}
		p, q.doubtful = q.doubtful[0], q.doubtful[1:]
	default:
		return Pending{}, 0, false
	}
	q.forgetLocked(p)
	return p, 0, true
}

func (q *Queue) Len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.trusted) + len(q.doubtful)
}

// Ready is signalled when a record is queued.
func (q *Queue) Ready() <-chan struct{} { return q.ready }
