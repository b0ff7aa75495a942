package bundle

import (
	"crypto/x509"
	"slices"
	"sync"
	"time"
)

// Book holds the newest verified trust bundle of each network this site
// takes part in, and tells its readers when one changes. Every path a
// bundle arrives by offers it here (gossip, the status kept across
// restarts, the issuer's own signing); the listener, the membership
// runtime and the controller read and follow it. A bundle is checked
// against the grid CAs the network trusts before it is kept, so a site
// passes on what it holds without vouching for it.
//
// The CAs a network trusts start as those the site is configured with
// (its anchors). A bundle that names other CAs (the issuer rotated its
// CA) is kept only when a CA trusted before signed it, and from then on
// its CAs alone are trusted: a retired CA signs nothing the network
// takes, whatever the site's configuration still says. A network's
// bundles are taken only once the controller has loaded it (Load): what
// the site kept across a restart comes first, so that gossip cannot
// offer a bundle signed by a CA the site has since retired.
type Book struct {
	mu       sync.Mutex
	networks map[string]*entry
	subs     map[int]func(network string)
	nextSub  int
}

type entry struct {
	// anchors are the grid CA certificates the site is configured with.
	anchors []*x509.Certificate
	// loaded: the controller loaded the network (its anchors and what
	// the site kept); bundles from elsewhere are taken from then on.
	loaded bool
	bundle *Bundle
	signed []byte
	// roots are the CAs the newest bundle names (nil: the anchors).
	roots []*x509.Certificate
	// chain are the bundles, oldest first, that changed the roots since
	// the anchors: kept so that a restarted site, configured with the old
	// CA, follows the same steps to the CAs trusted now.
	chain [][]byte
}

// MaxChain bounds the bundles kept that changed a network's roots: a site
// whose configured CA is more rotations old than this trusts its
// configured CA alone after a restart (its condition says to update it).
const MaxChain = 8

// trusted are the CAs the network trusts now: those the newest bundle
// names once the issuer rotated its CA, else the configured ones.
func (e *entry) trusted() []*x509.Certificate {
	if len(e.roots) > 0 {
		return e.roots
	}
	return e.anchors
}

func NewBook() *Book { return &Book{networks: map[string]*entry{}, subs: map[int]func(string){}} }

// Load gives a network's configured grid CAs (none: the network has no
// grid CA, and no bundle of it is kept), then offers what the site kept
// across a restart: the bundles that changed its roots, oldest first,
// and the newest. From then on bundles from any path are taken. Anchors
// that differ from those loaded before (the operator configured another
// CA) start the network over: the operator's configuration wins over a
// rotation it did not make. A bundle held otherwise stays until a newer
// one replaces it: an eviction does not lapse because the CA's Secret was
// unreadable for a while.
func (k *Book) Load(network string, anchors []*x509.Certificate, chain [][]byte, newest []byte) error {
	k.mu.Lock()
	e := k.networks[network]
	if e != nil && e.loaded && sameCerts(e.anchors, anchors) {
		k.mu.Unlock()
		return nil // loaded: what the site kept is held already
	}
	switch {
	case e != nil && e.loaded && subset(anchors, e.trusted()):
		// Configured now with CAs the network trusts (its operator
		// updated the configuration after a rotation): nothing is lost,
		// and the steps from the old CA are no longer needed.
		e.anchors, e.chain = slices.Clone(anchors), nil
		k.mu.Unlock()
		k.notify(network)
		return nil
	case e == nil || e.loaded:
		e = &entry{}
		k.networks[network] = e
	}
	e.anchors = slices.Clone(anchors)
	k.mu.Unlock()
	var firstErr error
	for _, s := range append(slices.Clip(chain), newest) {
		if _, err := k.offer(network, s, true); err != nil && firstErr == nil {
			firstErr = err
		}
	}
	k.mu.Lock()
	e.loaded = true
	k.mu.Unlock()
	// Loaded: what arrived before by other paths is taken from now on.
	k.notify(network)
	return firstErr
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
// refused (nil for a bundle that verifies but is not newer, or of a
// network not loaded yet).
func (k *Book) Offer(network string, signed []byte) (bool, error) {
	kept, err := k.offer(network, signed, false)
	if kept {
		k.notify(network)
	}
	return kept, err
}

func (k *Book) offer(network string, signed []byte, loading bool) (bool, error) {
	if len(signed) == 0 {
		return false, nil
	}
	k.mu.Lock()
	e := k.networks[network]
	if e == nil || len(e.anchors) == 0 || !e.loaded && !loading {
		k.mu.Unlock()
		return false, nil
	}
	roots := e.trusted()
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
	defer k.mu.Unlock()
	if k.networks[network] != e || e.bundle != nil && b.Version <= e.bundle.Version {
		return false, nil
	}
	if len(b.Roots) > 0 {
		// Checked by Open: the roots parse. A bundle that names none
		// changes nothing of them: only one that names others moves the
		// network's trust, so a retired CA never comes back by omission.
		next, _ := b.RootCerts()
		if !sameCerts(next, e.trusted()) {
			e.chain = append(e.chain, slices.Clone(signed))
			if len(e.chain) > MaxChain {
				e.chain = e.chain[len(e.chain)-MaxChain:]
			}
		}
		e.roots = next
	}
	e.bundle, e.signed = b, slices.Clone(signed)
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

// Roots are the grid CAs a network trusts now: those its newest bundle
// names once its issuer rotated the CA, else configured (nil: the
// network is not loaded, or has no bundle naming any).
func (k *Book) Roots(network string, configured []*x509.Certificate) []*x509.Certificate {
	if k == nil {
		return configured
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if e := k.networks[network]; e != nil && len(e.roots) > 0 && sameCerts(e.anchors, configured) {
		return slices.Clone(e.roots)
	}
	return configured
}

// Chain are the signed bundles that changed a network's roots since its
// configured CAs, oldest first: what a restarted site offers again before
// the newest bundle.
func (k *Book) Chain(network string) [][]byte {
	if k == nil {
		return nil
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if e := k.networks[network]; e != nil {
		return slices.Clone(e.chain)
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

func sameCerts(a, b []*x509.Certificate) bool {
	return slices.EqualFunc(a, b, func(x, y *x509.Certificate) bool { return x.Equal(y) })
}

// subset reports whether every certificate of a is in b.
func subset(a, b []*x509.Certificate) bool {
	for _, c := range a {
		if !slices.ContainsFunc(b, c.Equal) {
			return false
		}
	}
	return len(a) > 0
}
