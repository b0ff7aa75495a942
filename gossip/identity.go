// This site's identity in each network: what its records are signed
// with, what other sites' records are checked against, and keeping its
// own records freshly signed.

package gossip

import (
	"bytes"
	"crypto/x509"
	"slices"
	"sort"
	"time"

	"github.com/gridsync/gridsync/gossip/record"
	"github.com/gridsync/gridsync/gossip/sites"
)

// SetIdentity says how a network's records are signed and checked. A
// network the runtime has no identity for takes no part in membership:
// records of it are refused (unknown_network) and none of this site's are
// sent. A new signing certificate (a renewal) signs this site's records of
// the network again at once; other sites keep accepting what the previous
// certificate signed until it expires, so a renewal never drops a site. New
// roots ask every member for the records this site lacks, so that records
// refused before the roots loaded arrive without waiting for a push/pull.
func (r *Runtime) SetIdentity(network string, id sites.Identity) {
	var s *record.Signer
	if id.Signer != nil {
		var err error
		if s, err = record.NewSigner(id.Signer); err != nil {
			r.log.Error("swim_site_certificate_unusable", "network", network, "error", err.Error())
		}
	}
	r.mu.Lock()
	prev := r.trust[network]
	t := &record.NetworkTrust{Open: id.Open, Roots: id.Roots, Signer: s, RootIDs: record.RootIDsOf(id.RootCerts), Network: network, Evictions: r.cfg.Trust}
	if id.Open {
		r.openTrust(t, prev, id)
	}
	sameRoots := prev != nil && prev.Open == t.Open && rootsEqual(prev.Roots, t.Roots) && slices.EqualFunc(prev.RootIDs, t.RootIDs, func(a, b record.RootID) bool {
		return bytes.Equal(a.KeyID, b.KeyID) && bytes.Equal(a.Subject, b.Subject)
	})
	if sameRoots {
		t.Chains = prev.Chains
	} else {
		t.Chains = record.NewChainCache()
	}
	// The same certificate or open network key, or still none (a site
	// waiting for its certificate): nothing to sign again. The controller
	// calls this at every reconcile.
	sameSigner := prev != nil && bytes.Equal(signerLeaf(prev.Signer), signerLeaf(t.Signer)) && openFingerprint(prev) == openFingerprint(t)
	r.trust[network] = t
	r.mu.Unlock()
	if !sameSigner {
		r.resign(network)
	}
	if !sameRoots {
		go r.pull()
		if r.cfg.Trust != nil && !id.Open {
			go r.offerHeldBundles(network)
		}
	}
}

// offerHeldBundles offers the trust bundles the held site records of a
// network carry: they may have arrived before the network's grid CA
// loaded, or before the site loaded what it kept across a restart, when
// none was taken.
func (r *Runtime) offerHeldBundles(network string) {
	for _, rec := range r.store.All() {
		if rec.Network == network && rec.Kind == record.KindSite && len(rec.TrustBundle) > 0 {
			_, _ = r.cfg.Trust.Offer(network, rec.TrustBundle)
		}
	}
}

func signerLeaf(s *record.Signer) []byte {
	if s == nil {
		return nil
	}
	return s.Chain[0]
}

// rootsEqual compares two root pools, nil included.
func rootsEqual(a, b *x509.CertPool) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Equal(b)
}

// trustOf is a network's identity, nil when it has none.
func (r *Runtime) trustOf(network string) *record.NetworkTrust {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.trust[network]
}

// putOwn signs, stores and sends one of this site's records when its
// content changed. In a network with a grid CA nothing of this site is
// stored or sent until it has a certificate: an unsigned record would be
// refused everywhere. In an open network it is signed with this site's
// key, or goes unsigned without one.
func (r *Runtime) putOwn(rec record.Record) {
	if signed, ok := r.signOwn(rec, false); ok {
		r.send([]record.Record{signed}, true)
	}
}

