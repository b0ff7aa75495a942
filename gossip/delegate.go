package gossip

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/gridsync/gridsync/gossip/record"
	"github.com/gridsync/gridsync/gossip/sites"
)

// delegate is the runtime's side of memberlist: node metadata, the state
// layer's messages, member events, and the grid ID check on every merge
// and alive message.
type delegate struct {
	r *Runtime
}

func (d *delegate) NodeMeta(limit int) []byte {
	r := d.r
	r.mu.Lock()
	m := record.NodeMeta{V: record.MetaVersion, Site: r.cfg.Site, Generation: r.generation, Grid: r.grid}
	r.mu.Unlock()
	b := m.Encode()
	if len(b) > limit {
		return nil // cannot happen: a site is a DNS label and the ID a UUID
	}
	return b
}

func (d *delegate) NotifyMsg(buf []byte) {
	m, err := record.Decode(buf)
	if err != nil {
		d.r.metrics.dropped.WithLabelValues(record.DropReason(err)).Inc()
		d.r.log.Warn("swim_message_dropped", "reason", record.DropReason(err), "error", err.Error())
		return
	}
	switch m.Type {
	case record.MsgRecords:
		d.r.receive(m.Records, true)
	case record.MsgDirect:
		d.r.receive(m.Records, false)
	case record.MsgNotice:
		d.r.applyNotice(m.Notice)
	case record.MsgDigest:
		d.r.answerDigest(m.Digest) // a pull: a site that just took up a network
	default:
		d.r.metrics.dropped.WithLabelValues(record.DropUnknownType).Inc()
	}
}

func (d *delegate) GetBroadcasts(overhead, limit int) [][]byte {
	d.r.mu.Lock()
	q := d.r.queue
	d.r.mu.Unlock()
	if q == nil {
		return nil
	}
	return q.GetBroadcasts(overhead, limit)
}

// LocalState is every record on a join (the newcomer needs them all), and
// only their versions on the periodic push/pull: the peer sends back what
// it holds newer, so an idle grid exchanges a few bytes per record.
func (d *delegate) LocalState(join bool) []byte {
	r := d.r
	var b []byte
	var err error
	if join {
		b, err = record.EncodeState(r.store.All(), r.cfg.Now())
	} else {
		r.mu.Lock()
		name := ""
		if r.ml != nil {
			name = record.MemberName(r.cfg.Site, r.generation)
		}
		r.mu.Unlock()
		b, err = record.EncodeDigest(name, r.store.Digest(), r.networksTaken(), r.cfg.Now())
	}
	if err != nil {
		r.log.Error("swim_encode_failed", "error", err)
		return nil
	}
	return b
}

func (d *delegate) MergeRemoteState(buf []byte, join bool) {
	r := d.r
	if len(buf) == 0 {
		return
	}
	m, err := record.Decode(buf)
	if err != nil {
		r.metrics.dropped.WithLabelValues(record.DropReason(err)).Inc()
		r.log.Warn("swim_state_dropped", "reason", record.DropReason(err), "error", err.Error())
		return
	}
	switch m.Type {
	case record.MsgRecords:
		r.receive(m.Records, false)
	case record.MsgDigest:
		r.answerDigest(m.Digest)
	}
}

// answerDigest sends a peer the records of its networks that it lacks or
// holds older versions of, as its digest says.
func (r *Runtime) answerDigest(d record.DigestBody) {
	missing := r.store.MissingFrom(d.Entries, d.Networks)
	if len(missing) == 0 {
		return
	}
	r.mu.Lock()
	ml := r.ml
	r.mu.Unlock()
	to := r.aliveNodes(d.From)
	if ml == nil || len(to) == 0 {
		return
	}
	msg, err := record.EncodeDirectRecords(missing)
	if err != nil {
		return
	}
	go r.sendReliable(ml, to, msg)
}

