// Records received from other sites, merged within the store's caps.

package gossip

import (
	"fmt"

	"github.com/gridsync/gridsync/gossip/record"
)

// admit checks a record of another site and merges it, on a verifier
// worker. It returns the record's network when the record changed what is
// held, else "".
func (r *Runtime) admit(rec record.Record, regossip bool) string {
	now := r.cfg.Now()
	r.mu.Lock()
	grid := r.grid.ID
	r.mu.Unlock()
	t := r.trustOf(rec.Network)
	// A copy that waited behind another of the same record (push/pull
	// and gossip bring several) costs no check once the first is held.
	if cur, ok := r.store.Get(rec.Key()); ok && !record.Newer(&rec, &cur) && !supersedes(t, &rec, &cur) {
		r.outcome(outcomeNotNewer)
		return ""
	}
	if why := record.Check(t, &rec, grid, now, r.cfg.TombstoneTTL); why != "" {
		if needsSignatureCheck(t, &rec) {
			// Only a refusal that cost a check is charged to the site:
			// junk that costs nothing to refuse in its name does not
			// make its records doubtful.
			r.verify.Refused(&rec, now)
		}
		r.rejected(&rec, why)
		r.outcome(outcomeRefused)
		return ""
	}
	if record.ClassifyPEM(rec.CertPEM) == record.CertPrivateKey {
		// Never kept, never passed on: the record goes on without it.
		r.metrics.dropped.WithLabelValues(record.DropPrivateKey).Inc()
		r.log.Error("swim_private_key_discarded", "site", rec.Site, "network", rec.Network,
			"why", "a gossiped certificate PEM carries a private key; it is discarded")
		rec.CertPEM = ""
	}
	var ok bool
	var refused string
	keep := func() bool {
		ok, refused = r.store.MergeCapped(rec, now, true)
		return ok
	}
	if t.Open {
		// Kept under the lock that binds the site to its key: two
		// records of one site signed with different keys never both are.
		why, full := r.keepOpen(t, &rec, now, keep)
		if why != "" {
			r.rejected(&rec, why)
			r.outcome(outcomeRefused)
			return ""
		}
		if full {
			refused = record.DropNetworkFull
		}
	} else {
		keep()
		if ok && r.cfg.Trust.Bundle(rec.Network).Evicted(rec.Site) {
			// An eviction that arrived while this record waited for its
			// check (after the walk that dropped the site's records):
			// not kept either.
			r.store.Remove(rec.Key())
			r.rejected(&rec, record.RejectEvicted)
			r.outcome(outcomeRefused)
			return ""
		}
	}
	if refused != "" {
		r.overCap(rec, refused)
		r.outcome(outcomeOverCap)
		return ""
	}
	if !ok {
		// A newer copy arrived while this one waited.
		r.outcome(outcomeNotNewer)
		return ""
	}
	r.outcome(outcomeStored)
	if len(rec.TrustBundle) > 0 && r.cfg.Trust != nil {
		// The site signed the record, not the bundle: the bundle is kept
		// only when the grid CA's signature on it verifies.
		if _, err := r.cfg.Trust.Offer(rec.Network, rec.TrustBundle); err != nil && r.firstTime("swim_trust_bundle_refused", err.Error(), rec.Site) {
			r.log.Warn("swim_trust_bundle_refused", "site", rec.Site, "network", rec.Network, "error", err.Error())
		}
	}
	if regossip {
		if msg, err := record.EncodeRecords([]record.Record{rec}); err == nil && len(msg) <= maxGossipRecordBytes {
			r.mu.Lock()
			q := r.queue
			r.mu.Unlock()
			if q != nil {
				q.QueueBroadcast(&recordBroadcast{key: rec.Key(), msg: msg})
			}
		}
	}
	return rec.Network
}

// overCap counts a record dropped for a cap, and says so once per site
// and reason (a flood of invented records is one line, not thousands).
func (r *Runtime) overCap(rec record.Record, reason string) {
	r.metrics.dropped.WithLabelValues(reason).Inc()
	if !r.firstTime("swim_records_over_cap", reason, rec.Site) {
		return
	}
	r.log.Warn("swim_records_over_cap", "site", rec.Site, "network", rec.Network, "reason", reason,
		"limits", fmt.Sprintf("%d sites per network, %d networks per site, %d records, %d MiB", record.MaxSitesPerNetwork, record.MaxNetworksPerSite, record.MaxRecords, record.MaxRecordBytes>>20))
}

// firstTime reports whether line has not yet been logged for this reason
// and site, and marks it logged: a flood of records is one line per site
// and reason, not thousands. At most maxSaidLines lines are remembered
// (and so logged) in all.
func (r *Runtime) firstTime(line, reason, site string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	key := line + "/" + reason + "/" + site
	if r.said[key] || len(r.said) >= maxSaidLines {
		return false
	}
	r.said[key] = true
	return true
}

// maxSaidLines bounds the lines firstTime lets through.
const maxSaidLines = 256
