package membership

import (
	"reflect"
	"slices"
	"sync"

	"github.com/gridsync/gridsync/gossip/sites"
)

// Locals are this site's providers of each network as the overlay
// reconciler last assessed them: what membership announces to the other
// sites. The overlay reconciler sets them at each reconcile; a change is
// told to Changed (the membership reconciler's queue), so that membership
// announces it without running the overlay's stages itself.
type Locals struct {
	// Changed, when set, is told a network whose providers changed.
	Changed func(network string)

	mu  sync.Mutex
	set map[string][]sites.Provider
}

// Set records a network's providers and tells Changed when they differ
// from the last set (or none was).
func (l *Locals) Set(network string, providers []sites.Provider) {
	l.mu.Lock()
	prev, had := l.set[network]
	changed := !had || !reflect.DeepEqual(prev, providers)
	if changed {
		if l.set == nil {
			l.set = map[string][]sites.Provider{}
		}
		l.set[network] = slices.Clone(providers)
	}
	l.mu.Unlock()
	if changed && l.Changed != nil {
		l.Changed(network)
	}
}

// Get is a network's providers; known is false until the overlay
// reconciler assessed them once (announcing none before then would
// withdraw them from the other sites' overlays at every restart).
func (l *Locals) Get(network string) (providers []sites.Provider, known bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	p, ok := l.set[network]
	return slices.Clone(p), ok
}

// Forget drops a network's providers (the network is gone).
func (l *Locals) Forget(network string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.set, network)
}
