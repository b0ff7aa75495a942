package listener

import (
	"context"
	"crypto/tls"
	"time"

	"github.com/gridsync/gridsync/trust/bundle"
	"github.com/gridsync/gridsync/trust/sitetrust"
)

// Kind says who a caller is, as far as its certificate tells.
type Kind uint8

const (
	// Anonymous: no client certificate, or one that names no site.
	Anonymous Kind = iota
	// Gateway: this site's current leaf, matched by digest: the
	// co-located gateway.
	Gateway
	// Site: a peer site, named by its certificate.
	Site
)

func (k Kind) String() string {
	switch k {
	case Gateway:
		return "gateway"
	case Site:
		return "site"
	default:
		return "anonymous"
	}
}

// Caller is who is on a connection.
type Caller struct {
	Kind Kind
	// Site is the peer's site name for Kind Site.
	Site string
	// notBefore is when its certificate starts: a site whose eviction
	// was lifted comes back only with a certificate issued since.
	notBefore time.Time
}

// Naming decides how a verified client certificate names a site.
type Naming struct {
	// LocalSite is this site: a leaf naming it that is not the current
	// leaf (a reissued or stolen one) is refused outright.
	LocalSite string
	// SPIFFE names peers by their SPIFFE ID instead of their organization.
	SPIFFE bool
	// Evictions are the networks' trust bundles: a site one of them
	// evicts is closed right after its handshake, and its connections
	// open when the eviction arrives are closed then. Nil: none.
	Evictions *bundle.Book
}

// name names the caller of a verified connection. localFingerprint is the
// SHA-256 of this site's current leaf. refused is non-empty when the
// connection must be closed whatever it asks.
func (n Naming) name(cs tls.ConnectionState, localFingerprint string) (c Caller, refused string) {
	if len(cs.PeerCertificates) == 0 || len(cs.VerifiedChains) == 0 {
		return Caller{Kind: Anonymous}, ""
	}
	leaf := cs.PeerCertificates[0]
	if localFingerprint != "" && sitetrust.Fingerprint(leaf.Raw) == localFingerprint {
		return Caller{Kind: Gateway}, ""
	}
	site := ""
	if n.SPIFFE {
		site = sitetrust.SPIFFESite(leaf)
	} else if len(leaf.Subject.Organization) == 1 {
		site = leaf.Subject.Organization[0]
	}
	if site == "" || sitetrust.ValidSiteName(site) != nil {
		// Signed by the grid CA, but names no site: an infrastructure
		// certificate.
		return Caller{Kind: Anonymous}, ""
	}
	if site == n.LocalSite {
		return Caller{}, refusedReissued
	}
	if n.Evictions.RefusesAnywhere(site, leaf.NotBefore) {
		return Caller{}, refusedEvicted
	}
	return Caller{Kind: Site, Site: site, notBefore: leaf.NotBefore}, ""
}

type callerKey struct{}

// CallerFrom returns the caller of the connection a request arrived on.
func CallerFrom(ctx context.Context) (Caller, bool) {
	t, ok := ctx.Value(callerKey{}).(*ticket)
	if !ok {
		return Caller{}, false
	}
	return t.caller, true
}
