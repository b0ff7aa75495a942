package membership

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gridsync/gridsync/api/v1alpha1"
	"github.com/gridsync/gridsync/controller/internal/base"
)

// The wait after each failure in a row: from the first, doubling, at
// most the cap; up to a quarter less at random, never more than the cap;
// a refusal's floor; at most half of what is left of a current
// certificate, but no shorter than the first wait.
func TestRetryDelayBacksOffToACapWithJitter(t *testing.T) {
	const first, most = 10 * time.Second, 5 * time.Minute
	var got []time.Duration
	for n := 1; n <= 8; n++ {
		got = append(got, retryDelay(n, first, most, 0, 0, 0))
	}
	assert.Equal(t, []time.Duration{10 * time.Second, 20 * time.Second, 40 * time.Second, 80 * time.Second, 160 * time.Second, most, most, most}, got)
	assert.Equal(t, 7500*time.Millisecond, retryDelay(1, first, most, 0, 0, 1), "a quarter less at most")
	assert.Equal(t, 225*time.Second, retryDelay(30, first, most, 0, 0, 1))
	for n := 1; n <= 64; n++ {
		d := retryDelay(n, first, most, 0, 0, 0.5)
		assert.True(t, d > 0 && d <= most, "failure %d: %s", n, d)
	}
	assert.Equal(t, 2*time.Minute, retryDelay(1, first, most, 2*time.Minute, 0, 0), "a refusal waits for the operator")
	assert.Equal(t, 30*time.Second, retryDelay(8, first, most, 0, time.Minute, 0), "half of what is left of the certificate")
	assert.Equal(t, 30*time.Second, retryDelay(1, first, most, 2*time.Minute, time.Minute, 0), "a refusal too")
	assert.Equal(t, first, retryDelay(8, first, most, 0, 4*time.Second, 0), "and never shorter than the first wait")
}

// A failure holds the next attempt off, whatever reconciles the network,
// until its wait is over or the network's spec changes; the condition
// says since when attempts fail (from the condition written before, when
// nothing is in memory) and until when the certificate stays in use. A
// success forgets the failures.
func TestFailedAttemptsWaitTheirTurn(t *testing.T) {
	r := &Identity{Env: &base.Env{Opts: base.Config{SiteRenewalRetry: 10 * time.Second, SiteRenewalRetryMax: 5 * time.Minute}}}
	now := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	network := &v1alpha1.GridNetwork{}
	network.Name, network.Generation = "net", 3
	network.Status.Conditions = []metav1.Condition{{Type: ConditionSiteIdentity, Status: metav1.ConditionFalse, Reason: ReasonIssuerUnreachable,
		LastTransitionTime: metav1.NewTime(now.Add(-time.Hour))}}
	expiry := now.Add(8 * time.Hour)

	_, _, pending := r.retryPending(network, "", now)
	assert.False(t, pending, "nothing failed yet")
	cond, wait := r.failed(network, "renewal", Condition{Reason: ReasonIssuerUnreachable, Message: "issuer down"}, 0, expiry, now)
	assert.Equal(t, "issuer down; the current certificate stays in use until 2030-01-02T11:04:05Z; renewal failing since 2030-01-02T02:04:05Z, tried again at most 5m0s apart", cond.Message)
	assert.InDelta(t, 10*time.Second, wait, float64(2500*time.Millisecond))

	held, left, pending := r.retryPending(network, "", now.Add(wait/2))
	assert.True(t, pending)
	assert.Equal(t, cond, held, "the same condition, no status written")
	assert.Equal(t, wait-wait/2, left)
	_, _, pending = r.retryPending(network, "", now.Add(wait))
	assert.False(t, pending, "its turn")
	network.Generation++
	_, _, pending = r.retryPending(network, "", now)
	assert.False(t, pending, "a changed spec is tried at once")

	_, second := r.failed(network, "renewal", Condition{Message: "issuer down"}, 0, expiry, now.Add(wait))
	assert.InDelta(t, 20*time.Second, second, float64(5*time.Second), "doubled")
	r.retryDone("net")
	r.failed(network, "enrolment", Condition{Reason: ReasonEnrollmentRefused, Message: "token used"}, 2*time.Minute, time.Time{}, now)
	r.retriedWith("net", "gst_old")
	_, _, pending = r.retryPending(network, "gst_old", now.Add(time.Second))
	assert.True(t, pending, "the same token waits its turn")
	_, _, pending = r.retryPending(network, "gst_new", now.Add(time.Second))
	assert.False(t, pending, "a new token is tried at once")
	r.retryDone("net")
	network.Status.Conditions = nil
	cond, _ = r.failed(network, "enrolment", Condition{Message: "issuer down"}, 0, time.Time{}, now)
	assert.Equal(t, "issuer down; enrolment failing since 2030-01-02T03:04:05Z, tried again at most 5m0s apart", cond.Message, "a new run of failures, no certificate")
}

// A busy issuer is asked again after its Retry-After of a second, doubled
// with each busy refusal in a row and spread at random, never later than
// the backoff of an issuer that does not answer.
func TestABusyIssuerIsAskedAgainSoon(t *testing.T) {
	assert.Equal(t, time.Second, busyRetry(1, 10*time.Second, 0))
	assert.Equal(t, 2*time.Second, busyRetry(1, 10*time.Second, 1))
	assert.Equal(t, 4*time.Second, busyRetry(3, 10*time.Second, 0))
	assert.Equal(t, 10*time.Second, busyRetry(5, 10*time.Second, 0.5), "never past the backoff")
	assert.Equal(t, 5*time.Minute, busyRetry(40, 5*time.Minute, 0.9))
}