// signOwn is putOwn without the send: it returns the record as signed
// and stored, false when nothing was (the same content, or no way to sign
// it yet). With again it signs the same content anew (a renewed
// certificate, a new grid ID, a record that must be signed again before
// it is too old).
func (r *Runtime) signOwn(rec record.Record, again bool) (record.Record, bool) {
	if cur, ok := r.store.Get(rec.Key()); ok && !again && sameContent(&cur, &rec) {
		return record.Record{}, false
	}
	r.mu.Lock()
	t := r.trust[rec.Network]
	grid := r.grid.ID
	r.mu.Unlock()
	if t == nil || !t.Open && t.Signer == nil {
		return record.Record{}, false
	}
	rec.Version, rec.Grid, rec.Chain, rec.Sig = r.clock.Next(), grid, nil, nil
	var err error
	switch {
	case !t.Open:
		err = t.Signer.Sign(&rec)
	case t.OpenSigner != nil:
		err = t.OpenSigner.Sign(&rec)
	}
	if err != nil {
		r.log.Error("swim_record_not_signed", "network", rec.Network, "kind", string(rec.Kind), "error", err.Error())
		return record.Record{}, false
	}
	r.store.Merge(rec, r.cfg.Now())
	return rec, true
}

// sameContent compares what two records say, not how they are signed.
func sameContent(a, b *record.Record) bool {
	var enc [2][]byte
	for i, rec := range []record.Record{*a, *b} {
		rec.Version, rec.Grid, rec.Chain, rec.Sig = 0, "", nil, nil
		enc[i], _ = record.EncodeRecords([]record.Record{rec})
	}
	return bytes.Equal(enc[0], enc[1])
}

// resign signs this site's records of a network again (or, in one or
// all networks, after a new certificate or grid ID), and announces what
// was held back for want of a certificate. The records signed again go
// to each member in one message.
func (r *Runtime) resign(network string) {
	var signed []record.Record
	for _, rec := range r.store.OfSite(r.cfg.Site) {
		if rec.Deleted || network != "" && rec.Network != network {
			continue
		}
		if s, ok := r.signOwn(rec, true); ok {
			signed = append(signed, s)
		}
	}
	r.send(signed, true)
	r.mu.Lock()
	networks := map[string]localState{}
	for n, l := range r.locals {
		if network == "" || n == network {
			networks[n] = l
		}
	}
	r.mu.Unlock()
	for n, l := range networks {
		r.announce(n, l)
	}
}

// refreshOwn signs this site's records again before other sites would
// refuse them for their age (older than the tombstone lifetime: a record
// that is not refreshed must not be taken for a live one after a replay).
// When one is due, every record of this site past half that age is
// signed with it, so that the site's records keep being signed together
// and go to each member in one message, one connection. A refresh is not
// gossiped: nothing in it is news, and a member the direct copy missed is
// sent it again (resend.go), while a receiver that a gossiped copy
// reaches before the direct one passes it on to others.
//
// The refreshes were most of an idle grid's traffic: over a 100 ms, 5 %
// loss WAN, 50 sites refreshing two records each a third of the lifetime
// (200 s), each record on a connection of its own to every member and
// gossiped when it fit a packet, sent 1,037 B/s straight to the members
// and 282 B/s in gossip, of the 2,167 B/s each site put on the wire.
// Together, at half the lifetime and not gossiped: 614 B/s, of 1,084.
func (r *Runtime) refreshOwn(now time.Time) {
	age := r.cfg.refreshAge()
	due := uint64(now.Add(-age).UnixNano())
	along := uint64(now.Add(-age / 2).UnixNano())
	own := r.store.OfSite(r.cfg.Site)
	if !slices.ContainsFunc(own, func(rec record.Record) bool { return !rec.Deleted && rec.Version < due }) {
		return
	}
	var signed []record.Record
	for _, rec := range own {
		if rec.Deleted || rec.Version >= along {
			continue
		}
		if s, ok := r.signOwn(rec, true); ok {
			signed = append(signed, s)
		}
	}
	r.send(signed, false)
}

// refreshAge is how old one of this site's records grows before it is
// signed again: half the tombstone lifetime (5 minutes by default), and a
// third of it for a lifetime too short to leave the other half to a
// receiver's clock ahead of this one's (MaxClockSkew) and a minute's
// delivery.
//
// Half leaves enough: a refresh goes straight to every member, one the
// copy missed is sent it again within a minute or so (resend.go), and a
// record a site holds is never dropped for its age; only a copy it passes
// on (a join's state, the answer to a digest) is checked again, and that
// copy is at most half the lifetime old, plus the skew.
func (c Config) refreshAge() time.Duration {
	return max(c.TombstoneTTL/3, min(c.TombstoneTTL/2, c.TombstoneTTL-record.MaxClockSkew-time.Minute))
}

