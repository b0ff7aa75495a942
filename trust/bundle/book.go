package bundle

import (
	"crypto/x509"
	"slices"
	"sort"
	"sync"
	"time"
)

// Book holds the newest verified trust bundle of each network this site
// takes part in, and tells its readers when one changes. Every path a
// bundle arrives by offers it here (gossip, the status kept across
// restarts, the issuer's own signing); the listener, the membership
// runtime and the controller read and follow it. A bundle is checked
// against the network's grid CA before it is kept, so a site passes on
// what it holds without vouching for it.
type Book struct {
	mu       sync.Mutex
	networks map[string]*entry
	subs     map[int]func(network string)
	nextSub  int
}

type entry struct {
	roots  []*x509.Certificate
	bundle *Bundle
	signed []byte
}

func NewBook() *Book { return &Book{networks: map[string]*entry{}, subs: map[int]func(string){}} }

// SetRoots says which grid CA certificates a network's bundles are checked
// against (none: the network has no grid CA, and no bundle of it is
// kept). A bundle held stays until a newer one replaces it: an eviction
// does not lapse because the CA's Secret was unreadable for a while.
func (k *Book) SetRoots(network string, roots []*x509.Certificate) {
	k.mu.Lock()
	defer k.mu.Unlock()
	e := k.networks[network]
	if e == nil {
		e = &entry{}
		k.networks[network] = e
	}
	e.roots = slices.Clone(roots)
}

// Forget drops a network this site no longer takes part in.
func (k *Book) Forget(network string) {
	k.mu.Lock()
	_, had := k.networks[network]
	delete(k.networks, network)
	k.mu.Unlock()
	if had {
		k.notify(network)
	}
}

// Offer checks a signed bundle of network and keeps it when it is newer
// than the one held. It returns whether it was kept, and why it was
// refused (nil for a bundle that verifies but is not newer).
func (k *Book) Offer(network string, signed []byte) (bool, error) {
	if len(signed) == 0 {
		return false, nil
	}
	k.mu.Lock()
	e := k.networks[network]
	if e == nil || len(e.roots) == 0 {
		k.mu.Unlock()
		return false, nil
	}
	roots := e.roots
	// Every site passes on the bundle it holds: the copy already held
	// costs a comparison, not a signature check.
	same := string(e.signed) == string(signed)
	k.mu.Unlock()
	if same {
		return false, nil
	}
	b, err := Open(signed, network, roots)
	if err != nil {
		return false, err
	}
	k.mu.Lock()
	e = k.networks[network]
	if e == nil || e.bundle != nil && b.Version <= e.bundle.Version {
		k.mu.Unlock()
		return false, nil
	}
	e.bundle, e.signed = b, slices.Clone(signed)
	k.mu.Unlock()
	k.notify(network)
	return true, nil
}

// Bundle is the newest bundle held of a network (nil: none, or no book).
func (k *Book) Bundle(network string) *Bundle {
	if k == nil {
		return nil
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if e := k.networks[network]; e != nil {
		return e.bundle
	}
	return nil
}

// Signed is the newest bundle of a network as signed (nil: none), to
// pass on.
func (k *Book) Signed(network string) []byte {
	if k == nil {
		return nil
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if e := k.networks[network]; e != nil {
		return e.signed
	}
	return nil
}

// Refuses reports whether a certificate of site starting at notBefore is
// refused in network.
func (k *Book) Refuses(network, site string, notBefore time.Time) bool {
	return k.Bundle(network).Refuses(site, notBefore)
}

// RefusesAnywhere reports whether a certificate of site is refused in any
// network this site holds a bundle of: a connection to this site's
// listener is not made in one network, and a site evicted from one is not
// served in another by the same agent.
func (k *Book) RefusesAnywhere(site string, notBefore time.Time) bool {
	if k == nil {
		return false
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, e := range k.networks {
		if e.bundle.Refuses(site, notBefore) {
			return true
		}
	}
	return false
}

// Networks are the networks with a bundle held, sorted.
func (k *Book) Networks() []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	var out []string
	for n, e := range k.networks {
		if e.bundle != nil {
			out = append(out, n)
		}
	}
	sort.Strings(out)
	return out
}

// Subscribe calls fn with a network's name whenever its bundle changes,
// until the returned cancel is called. fn runs on the goroutine that
// offered the bundle: it must not block.
func (k *Book) Subscribe(fn func(network string)) (cancel func()) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.nextSub++
	id := k.nextSub
	k.subs[id] = fn
	return func() {
		k.mu.Lock()
		defer k.mu.Unlock()
		delete(k.subs, id)
	}
}

func (k *Book) notify(network string) {
	k.mu.Lock()
	subs := make([]func(string), 0, len(k.subs))
	for _, fn := range k.subs {
		subs = append(subs, fn)
	}
	k.mu.Unlock()
	for _, fn := range subs {
		fn(network)
	}
}