// NotifyMerge decides a join by the grid ID negotiation (see record.Negotiate);
// a refused merge is the join's error. With no ID on either side, the
// lexicographically smallest site known generates one and the others
// adopt it.
func (d *delegate) NotifyMerge(peers []*memberlist.Node) error {
	r := d.r
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.cfg.Now()
	held := r.grid
	var names []string
	evicted := 0
	for _, p := range peers {
		meta, err := record.DecodeMeta(p.Meta)
		if err != nil {
			return fmt.Errorf("refused %s: %w", record.TruncateForLog(p.Name), err)
		}
		if meta.Site == r.cfg.Site {
			continue // this site: an earlier generation, or this node
		}
		if r.evictedEverywhereLocked(meta.Site) {
			// Left out, not refused with the rest: an evicted site still
			// listed by a seed must not stop this site joining it.
			r.memberRefusedLocked(meta.Site)
			evicted++
			continue
		}
		names = append(names, meta.Site)
		next, err := record.Negotiate(held, meta.Grid, now, r.cfg.GridIDSettle)
		if err != nil {
			r.metrics.gridIDConflicts.Inc()
			r.log.Error("swim_grid_id_conflict", "peer", meta.Site, "error", err.Error())
			return err
		}
		held = next
	}
	if evicted > 0 && len(names) == 0 {
		// Only evicted sites (the joiner is one): refused.
		return errors.New("refused: a site evicted from every network of this site")
	}
	if held != r.grid {
		r.adoptLocked(held, "adopted")
		return nil
	}
	if r.grid.ID == "" && len(names) > 0 {
		// The names this one already knows count too: a site that
		// joined a smaller one waits for that one's ID.
		for s := range r.members {
			names = append(names, s)
		}
		for _, s := range names {
			if s < r.cfg.Site {
				return nil // the smaller site generates it; this one adopts it
			}
		}
		r.adoptLocked(record.GridID{ID: record.NewGridID(), By: r.cfg.Site, At: now.Unix()}, "generated")
	}
	return nil
}

