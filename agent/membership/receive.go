// Records received from other sites, merged within the store's caps.

package membership

import "fmt"

// receive merges records from a peer. Records of this site are its own
// to write, and ignored. regossip sends what was news on by epidemic
// broadcast.
func (r *Runtime) receive(records []Record, regossip bool) {
	now := r.cfg.Now()
	r.mu.Lock()
	grid := r.grid.ID
	r.mu.Unlock()
	changed := map[string]bool{}
	for _, rec := range records {
		if rec.Site == r.cfg.Site {
			continue
		}
		// What is not newer than the copy held is not checked: it would
		// not be stored anyway, and push/pull brings many such.
		if cur, ok := r.store.get(rec.key()); ok && !newer(&rec, &cur) {
			continue
		}
		if why := check(r.trustOf(rec.Network), &rec, grid, now, r.cfg.TombstoneTTL); why != "" {
			r.rejected(&rec, why)
			continue
		}
		if classifyPEM(rec.CertPEM) == certPrivateKey {
			// Never kept, never passed on: the record goes on without it.
			r.metrics.dropped.WithLabelValues(dropPrivateKey).Inc()
			r.log.Error("swim_private_key_discarded", "site", rec.Site, "network", rec.Network,
				"why", "a gossiped certificate PEM carries a private key; it is discarded")
			rec.CertPEM = ""
		}
		ok, refused := r.store.mergeCapped(rec, now, true)
		if refused != "" {
			r.overCap(rec, refused)
			continue
		}
		if ok {
			changed[rec.Network] = true
			if regossip {
				if msg, err := encodeRecords([]Record{rec}); err == nil && len(msg) <= maxGossipRecordBytes {
					r.mu.Lock()
					q := r.queue
					r.mu.Unlock()
					if q != nil {
						q.QueueBroadcast(&recordBroadcast{key: rec.key(), msg: msg})
					}
				}
			}
		}
	}
	r.metrics.records.Set(float64(r.store.count()))
	for n := range changed {
		r.notify.send(n)
	}
}

// overCap counts a record dropped for a cap, and says so once per site
// and reason (a flood of invented records is one line, not thousands).
func (r *Runtime) overCap(rec Record, reason string) {
	r.metrics.dropped.WithLabelValues(reason).Inc()
	if !r.firstTime("swim_records_over_cap", reason, rec.Site) {
		return
	}
	r.log.Warn("swim_records_over_cap", "site", rec.Site, "network", rec.Network, "reason", reason,
		"limits", fmt.Sprintf("%d sites per network, %d networks per site, %d records, %d MiB", maxSitesPerNetwork, maxNetworksPerSite, maxRecords, maxRecordBytes>>20))
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
