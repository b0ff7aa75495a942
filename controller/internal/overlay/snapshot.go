package overlay

import (
	"slices"
	"sync"
	"sync/atomic"

	"github.com/gridsync/gridsync/controller/render"
)

// Snapshot holds, per network, the providers its last reconcile assessed:
// what the provider discovery API answers from, so that a request costs
// no API read and runs no stage.
//
// It is as fresh as the network's last reconcile, which every input of
// the two stages it copies sets off (a provider's spec or health, a
// GridSite's phase, the gossip view, a remote provider's readiness): the
// API lists what the overlays route. A credential Secret is not watched,
// so a rotation that changes a provider's phase reaches the API at the
// next resync, as it reaches the overlays.
type Snapshot struct {
	mu       sync.Mutex // serialises writers; readers load the map
	networks atomic.Pointer[map[string]*Providers]
}

// Providers are one network's providers as its last reconcile assessed
// them (before admission, which the API does not apply). Nil slices when
// the reconcile failed before it assessed them, or when there are none.
type Providers struct {
	Local  []render.Provider
	Remote []render.Remote
}

// Load returns the networks' providers by network name. The map and what
// it holds are never changed once published: a reader may keep them.
func (s *Snapshot) Load() map[string]*Providers {
	if m := s.networks.Load(); m != nil {
		return *m
	}
	return nil
}

// update copies the map, applies change to the copy and publishes it.
func (s *Snapshot) update(change func(map[string]*Providers)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	old := s.Load()
	next := make(map[string]*Providers, len(old)+1)
	for k, v := range old {
		next[k] = v
	}
	change(next)
	s.networks.Store(&next)
}

// publish records a network's providers. They are copied: the admission
// stage goes on to change the reconcile's own.
func (s *Snapshot) publish(network string, local []render.Provider, remote []render.Remote) {
	p := &Providers{Local: slices.Clone(local), Remote: slices.Clone(remote)}
	for i := range p.Local {
		p.Local[i].Models = slices.Clone(p.Local[i].Models)
	}
	for i := range p.Remote {
		p.Remote[i].Models = slices.Clone(p.Remote[i].Models)
		p.Remote[i].Load = slices.Clone(p.Remote[i].Load)
	}
	s.update(func(m map[string]*Providers) { m[network] = p })
}

// attempted records that a network's reconcile ran without publishing
// (it failed first): the network is known, with no providers, unless an
// earlier reconcile published some, which are kept.
func (s *Snapshot) attempted(network string) {
	if _, ok := s.Load()[network]; ok {
		return
	}
	s.update(func(m map[string]*Providers) {
		if _, ok := m[network]; !ok {
			m[network] = &Providers{}
		}
	})
}

// forget drops a deleted network.
func (s *Snapshot) forget(network string) {
	if _, ok := s.Load()[network]; !ok {
		return
	}
	s.update(func(m map[string]*Providers) { delete(m, network) })
}
