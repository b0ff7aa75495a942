// Open networks (no grid CA): this site signs its records there with its
// own key, and holds every other site's records to the first key that
// signed them, until an operator resets that site's key here.

package gossip

import (
	"time"

	"github.com/gridsync/gridsync/gossip/record"
	"github.com/gridsync/gridsync/gossip/sites"
)

// openTrust completes an open network's trust: this site's key, and the
// keys the other sites are held to, carried over from the network's
// previous trust and completed with those kept before a restart
// (id.SiteKeys, from the network's status).
func (r *Runtime) openTrust(t, prev *record.NetworkTrust, id sites.Identity) {
	if id.RecordKey != nil {
		s, err := record.NewOpenSigner(id.RecordKey)
		if err != nil {
			r.log.Error("swim_record_key_unusable", "network", t.Network, "error", err.Error())
		}
		t.OpenSigner = s
	}
	if prev != nil && prev.Open && prev.Keys != nil {
		t.Keys = prev.Keys
	} else {
		t.Keys = record.NewSiteKeys()
	}
	t.Keys.Load(id.SiteKeys)
}

// openFingerprint is the fingerprint of this site's key in an open
// network ("" when it signs with none).
func openFingerprint(t *record.NetworkTrust) string {
	if t == nil || t.OpenSigner == nil {
		return ""
	}
	return t.OpenSigner.Fingerprint
}

// supersedes reports whether rec replaces cur whatever their versions: in
// an open network, a signed record replaces an unsigned one of its site
// (which a key holder may have written far ahead), once its key is
// accepted.
func supersedes(t *record.NetworkTrust, rec, cur *record.Record) bool {
	return t != nil && t.Open && record.Signed(rec) && !record.Signed(cur)
}

// keepOpen is admit's last step in an open network: keep stores the
// record, under the lock that binds its site to its key. refused: the
// record's key is not (or no longer) its site's; full: the network holds
// as many keys as it may, none of them the site's.
func (r *Runtime) keepOpen(t *record.NetworkTrust, rec *record.Record, now time.Time, keep func() bool) (refused string, full bool) {
	refused, full, bound := t.Keys.Admit(rec, now, func() { r.dropUnsigned(rec.Network, rec.Site) }, keep)
	if bound && r.firstTime("swim_site_key_bound", rec.Network, rec.Site) {
		fp, _ := t.Keys.Bound(rec.Site)
		r.log.Info("swim_site_key_bound", "site", rec.Site, "network", rec.Network, "fingerprint", fp,
			"why", "the network has no grid CA: the site's records are held to the first key that signed them")
	}
	return refused, full
}

// dropUnsigned forgets the unsigned records held of a site in a network.
func (r *Runtime) dropUnsigned(network, site string) {
	for _, kind := range record.Kinds {
		k := record.Key{Network: network, Site: site, Kind: kind}
		if cur, ok := r.store.Get(k); ok && !record.Signed(&cur) {
			r.store.Remove(k)
		}
	}
}

// ResetSiteKey forgets, in an open network, the key a site's records are
// held to, and the records held of the site: the next key whose record
// of the site arrives is bound, the key reset only by a record signed
// after now (the copies other sites still hold and pass on bind
// nothing). It reports whether the site was held to a key; it does
// nothing in a network that is not open here.
func (r *Runtime) ResetSiteKey(network, site string) bool {
	t := r.trustOf(network)
	if t == nil || !t.Open || t.Keys == nil {
		return false
	}
	was := t.Keys.Reset(site, r.cfg.Now(), func() {
		for _, kind := range record.Kinds {
			r.store.Remove(record.Key{Network: network, Site: site, Kind: kind})
		}
	})
	r.log.Info("swim_site_key_reset", "site", site, "network", network, "was_bound", was)
	r.metrics.records.Set(float64(r.store.Count()))
	r.notify.send(network)
	return was
}
