// This site's records: written locally, sent straight to every member
// over TCP and gossiped when they fit a packet.

package gossip

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sort"
	"sync"

	"github.com/hashicorp/memberlist"

	"github.com/gridsync/gridsync/gossip/record"
	"github.com/gridsync/gridsync/gossip/sites"
)

// maxGossipRecordBytes is the largest record message sent by epidemic
// broadcast: it must fit one UDP packet with memberlist's and the
// encryption's overhead. Larger ones (a certificate, many providers) go
// to every member over TCP.
const maxGossipRecordBytes = 1024

// SetGatewayAddress sets the data-plane gateway address this site
// advertises in every network.
func (r *Runtime) SetGatewayAddress(addr string) {
	r.mu.Lock()
	if r.gatewayAddr == addr {
		r.mu.Unlock()
		return
	}
	r.gatewayAddr = addr
	networks := make([]string, 0, len(r.locals))
	for n := range r.locals {
		networks = append(networks, n)
	}
	r.mu.Unlock()
	sort.Strings(networks)
	for _, n := range networks {
		r.mu.Lock()
		l := r.locals[n]
		r.mu.Unlock()
		r.announce(n, l)
	}
	r.log.Info("swim_gateway_address", "address", addr)
}

// Publish announces this site's state in a network: its public
// certificate (tls.crt of the site Secret, never a key) and its
// providers. Only what changed is sent.
// PublishSignals gossips this site's provider signals in a network
// (signalTransport gossip). Ages are as of now.
func (r *Runtime) PublishSignals(network string, signals []sites.Signal) error {
	if len(signals) > record.MaxSignals {
		return fmt.Errorf("%d signals: at most %d ride membership", len(signals), record.MaxSignals)
	}
	sg := slices.Clone(signals)
	r.putOwn(record.Record{Network: network, Site: r.cfg.Site, Kind: record.KindSignals, Signals: sg})
	return nil
}

func (r *Runtime) Publish(network, certPEM string, providers []sites.Provider) error {
	if record.ClassifyPEM(certPEM) == record.CertPrivateKey {
		return errors.New("the site certificate holds a private key: it is never gossiped")
	}
	ps := make([]sites.Provider, len(providers))
	copy(ps, providers)
	for i := range ps {
		ps[i].Models = slices.Clone(ps[i].Models)
		slices.Sort(ps[i].Models)
	}
	sort.Slice(ps, func(i, j int) bool { return ps[i].Name < ps[j].Name })
	l := localState{certPEM: certPEM, providers: ps}
	r.mu.Lock()
	r.locals[network] = l
	r.mu.Unlock()
	r.announce(network, l)
	return nil
}

func (r *Runtime) announce(network string, l localState) {
	r.mu.Lock()
	gw := r.gatewayAddr
	set := r.settings[network]
	r.mu.Unlock()
	site := record.Record{Network: network, Site: r.cfg.Site, Kind: record.KindSite, GatewayAddress: gw, CertPEM: l.certPEM, Region: set.Region, Zone: set.Zone}
	if r.cfg.Trust != nil {
		site.TrustBundle = r.cfg.Trust.Signed(network)
	}
	provs := record.Record{Network: network, Site: r.cfg.Site, Kind: record.KindProviders, Providers: l.providers}
	for _, rec := range []record.Record{site, provs} {
		r.putOwn(rec)
	}
}

// Forget withdraws this site from a network: its records become
// tombstones, and the network's key and seeds are dropped.
func (r *Runtime) Forget(network string) {
	// Last, once the tombstones are signed and sent: the network's
	// records are no longer taken.
	defer func() {
		r.mu.Lock()
		delete(r.trust, network)
		r.mu.Unlock()
	}()
	r.mu.Lock()
	_, had := r.locals[network]
	delete(r.locals, network)
	delete(r.seeds, network)
	delete(r.netKeys, network)
	delete(r.netKeyFail, network)
	delete(r.netNoKey, network)
	delete(r.departed, network)
	delete(r.settings, network) // its pin and timings go with it
	r.mu.Unlock()
	r.updateKeyPending()
	r.poke()
	if !had {
		return
	}
	for _, k := range record.Kinds {
		r.putOwn(record.Record{Network: network, Site: r.cfg.Site, Kind: k, Deleted: true})
	}
}

