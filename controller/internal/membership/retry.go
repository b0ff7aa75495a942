package membership

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gridsync/gridsync/api/v1alpha1"
	"github.com/gridsync/gridsync/trust/enrol"
)

// retries are the networks whose site certificate could not be obtained
// (issued, enrolled or renewed) at the last attempt. The next attempt
// waits its turn, whatever reconciles the network in between (a gossip
// record, the Secret poll, the resync): an issuer that is down is asked
// again after a wait that doubles with each failure in a row, and never
// more often.
type retries struct {
	mu sync.Mutex
	m  map[string]*retry
}

// retry is one network's run of failures.
type retry struct {
	// since is the first failure of the run.
	since    time.Time
	failures int
	// next is when the next attempt may be made; generation the
	// network's at the last failure (a spec changed since, the issuer's
	// address say, is tried at once).
	next       time.Time
	generation int64
	// token is a digest of the enrolment token the last attempt used: a
	// new one (the operator gave the site another) is tried at once.
	token string
	// cond is what the last failure said, reported unchanged until the
	// next attempt.
	cond Condition
}

// failingReasons are the SiteIdentity reasons of a failed attempt: a
// network that says one of them has been failing since the condition's
// last transition (after a restart, say, when nothing is in memory).
var failingReasons = []string{ReasonEnrollmentRefused, ReasonIssuerUnreachable, ReasonSiteCertificateFailed, ReasonIdentityExpired}

// retryPending is the condition the last failed attempt said and how
// long until the next may be made; ok is false when an attempt may be
// made now.
func (r *Identity) retryPending(network *v1alpha1.GridNetwork, token string, now time.Time) (Condition, time.Duration, bool) {
	r.retries.mu.Lock()
	defer r.retries.mu.Unlock()
	f := r.retries.m[network.Name]
	if f == nil || f.generation != network.Generation || f.token != tokenDigest(token) || !now.Before(f.next) {
		return Condition{}, 0, false
	}
	return f.cond, f.next.Sub(now), true
}

// retriedWith notes the enrolment token the failed attempt used.
func (r *Identity) retriedWith(network, token string) {
	r.retries.mu.Lock()
	defer r.retries.mu.Unlock()
	if f := r.retries.m[network]; f != nil {
		f.token = tokenDigest(token)
	}
}

// tokenDigest identifies a token without keeping it ("" for none).
func tokenDigest(token string) string {
	if token == "" {
		return ""
	}
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:8])
}

// retryDone forgets a network's failures: its certificate was obtained,
// or needs nothing, or the network is gone.
func (r *Identity) retryDone(name string) {
	r.retries.mu.Lock()
	defer r.retries.mu.Unlock()
	delete(r.retries.m, name)
}

// failed records a failed attempt, said by cond, and returns the
// condition to report, which adds since when attempts have been failing
// and until when the current certificate (valid until notAfter, zero
// when there is none) stays in use, and the wait before the next attempt
// (retryDelay; at least floor).
func (r *Identity) failed(network *v1alpha1.GridNetwork, what string, cond Condition, floor time.Duration, notAfter, now time.Time) (Condition, time.Duration) {
	r.retries.mu.Lock()
	defer r.retries.mu.Unlock()
	if r.retries.m == nil {
		r.retries.m = map[string]*retry{}
	}
	f := r.retries.m[network.Name]
	if f == nil {
		f = &retry{since: now}
		if c := meta.FindStatusCondition(network.Status.Conditions, ConditionSiteIdentity); c != nil && c.Status == metav1.ConditionFalse &&
			slices.Contains(failingReasons, c.Reason) && !c.LastTransitionTime.IsZero() && c.LastTransitionTime.Time.Before(now) {
			f.since = c.LastTransitionTime.Time
		}
		r.retries.m[network.Name] = f
	}
	f.failures++
	var until time.Duration
	if !notAfter.IsZero() {
		until = notAfter.Sub(now)
	}
	wait := retryDelay(f.failures, r.Opts.SiteRenewalRetry, r.Opts.SiteRenewalRetryMax, floor, until, rand.Float64())
	f.next, f.generation = now.Add(wait), network.Generation
	if until > 0 {
		cond.Message += fmt.Sprintf("; the current certificate stays in use until %s", notAfter.UTC().Format(time.RFC3339))
	}
	cond.Message += fmt.Sprintf("; %s failing since %s, tried again at most %s apart", what, f.since.UTC().Format(time.RFC3339), max(floor, r.Opts.SiteRenewalRetryMax))
	f.cond = cond
	return cond, wait
}

// retryDelay is the wait after the failures-th failure in a row: first,
// doubled for each failure before it, up to most; less up to a quarter at
// random, so that sites that failed together do not come back together
// (and the wait never exceeds most); no shorter than floor. While a
// current certificate is valid (until left) the wait is at most half of
// what is left, but no shorter than first: the last attempts come before
// it expires, and the one after it (then an enrolment) within first.
func retryDelay(failures int, first, most, floor, until time.Duration, random float64) time.Duration {
	d := first
	for i := 1; i < failures && d < most; i++ {
		d *= 2
	}
	d = min(d, most)
	d -= time.Duration(random * float64(d) / 4)
	d = max(d, floor)
	if until > 0 {
		d = min(d, max(until/2, first))
	}
	return d
}

// transientRefusal says whether the issuer refused for a reason that
// passes by itself (it was busy, or its own API server failed it): tried
// again like an issuer that did not answer, not after the operator's
// time.
func transientRefusal(reason string) bool {
	return reason == enrol.RefusedBusy || reason == enrol.RefusedIssuerFailed
}

// busyRetry is the wait after an issuer refused for being busy (it
// answers a few renewals at a time, and many sites renew together after
// a rotation's switch): its Retry-After of a second, doubled with each
// busy refusal in a row, with up to as much again at random so that the
// sites that were turned away together come back apart; never longer than
// the backoff of an issuer that does not answer.
func busyRetry(failures int, backoff time.Duration, random float64) time.Duration {
	d := time.Second << min(failures-1, 8)
	d += time.Duration(random * float64(d))
	return min(d, backoff)
}

// soonerAfterBusy shortens the wait the last failure set for network to
// busyRetry's.
func (r *Identity) soonerAfterBusy(network string, wait time.Duration, now time.Time) time.Duration {
	r.retries.mu.Lock()
	defer r.retries.mu.Unlock()
	f := r.retries.m[network]
	if f == nil {
		return wait
	}
	wait = busyRetry(f.failures, wait, rand.Float64())
	f.next = now.Add(wait)
	return wait
}
