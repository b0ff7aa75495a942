// The network's trust bundle stage: the issuer signs the sites its
// operator evicted, every site keeps the newest bundle it holds in the
// network's status so that an eviction outlives a restart, and both load
// it back at start.

package membership

import (
	"bytes"
	"context"
	"crypto"
	"crypto/x509"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/gridsync/gridsync/api/v1alpha1"
	"github.com/gridsync/gridsync/controller/internal/base"
	"github.com/gridsync/gridsync/controller/internal/trustmaterial"
	"github.com/gridsync/gridsync/gossip/sites"
	"github.com/gridsync/gridsync/trust/bundle"
	"github.com/gridsync/gridsync/trust/sitetrust"
)

// ConditionEvictions is the network's condition on its trust bundle.
const ConditionEvictions = "Evictions"

// Reasons of the Evictions condition.
const (
	ReasonNoEvictions        = "NoEvictions"        // no bundle: nothing evicted, or no grid CA
	ReasonEvictionsCurrent   = "EvictionsCurrent"   // the newest bundle held is applied
	ReasonEvictionsUnsigned  = "EvictionsUnsigned"  // the issuer could not sign the list
	ReasonEvictionsNotIssuer = "EvictionsNotIssuer" // the list is not this site's to sign
)

// Evictions is the trust bundle stage of a network's reconcile.
type Evictions struct {
	*base.Env
	Trust *trustmaterial.Cache
}

// EvictionsOutcome is what one reconcile did with the network's bundle.
type EvictionsOutcome struct {
	Condition Condition
	// Status is the bundle to keep in the network's status (nil: none).
	Status *v1alpha1.TrustBundleStatus
	// cas are the grid CAs when this site is the network's issuer.
	cas *caSet
}

// Reconcile loads the bundle the status kept, signs a new one at the
// issuer when the list of evicted sites changed, and returns the newest
// held.
func (e *Evictions) Reconcile(ctx context.Context, network *v1alpha1.GridNetwork) EvictionsOutcome {
	book := e.Opts.TrustBundles
	tm := e.Trust.Get(ctx, network)
	switch {
	case book == nil || base.OpenNetwork(network):
		return EvictionsOutcome{Condition: Condition{OK: true, Reason: ReasonNoEvictions, Message: "the network has no grid CA here: no site can be evicted"}}
	case tm.RootsProblem != nil:
		// The status keeps the bundle until the CA reads again.
		return EvictionsOutcome{Condition: Condition{OK: false, Reason: ReasonEvictionsUnsigned, Message: "the trust bundle cannot be checked: " + tm.RootsProblem.Message},
			Status: network.Status.TrustBundle.DeepCopy()}
	}
	var chain [][]byte
	var newest []byte
	if kept := network.Status.TrustBundle; kept != nil {
		chain, newest = kept.Chain, kept.Signed
	}
	if err := book.Load(network.Name, tm.ConfiguredRoots, chain, newest); err != nil {
		e.Opts.Logger.Warn("trust_bundle_status_refused", "network", network.Name, "error", err.Error())
	}
	cond, cas := e.sign(ctx, network, book)
	b := book.Bundle(network.Name)
	if b == nil {
		if cond.Reason == "" {
			cond = Condition{OK: true, Reason: ReasonNoEvictions, Message: "no site of the network is evicted"}
		}
		return EvictionsOutcome{Condition: cond, cas: cas}
	}
	evicted := b.EvictedSites()
	if cond.Reason == "" {
		msg := "no site is evicted"
		if len(evicted) > 0 {
			msg = fmt.Sprintf("%d site(s) evicted: %s", len(evicted), strings.Join(evicted, ", "))
		}
		cond = Condition{OK: true, Reason: ReasonEvictionsCurrent, Message: fmt.Sprintf("%s (trust bundle signed by %s, version %d)", msg, b.Issuer, b.Version)}
	}
	status := &v1alpha1.TrustBundleStatus{Version: strconv.FormatUint(b.Version, 10), EvictedSites: evicted, Signed: book.Signed(network.Name),
		Chain: book.Chain(network.Name)}
	roots := book.Roots(network.Name, tm.ConfiguredRoots)
	if len(b.Roots) > 0 {
		for _, r := range roots {
			status.Roots = append(status.Roots, sitetrust.Fingerprint(r.Raw))
		}
		if !slices.ContainsFunc(tm.ConfiguredRoots, func(c *x509.Certificate) bool { return slices.ContainsFunc(roots, c.Equal) }) {
			cond.Message += "; the grid CA this site is configured with is retired: update spec.tls.caConfigMapRef (or caSecretRef's ca.crt) to the network's current CA"
		}
	}
	return EvictionsOutcome{Condition: cond, Status: status, cas: cas}
}