// NotifyAlive keeps members of another grid out, and a site evicted from
// every network of this site, also when they arrive by gossip rather than
// a merge.
func (d *delegate) NotifyAlive(peer *memberlist.Node) error {
	r := d.r
	meta, err := record.DecodeMeta(peer.Meta)
	if err != nil {
		return fmt.Errorf("refused %s: %w", record.TruncateForLog(peer.Name), err)
	}
	if meta.Site == r.cfg.Site {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.evictedEverywhereLocked(meta.Site) {
		r.memberRefusedLocked(meta.Site)
		return fmt.Errorf("refused %s: evicted from every network of this site", meta.Site)
	}
	next, err := record.Negotiate(r.grid, meta.Grid, r.cfg.Now(), r.cfg.GridIDSettle)
	if err != nil {
		return err
	}
	if next != r.grid {
		r.adoptLocked(next, "adopted")
	}
	return nil
}

// adoptLocked sets the grid ID and tells the grid (r.mu held).
func (r *Runtime) adoptLocked(g record.GridID, how string) {
	r.grid = g
	r.log.Info("swim_grid_id", "grid_id", g.ID, "generated_by", g.By, "how", how)
	// Every network's status names the grid.
	for n := range r.locals {
		r.notify.send(n)
	}
	// This site's records name the grid they are signed for.
	go r.resign("")
	// The records other sites sent while this site held another grid ID
	// were refused, and nothing sends them again before the next
	// push/pull (a minute or more): they are pulled at once. Two IDs
	// generated together are the rule when sites start together across a
	// WAN, whose delays leave the first joins time to cross.
	go r.pull()
	ml := r.ml
	if ml == nil {
		return
	}
	// UpdateNode takes memberlist's locks: never from inside a delegate
	// call. Two adoptions close together (grids started together) must
	// not update the node at once: memberlist's UpdateNode reads the
	// local node's state unlocked.
	go func() {
		r.metaUpdates.Lock()
		defer r.metaUpdates.Unlock()
		if err := ml.UpdateNode(5 * time.Second); err != nil {
			r.log.Debug("swim_meta_update_failed", "error", err)
		}
	}()
}

func (d *delegate) NotifyJoin(n *memberlist.Node)   { d.observe(n, false) }
func (d *delegate) NotifyUpdate(n *memberlist.Node) { d.observe(n, false) }
func (d *delegate) NotifyLeave(n *memberlist.Node)  { d.observe(n, true) }

// observe tracks the current generation of every remote site: a greater
// generation supersedes the site's previous member at once, from any
// address; an older one is never counted again.
func (d *delegate) observe(n *memberlist.Node, gone bool) {
	r := d.r
	meta, err := record.DecodeMeta(n.Meta)
	if err != nil || meta.Site == r.cfg.Site {
		return
	}
	now := r.cfg.Now()
	r.mu.Lock()
	if !gone {
		if next, err := record.Negotiate(r.grid, meta.Grid, now, r.cfg.GridIDSettle); err == nil && next != r.grid {
			r.adoptLocked(next, "adopted")
		}
	}
	m := r.members[meta.Site]
	changed, back := false, false
	switch {
	case gone:
		if m != nil && m.name == n.Name {
			state := sites.SiteDead
			if m.leaving {
				state = sites.SiteLeft
			}
			if m.state != state {
				m.state, m.since, changed = state, now, true
			}
		}
	case m == nil || meta.Generation > m.generation:
		if m != nil {
			r.log.Info("swim_site_superseded", "site", meta.Site, "generation", meta.Generation, "previous_generation", m.generation)
		}
		r.members[meta.Site] = &member{name: n.Name, generation: meta.Generation, addr: hostPort(n), state: sites.SiteAlive, since: now}
		changed = true
	case meta.Generation == m.generation:
		// Back after it was declared dead, or new metadata.
		m.addr, m.leaving = hostPort(n), false
		if m.state != sites.SiteAlive {
			m.state, m.since, changed = sites.SiteAlive, now, true
			back = true
		}
	}
	fresh := changed && !gone && (m == nil || meta.Generation > m.generation)
	r.mu.Unlock()
	if fresh || back {
		// A new site (or generation) gets this site's records at once,
		// rather than at the next push/pull with it; so does one back
		// from the dead (a healed partition, an ended outage): what this
		// site changed meanwhile never reached it.
		go r.sendOwnTo(n.Name)
	}
	if changed {
		r.log.Info("swim_site_observed", "site", meta.Site, "generation", meta.Generation, "gone", gone, "address", hostPort(n))
		r.notifySites([]string{meta.Site})
	}
}

// notifier calls a subscriber with changed network names, coalescing what
// arrives while it runs, so that memberlist's goroutines never wait for
// the controller.
type notifier struct {
	mu      sync.Mutex
	fn      func(string)
	pending map[string]bool
	signal  chan struct{}
}

func newNotifier() *notifier {
	return &notifier{pending: map[string]bool{}, signal: make(chan struct{}, 1)}
}

func (n *notifier) subscribe(fn func(string)) {
	n.mu.Lock()
	n.fn = fn
	n.mu.Unlock()
}

func (n *notifier) send(network string) {
	n.mu.Lock()
	n.pending[network] = true
	n.mu.Unlock()
	select {
	case n.signal <- struct{}{}:
	default:
	}
}

// run delivers changes until ctx ends; changes after that wait for the
// next run.
func (n *notifier) run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-n.signal:
		}
		n.mu.Lock()
		fn, pending := n.fn, n.pending
		n.pending = map[string]bool{}
		n.mu.Unlock()
		if fn == nil {
			continue
		}
		for network := range pending {
			fn(network)
		}
	}
}

// evictedEverywhereLocked reports whether site is evicted from every
// network with a grid CA this site takes part in (r.mu held): such a site
// is no member here, whatever certificate or SWIM key it still holds. A
// site evicted from one network of several stays a member, for the
// others.
func (r *Runtime) evictedEverywhereLocked(site string) bool {
	if r.cfg.Trust == nil {
		return false
	}
	signed := 0
	for n, t := range r.trust {
		if t.Open {
			continue
		}
		signed++
		if !r.cfg.Trust.Bundle(n).Evicted(site) {
			return false
		}
	}
	return signed > 0
}

// memberRefusedLocked counts a refused member and says so once (r.mu
// held).
func (r *Runtime) memberRefusedLocked(site string) {
	r.metrics.membersRefused.Inc()
	key := "swim_member_refused/evicted/" + site
	if r.said[key] || len(r.said) >= maxSaidLines {
		return
	}
	r.said[key] = true
	r.log.Warn("swim_member_refused", "site", site, "reason", "evicted")
}
