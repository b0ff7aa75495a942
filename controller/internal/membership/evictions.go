// The network's trust bundle stage: the issuer signs the sites its
// operator evicted, every site keeps the newest bundle it holds in the
// network's status so that an eviction outlives a restart, and both load
// it back at start.

package membership

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/gridsync/gridsync/api/v1alpha1"
	"github.com/gridsync/gridsync/controller/internal/base"
	"github.com/gridsync/gridsync/controller/internal/trustmaterial"
	"github.com/gridsync/gridsync/trust/bundle"
)

// ConditionEvictions is the network's condition on its trust bundle.
const ConditionEvictions = "Evictions"

// Reasons of the Evictions condition.
const (
	ReasonNoEvictions       = "NoEvictions"        // no bundle: nothing evicted, or no grid CA
	ReasonEvictionsCurrent  = "EvictionsCurrent"   // the newest bundle held is applied
	ReasonEvictionsUnsigned = "EvictionsUnsigned"  // the issuer could not sign the list
	ReasonEvictionsNotHere  = "EvictionsNotIssuer" // the list is not this site's to sign
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
}

// Reconcile loads the bundle the status kept, signs a new one at the
// issuer when the list of evicted sites changed, and returns the newest
// held.
func (e *Evictions) Reconcile(ctx context.Context, network *v1alpha1.GridNetwork) EvictionsOutcome {
	book := e.Opts.TrustBundles
	tm := e.Trust.Get(ctx, network)
	if book == nil || len(tm.RootCerts) == 0 {
		return EvictionsOutcome{Condition: Condition{OK: true, Reason: ReasonNoEvictions, Message: "the network has no grid CA here: no site can be evicted"},
			Status: network.Status.TrustBundle}
	}
	book.SetRoots(network.Name, tm.RootCerts)
	if kept := network.Status.TrustBundle; kept != nil && len(kept.Signed) > 0 {
		if _, err := book.Offer(network.Name, kept.Signed); err != nil {
			e.Opts.Logger.Warn("trust_bundle_status_refused", "network", network.Name, "error", err.Error())
		}
	}
	cond := e.sign(ctx, network, book)
	b := book.Bundle(network.Name)
	if b == nil {
		if cond.Reason == "" {
			cond = Condition{OK: true, Reason: ReasonNoEvictions, Message: "no site of the network is evicted"}
		}
		return EvictionsOutcome{Condition: cond}
	}
	evicted := b.EvictedSites()
	if cond.Reason == "" {
		msg := "no site is evicted"
		if len(evicted) > 0 {
			msg = fmt.Sprintf("%d site(s) evicted: %s", len(evicted), strings.Join(evicted, ", "))
		}
		cond = Condition{OK: true, Reason: ReasonEvictionsCurrent, Message: fmt.Sprintf("%s (trust bundle signed by %s, version %d)", msg, b.Issuer, b.Version)}
	}
	return EvictionsOutcome{Condition: cond, Status: &v1alpha1.TrustBundleStatus{
		Version: strconv.FormatUint(b.Version, 10), EvictedSites: evicted, Signed: book.Signed(network.Name)}}
}

// sign has the issuer sign a bundle when spec's evicted sites differ from
// the newest held. Elsewhere the list is not this site's to sign: it says
// so when the spec sets one.
func (e *Evictions) sign(ctx context.Context, network *v1alpha1.GridNetwork, book *bundle.Book) Condition {
	var listed []string
	if t := network.Spec.TLS; t != nil && t.SiteCertificate != nil {
		listed = t.SiteCertificate.EvictedSites
	}
	ca, err := issuerCA(ctx, e.API, network)
	if err != nil {
		if len(listed) > 0 && !sameSet(listed, book.Bundle(network.Name).EvictedSites()) {
			return Condition{OK: false, Reason: ReasonEvictionsNotHere,
				Message: "spec.tls.siteCertificate.evictedSites is signed only by the network's issuer (the site holding the grid CA's key); here it is not applied: " + err.Error()}
		}
		return Condition{}
	}
	held := book.Bundle(network.Name)
	if held != nil && held.Issuer != e.Opts.SiteName {
		// Another site signed the newest bundle: where several sites hold
		// the grid CA's key (a CA Secret copied to each), the one whose
		// operator evicts is the issuer, and a site with an empty list
		// must not lift what it evicted.
		if len(listed) > 0 && !sameSet(listed, held.EvictedSites()) {
			return Condition{OK: false, Reason: ReasonEvictionsNotHere,
				Message: fmt.Sprintf("spec.tls.siteCertificate.evictedSites is not applied: the network's evictions are signed by site %s, and only its list counts", held.Issuer)}
		}
		return Condition{}
	}
	next, err := bundle.Next(held, network.Name, e.Opts.SiteName, listed, e.Opts.Now())
	if err == nil && next == nil {
		return Condition{}
	}
	var signed []byte
	if err == nil {
		signed, err = bundle.Sign(next, ca.Signer())
	}
	if err == nil {
		_, err = book.Offer(network.Name, signed)
	}
	if err != nil {
		return Condition{OK: false, Reason: ReasonEvictionsUnsigned, Message: "spec.tls.siteCertificate.evictedSites: " + err.Error()}
	}
	e.Opts.Logger.Info("trust_bundle_signed", "network", network.Name, "version", next.Version, "evicted", strings.Join(next.EvictedSites(), ","))
	return Condition{}
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