// sign has the issuer sign a bundle when spec's evicted sites differ from
// the newest held. Elsewhere the list is not this site's to sign: it says
// so when the spec sets one.
func (e *Evictions) sign(ctx context.Context, network *v1alpha1.GridNetwork, book *bundle.Book) (Condition, *caSet) {
	var listed []string
	if t := network.Spec.TLS; t != nil && t.SiteCertificate != nil {
		listed = t.SiteCertificate.EvictedSites
	}
	set, err := issuerCAs(ctx, e.API, network)
	if err != nil {
		if len(listed) > 0 && !sameSet(listed, book.Bundle(network.Name).EvictedSites()) {
			return Condition{OK: false, Reason: ReasonEvictionsNotIssuer,
				Message: "spec.tls.siteCertificate.evictedSites is signed only by the network's issuer (the site holding the grid CA's key); here it is not applied: " + err.Error()}, nil
		}
		return Condition{}, nil
	}
	held := book.Bundle(network.Name)
	if held != nil && held.Issuer != e.Opts.SiteName {
		// Another site signed the newest bundle: where several sites hold
		// the grid CA's key (a CA Secret copied to each), the one whose
		// operator evicts is the issuer, and a site with an empty list
		// must not lift what it evicted.
		if len(listed) > 0 && !sameSet(listed, held.EvictedSites()) {
			return Condition{OK: false, Reason: ReasonEvictionsNotIssuer,
				Message: fmt.Sprintf("spec.tls.siteCertificate.evictedSites is not applied: the network's evictions are signed by site %s, and only its list counts", held.Issuer)}, nil
		}
		return Condition{}, nil
	}
	// The CAs the network trusts are named once the issuer holds more
	// than one (a rotation under way), and from then on.
	var roots [][]byte
	var issuing string
	cas := set.all()
	if len(cas) > 1 || held != nil && len(held.Roots) > 0 {
		for _, ca := range cas {
			roots = append(roots, ca.Cert.Raw)
		}
		issuing = sitetrust.Fingerprint(cas[0].Cert.Raw)
	}
	next, err := bundle.NextWith(held, network.Name, e.Opts.SiteName, listed, roots, issuing, e.Opts.Now())
	if err == nil && next == nil {
		return Condition{}, &set
	}
	var signed []byte
	if err == nil {
		keys := make([]crypto.Signer, 0, len(cas))
		for _, ca := range cas {
			keys = append(keys, ca.Signer())
		}
		signed, err = bundle.Sign(next, keys...)
	}
	if err == nil {
		_, err = book.Offer(network.Name, signed)
	}
	if err != nil {
		return Condition{OK: false, Reason: ReasonEvictionsUnsigned, Message: "the network's trust bundle could not be signed: " + err.Error()}, &set
	}
	e.Opts.Logger.Info("trust_bundle_signed", "network", network.Name, "version", next.Version, "evicted", strings.Join(next.EvictedSites(), ","),
		"roots", len(next.Roots))
	return Condition{}, &set
}