// send disseminates records of this site: straight to every member, all
// in one message, and, with gossip, each by epidemic gossip when it fits
// a packet.
func (r *Runtime) send(recs []record.Record, gossip bool) {
	if len(recs) == 0 {
		return
	}
	direct, err := record.EncodeDirectRecords(recs)
	if err != nil {
		r.log.Error("swim_encode_failed", "error", err)
		return
	}
	r.mu.Lock()
	q, ml := r.queue, r.ml
	r.mu.Unlock()
	if ml == nil {
		return // sent with the full state when the node joins
	}
	// Straight to every member: gossip shares packets with membership's
	// own messages, which come first, so a change could wait behind a
	// busy grid's; a direct copy does not. Receivers do not pass a
	// direct copy on.
	go func() { r.owe(r.sendReliable(ml, r.aliveNodes(""), direct)) }()
	// And by epidemic gossip when it fits a packet, for a member the
	// direct copy missed.
	if !gossip {
		return
	}
	for _, rec := range recs {
		if msg, err := record.EncodeRecords([]record.Record{rec}); err == nil && len(msg) <= maxGossipRecordBytes {
			q.QueueBroadcast(&recordBroadcast{key: rec.Key(), msg: msg})
			r.metrics.sends.WithLabelValues("gossip").Inc()
		}
	}
}

// aliveNodes are the current members of the alive remote sites (or only
// the one named), built from what the member events said: the nodes
// memberlist's Members returns are its own, written while it runs. A site
// evicted from every network of this site gets nothing sent to it.
func (r *Runtime) aliveNodes(only string) []*memberlist.Node {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []*memberlist.Node
	for s, m := range r.members {
		// Nothing is sent to a site evicted from every network here.
		if m.state != sites.SiteAlive || only != "" && m.name != only || r.evictedEverywhereLocked(s) {
			continue
		}
		ap, err := netip.ParseAddrPort(m.addr)
		if err != nil {
			continue
		}
		out = append(out, &memberlist.Node{Name: m.name, Addr: ap.Addr().AsSlice(), Port: ap.Port()})
	}
	return out
}

// sendReliable sends msg over TCP to every given member but this one, a
// few at a time, and returns the members it did not reach.
func (r *Runtime) sendReliable(ml *memberlist.Memberlist, to []*memberlist.Node, msg []byte) []string {
	sem := make(chan struct{}, 16)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var failed []string
	for _, n := range to {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if err := ml.SendReliable(n, msg); err != nil {
				r.log.Debug("swim_send_failed", "to", n.Name, "error", err)
				mu.Lock()
				failed = append(failed, n.Name)
				mu.Unlock()
				return
			}
			r.metrics.sends.WithLabelValues("reliable").Inc()
		}()
	}
	wg.Wait()
	return failed
}

// sendOwnTo sends every record of this site to one member; one it does
// not reach is owed them (resend.go).
func (r *Runtime) sendOwnTo(member string) {
	r.owe(r.sendAllOwnTo(member))
}

// sendAllOwnTo sends every record of this site to one member, and returns
// it when the send failed.
func (r *Runtime) sendAllOwnTo(member string) []string {
	own := r.store.OfSite(r.cfg.Site)
	r.mu.Lock()
	ml := r.ml
	r.mu.Unlock()
	to := r.aliveNodes(member)
	if len(own) == 0 || ml == nil || len(to) == 0 {
		return nil
	}
	msg, err := record.EncodeDirectRecords(own)
	if err != nil {
		return nil
	}
	return r.sendReliable(ml, to, msg)
}

// recordBroadcast is a record in memberlist's broadcast queue; a newer
// version of the same record replaces it there.
type recordBroadcast struct {
	key record.Key
	msg []byte
}

func (b *recordBroadcast) Invalidates(o memberlist.Broadcast) bool {
	ob, ok := o.(*recordBroadcast)
	return ok && ob.key == b.key
}

func (b *recordBroadcast) Message() []byte { return b.msg }

func (b *recordBroadcast) Finished() {}