// rejected counts a record refused before it was stored, and says so once
// per site and reason.
func (r *Runtime) rejected(rec *record.Record, reason string) {
	r.metrics.recordsRejected.WithLabelValues(reason).Inc()
	if !r.firstTime("swim_record_rejected", reason, rec.Site) {
		return
	}
	r.log.Warn("swim_record_rejected", "site", rec.Site, "network", rec.Network, "kind", string(rec.Kind), "reason", reason)
}

// networksTaken are the networks this site has an identity in: the only
// ones whose records it takes.
func (r *Runtime) networksTaken() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]string, 0, len(r.trust))
	for n := range r.trust {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// pull sends this site's digest to every alive member, each of which
// answers with the records of this site's networks it holds newer.
func (r *Runtime) pull() {
	r.mu.Lock()
	ml := r.ml
	name := ""
	if ml != nil {
		name = record.MemberName(r.cfg.Site, r.generation)
	}
	r.mu.Unlock()
	to := r.aliveNodes("")
	if ml == nil || len(to) == 0 {
		return
	}
	msg, err := record.EncodeDigest(name, r.store.Digest(), r.networksTaken(), r.cfg.Now())
	if err != nil {
		return
	}
	r.sendReliable(ml, to, msg)
}

// recheck drops the records of other sites whose signing certificate is
// no longer valid now (it expired, or the grid CA changed): a site is
// known only while it has a certificate that verifies, so one whose
// renewal the issuer refused leaves every other site's view when its
// certificate expires.
func (r *Runtime) recheck(now time.Time) {
	r.mu.Lock()
	trust := make(map[string]*record.NetworkTrust, len(r.trust))
	for n, t := range r.trust {
		trust[n] = t
	}
	r.mu.Unlock()
	changed := map[string]bool{}
	for _, rec := range r.store.All() {
		t := trust[rec.Network]
		if rec.Site == r.cfg.Site || t == nil || t.Open || t.Roots == nil || len(rec.Chain) == 0 {
			continue
		}
		if _, why := t.Chains.Verify(t, rec.Chain, now); why != "" {
			r.store.Remove(rec.Key())
			r.rejected(&rec, record.RejectNoLongerValid)
			changed[rec.Network] = true
		}
	}
	for n := range changed {
		r.notify.send(n)
	}
}

// followBundle applies a network's new trust bundle: the records held of
// the sites it evicts are dropped (what arrives of them later is refused
// by record.Check), and this site's record passes the bundle on.
func (r *Runtime) followBundle(network string) {
	t := r.trustOf(network)
	if t == nil || t.Open || t.Roots == nil {
		return
	}
	// Bundles held before the network was loaded were not taken then.
	r.offerHeldBundles(network)
	now := r.cfg.Now()
	dropped := false
	for _, rec := range r.store.All() {
		if rec.Network != network || rec.Site == r.cfg.Site || !r.evicted(t, &rec, now) {
			continue
		}
		r.store.Remove(rec.Key())
		r.rejected(&rec, record.RejectEvicted)
		dropped = true
	}
	if dropped {
		r.notify.send(network)
	}
	r.mu.Lock()
	l, ok := r.locals[network]
	r.mu.Unlock()
	if ok {
		r.announce(network, l)
	}
}

// evicted reports whether a held record's site is evicted, or its signing
// certificate dates from before an eviction since lifted.
func (r *Runtime) evicted(t *record.NetworkTrust, rec *record.Record, now time.Time) bool {
	b := r.cfg.Trust.Bundle(rec.Network)
	if b == nil {
		return false
	}
	if b.Evicted(rec.Site) {
		return true
	}
	if len(rec.Chain) == 0 {
		return false
	}
	leaf, why := t.Chains.Verify(t, rec.Chain, now)
	return why == "" && b.Refuses(rec.Site, leaf.NotBefore)
}
