package membership

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
	require.Zero(t, q.push(rec("inv-1", 1), false, now))
	require.Zero(t, q.push(rec("site-c", 2), true, now))
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
	require.Zero(t, q.push(rec("site-c", 3), true, now))
	require.Zero(t, q.push(rec("site-x", 4), true, now))
	require.Equal(t, 1, len(q.trusted))
	require.Equal(t, 1, len(q.doubtful), "a site past its refusals is doubtful")
	later := now.Add(time.Duration(float64(time.Second) / float64(refusalRefill)))
	require.Zero(t, q.push(rec("site-x", 5), true, later))
	require.Equal(t, 2, len(q.trusted), "the allowance refilled")

	// Full: a doubtful arrival is dropped; a trusted one takes the place
	// of the newest doubtful record.
	q = newVerifyQueue()
	for i := range maxPendingRecords {
		require.Zero(t, q.push(rec("inv", uint64(i)), false, now))
	}
	require.Equal(t, 1, q.push(rec("inv", 9999), false, now))
	require.Equal(t, 1, q.push(rec("site-c", 1), true, now))
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
	require.Zero(t, q.push(rec("site-c", 2), true, now))
	p, _, ok = q.pop(now)
	require.True(t, ok)
	require.Equal(t, "site-c", p.rec.Site)
	p, _, ok = q.pop(now.Add(wait))
	require.True(t, ok, "the budget refilled")
	require.Equal(t, "inv", p.rec.Site)
	require.Equal(t, maxPendingRecords-2-doubtfulBurst, q.len())
}
