package membership

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The verifier's queue: records of sites held go first, a sender whose
// records were refused loses its place, a full queue drops doubtful
// records first, and doubtful records are checked within a budget.
func TestVerifyQueueFavoursTrustedSenders(t *testing.T) {
	now := time.Now()
	rec := func(site string, v uint64) pendingRecord {
		return pendingRecord{rec: Record{Network: "prod", Site: site, Kind: KindProviders, Version: v}, size: 100}
	}
	q := newVerifyQueue()
	require.Zero(t, q.push(rec("inv-1", 1), false, now))
	require.Zero(t, q.push(rec("site-c", 2), true, now))
	p, shed, ok := q.pop(now)
	require.True(t, ok)
	require.False(t, shed)
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

	// The budget: beyond the burst, doubtful records are shed unchecked.
	checked, dropped := 0, 0
	for {
		_, shed, ok := q.pop(now)
		if !ok {
			break
		}
		if shed {
			dropped++
		} else {
			checked++
		}
	}
	require.Equal(t, doubtfulBurst, checked)
	require.Equal(t, maxPendingRecords-1-doubtfulBurst, dropped)
}

// Records are checked on the verifier's workers, not on memberlist's
// goroutine, and every record received is counted under one outcome; the
// newest genuine record wins whatever order the workers took them in.
func TestReceiveHandsRecordsToTheWorkers(t *testing.T) {
	ca := newTestCA(t)
	s := startSite(t, "site-a", withKey(randomKey(t)), withIdentity("prod", ca.identity(t, "site-a")))
	s.waitRunning(t)
	c := ca.leaf(t, "site-c", leafSpec{})
	v := uint64(time.Now().UnixNano())
	good := signedBy(t, c, Record{Network: "prod", Site: "site-c", Kind: KindProviders, Version: v, Providers: providers("pc")})
	older := signedBy(t, c, Record{Network: "prod", Site: "site-c", Kind: KindProviders, Version: v - 1, Providers: providers("old")})
	forged := good
	forged.Providers = providers("gpt-evil")
	forged.Version = v + 1
	own := Record{Network: "prod", Site: "site-a", Kind: KindProviders, Version: v}
	s.receive([]Record{good, forged, own}, false)
	s.receive([]Record{older}, false)
	outcomes := func() map[string]float64 {
		out := map[string]float64{}
		for _, o := range recordOutcomes {
			out[o] = s.counter("grid_swim_records_received_total", o)
		}
		return out
	}
	require.Eventually(t, func() bool {
		o := outcomes()
		return o[outcomeStored]+o[outcomeNotNewer]+o[outcomeRefused]+o[outcomeOwnSite] == 4
	}, 10*time.Second, 10*time.Millisecond)
	o := outcomes()
	require.Equal(t, 1.0, o[outcomeRefused])
	require.Equal(t, 1.0, o[outcomeOwnSite])
	// The older copy is not newer than what is held once good is stored;
	// checked before it, it was stored and then superseded.
	require.Equal(t, 2.0, o[outcomeNotNewer]+o[outcomeStored])
	held, ok := s.store.get(good.key())
	require.True(t, ok)
	require.Equal(t, good.Version, held.Version, "the newest genuine record wins")
	require.Zero(t, s.verify.len())
}