func sameSet(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	in := map[string]bool{}
	for _, s := range a {
		in[s] = true
	}
	for _, s := range b {
		if !in[s] {
			return false
		}
	}
	return true
}

// Rotation is where a rotation of the grid CA stands, when this site is
// the network's issuer and its trust bundle names the CAs (nil
// otherwise): the sites it knows (itself included), those that hold a
// bundle naming the new CA, and those whose certificate the new CA
// issued (by the certificates they gossip).
func (o EvictionsOutcome) Rotation(book *bundle.Book, network string, view sites.NetworkView, ownPEM string) *v1alpha1.CARotationStatus {
	b := book.Bundle(network)
	if o.cas == nil || b == nil || len(b.Roots) == 0 {
		return nil
	}
	newest := o.cas.newest().Cert
	st := &v1alpha1.CARotationStatus{Stage: o.cas.stage(), NewCA: sitetrust.Fingerprint(newest.Raw), Sites: int32(1 + len(view.Sites))}
	// The first bundle that named the new CA: a site that passes on that
	// one or a later one trusts it.
	since := b.Version
	for _, signed := range append(book.Chain(network), book.Signed(network)) {
		step := bundle.Peek(signed)
		if step == nil || !slices.ContainsFunc(step.Roots, func(der []byte) bool { return bytes.Equal(der, newest.Raw) }) {
			continue
		}
		since = min(since, step.Version)
	}
	if slices.ContainsFunc(mustRoots(b), newest.Equal) {
		st.SitesTrustingNewCA++
	}
	if issuedBy(ownPEM, newest) {
		st.SitesOnNewCA++
	}
	for _, s := range view.Sites {
		if s.TrustBundleVersion >= since {
			st.SitesTrustingNewCA++
		}
		if issuedBy(s.CertPEM, newest) {
			st.SitesOnNewCA++
		}
	}
	return st
}

func mustRoots(b *bundle.Bundle) []*x509.Certificate {
	roots, _ := b.RootCerts()
	return roots
}

// issuedBy reports whether the leaf of a PEM chain names ca as its
// issuer (by key identifier): a count, not a trust decision.
func issuedBy(chainPEM string, ca *x509.Certificate) bool {
	certs, err := sitetrust.ParseCertificates([]byte(chainPEM))
	return err == nil && len(certs) > 0 && len(ca.SubjectKeyId) > 0 && bytes.Equal(certs[0].AuthorityKeyId, ca.SubjectKeyId)
}

// fetchFromIssuer has an enrolled site that runs no SWIM, and so hears no
// gossip, fetch the network's trust bundle from its issuer's listener (at
// every poll of its Secrets), presenting its site certificate; the book
// checks it as any other.
func (e *Evictions) fetchFromIssuer(ctx context.Context, network *v1alpha1.GridNetwork) {
	t := network.Spec.TLS
	if e.Opts.TrustBundles == nil || t == nil || t.SiteCertificate == nil || t.SiteCertificate.Mode != v1alpha1.SiteCertificateEnrolled || t.SiteCertificate.Issuer == nil {
		return
	}
	tm := e.Trust.Get(ctx, network)
	if tm.Client == nil || tm.Roots == nil {
		return
	}
	issuer := t.SiteCertificate.Issuer
	f := bundle.Fetcher{Dial: e.Opts.ProbeDestinations.Dialer(e.Opts.SiteProbeTimeout), Timeout: e.Opts.SiteProbeTimeout}
	signed, err := f.Fetch(ctx, issuer.Address, sitetrust.DNSName(issuer.Site), tm.Roots, tm.Client, network.Name)
	if err == nil {
		_, err = e.Opts.TrustBundles.Offer(network.Name, signed)
	}
	if err != nil && !errors.Is(err, bundle.ErrNone) {
		e.Opts.Logger.Debug("trust_bundle_not_fetched", "network", network.Name, "issuer", issuer.Site, "error", err.Error())
	}
}
