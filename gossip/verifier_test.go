package gossip

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The verifier's queue: records of sites held go first, a sender whose
// records were refused loses its place, a full queue drops doubtful
// records first, and doubtful records wait for a budget of checks.
func TestVerifyQueueFavoursTrustedSenders(t *testing.T) {
	now := time.Now()
	rec := func(site string, v uint64) pendingRecord {
		return pendingRecord{rec: Record{Network: "prod", Site: site, Kind: KindProviders, Version: v}, size: 100}
	}
	q := newVerifyQueue()
	requirePushed(t, q, rec("inv-1", 1), false, now)
	requirePushed(t, q, rec("site-c", 2), true, now)
	p, wait, ok := q.pop(now)
	require.True(t, ok)
	require.Zero(t, wait)
	require.Equal(t, "site-c", p.rec.Site, "a held site's record waits for no doubtful one")
	p, _, _ = q.pop(now)
	require.Equal(t, "inv-1", p.rec.Site)
	_, _, ok = q.pop(now)
	require.False(t, ok)

	// Refusals beyond the allowance make a held site doubtful, until the
	// allowance refills.
	bad := rec("site-x", 1).rec
	for range refusalsAllowed {
		q.refused(&bad, now)
	}
	requirePushed(t, q, rec("site-c", 3), true, now)
	requirePushed(t, q, rec("site-x", 4), true, now)
	require.Equal(t, 1, len(q.trusted))
	require.Equal(t, 1, len(q.doubtful), "a site past its refusals is doubtful")
	later := now.Add(time.Duration(float64(time.Second) / float64(refusalRefill)))
	requirePushed(t, q, rec("site-x", 5), true, later)
	require.Equal(t, 2, len(q.trusted), "the allowance refilled")

	// Full: a doubtful arrival is dropped; a trusted one takes the place
	// of the newest doubtful record.
	q = newVerifyQueue()
	for i := range maxPendingRecords {
		requirePushed(t, q, rec("inv", uint64(i)), false, now)
	}
	_, shed := q.push(rec("inv", 9999), false, now)
	require.Equal(t, 1, shed)
	_, shed = q.push(rec("site-c", 1), true, now)
	require.Equal(t, 1, shed)
	require.Equal(t, maxPendingRecords, q.len())
	p, _, _ = q.pop(now)
	require.Equal(t, "site-c", p.rec.Site)
	require.Equal(t, uint64(maxPendingRecords-2), q.doubtful[len(q.doubtful)-1].rec.Version, "the newest doubtful record made room")

	// The budget: beyond the burst, a doubtful record waits for it, and a
	// trusted arrival goes before it.
	for range doubtfulBurst {
		_, wait, ok := q.pop(now)
		require.True(t, ok)
		require.Zero(t, wait)
	}
	_, wait, ok = q.pop(now)
	require.False(t, ok)
	require.Positive(t, wait)
	require.LessOrEqual(t, wait, time.Second/doubtfulChecksPerSecond)
	requirePushed(t, q, rec("site-c", 2), true, now)
	p, _, ok = q.pop(now)
	require.True(t, ok)
	require.Equal(t, "site-c", p.rec.Site)
	p, _, ok = q.pop(now.Add(wait))
	require.True(t, ok, "the budget refilled")
	require.Equal(t, "inv", p.rec.Site)
	require.Equal(t, maxPendingRecords-2-doubtfulBurst, q.len())
}

// requirePushed pushes a record that is queued: no copy, nothing shed.
func requirePushed(t *testing.T, q *verifyQueue, p pendingRecord, trusted bool, now time.Time) {
	t.Helper()
	copied, shed := q.push(p, trusted, now)
	require.False(t, copied)
	require.Zero(t, shed)
}

// A copy of a record waiting is not queued again (push/pull and gossip
// bring several); another signature of the same version is no copy.
func TestVerifyQueueTakesOneCopy(t *testing.T) {
	now := time.Now()
	q := newVerifyQueue()
	r := pendingRecord{rec: Record{Network: "prod", Site: "site-c", Kind: KindProviders, Version: 7, Sig: []byte("a")}, size: 100}
	requirePushed(t, q, r, false, now)
	copied, shed := q.push(r, false, now)
	require.True(t, copied)
	require.Zero(t, shed)
	other := r
	other.rec.Sig = []byte("b")
	requirePushed(t, q, other, false, now)
	require.Equal(t, 2, q.len())
	_, _, ok := q.pop(now)
	require.True(t, ok)
	requirePushed(t, q, r, false, now)
}
