package verifyqueue

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gridsync/gridsync/gossip/record"
)

// The verifier's queue: records of sites held go first, a sender whose
// records were refused loses its place, a full queue drops doubtful
// records first, and doubtful records wait for a budget of checks.
func TestVerifyQueueFavoursTrustedSenders(t *testing.T) {
	now := time.Now()
	rec := func(site string, v uint64) Pending {
		return Pending{Rec: record.Record{Network: "prod", Site: site, Kind: record.KindProviders, Version: v}, Size: 100}
	}
	q := New()
	requirePushed(t, q, rec("inv-1", 1), false, now)
	requirePushed(t, q, rec("site-c", 2), true, now)
	p, wait, ok := q.Pop(now)
	require.True(t, ok)
	require.Zero(t, wait)
	require.Equal(t, "site-c", p.Rec.Site, "a held site's record waits for no doubtful one")
	p, _, _ = q.Pop(now)
	require.Equal(t, "inv-1", p.Rec.Site)
	_, _, ok = q.Pop(now)
	require.False(t, ok)

	// Refusals beyond the allowance make a held site doubtful, until the
	// allowance refills.
	bad := rec("site-x", 1).Rec
	for range refusalsAllowed {
		q.Refused(&bad, now)
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
	q = New()
	for i := range MaxRecords {
		requirePushed(t, q, rec("inv", uint64(i)), false, now)
	}
	_, shed := q.Push(rec("inv", 9999), false, now)
	require.Equal(t, 1, shed)
	_, shed = q.Push(rec("site-c", 1), true, now)
	require.Equal(t, 1, shed)
	require.Equal(t, MaxRecords, q.Len())
	p, _, _ = q.Pop(now)
	require.Equal(t, "site-c", p.Rec.Site)
	require.Equal(t, uint64(MaxRecords-2), q.doubtful[len(q.doubtful)-1].Rec.Version, "the newest doubtful record made room")

	// The budget: beyond the burst, a doubtful record waits for it, and a
	// trusted arrival goes before it.
	for range doubtfulBurst {
		_, wait, ok := q.Pop(now)
		require.True(t, ok)
		require.Zero(t, wait)
	}
	_, wait, ok = q.Pop(now)
	require.False(t, ok)
	require.Positive(t, wait)
	require.LessOrEqual(t, wait, time.Second/doubtfulChecksPerSecond)
	requirePushed(t, q, rec("site-c", 2), true, now)
	p, _, ok = q.Pop(now)
	require.True(t, ok)
	require.Equal(t, "site-c", p.Rec.Site)
	p, _, ok = q.Pop(now.Add(wait))
	require.True(t, ok, "the budget refilled")
	require.Equal(t, "inv", p.Rec.Site)
	require.Equal(t, MaxRecords-2-doubtfulBurst, q.Len())
}

// requirePushed pushes a record that is queued: no copy, nothing shed.
func requirePushed(t *testing.T, q *Queue, p Pending, trusted bool, now time.Time) {
	t.Helper()
	copied, shed := q.Push(p, trusted, now)
	require.False(t, copied)
	require.Zero(t, shed)
}

// A copy of a record waiting is not queued again (push/pull and gossip
// bring several); another signature of the same version is no copy.
func TestVerifyQueueTakesOneCopy(t *testing.T) {
	now := time.Now()
	q := New()
	r := Pending{Rec: record.Record{Network: "prod", Site: "site-c", Kind: record.KindProviders, Version: 7, Sig: []byte("a")}, Size: 100}
	requirePushed(t, q, r, false, now)
	copied, shed := q.Push(r, false, now)
	require.True(t, copied)
	require.Zero(t, shed)
	other := r
	other.Rec.Sig = []byte("b")
	requirePushed(t, q, other, false, now)
	require.Equal(t, 2, q.Len())
	_, _, ok := q.Pop(now)
	require.True(t, ok)
	requirePushed(t, q, r, false, now)
}
