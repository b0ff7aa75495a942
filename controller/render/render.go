// Package render turns a network's providers into the overlay of one
// gateway. It is pure: the reconciler gathers the inputs (provider phases,
// verified credentials) and publishes the result.
package render

import (
	"cmp"
	"slices"

	"k8s.io/apimachinery/pkg/labels"

	"github.com/gridsync/gridsync/controller/admission"
	"github.com/gridsync/gridsync/controller/api/v1alpha1"
	"github.com/gridsync/gridsync/shared/envelope"
)

// Gateway is a consumer gateway of the network.
type Gateway struct {
	Name      string
	Namespace string
	// Site is the gateway's site: the overlay's local_site, and what
	// providers' access policies match (as the label
	// grid.praxis.fast/site=<Site>).
	Site string
	// Policy is the network's site-to-site policy.
	Policy SitePolicy
}

// SitePolicy is a network's networkPolicy. The zero value lets every site
// connect.
type SitePolicy struct {
	// OwnSiteOnly: defaultAllow is false, so a gateway uses only the
	// providers of its own site.
	OwnSiteOnly bool
	// Denied sites connect to nobody: their providers reach no overlay,
	// and their gateways get an empty one.
	Denied map[string]bool
}

// Allows reports whether a gateway of site from may use a provider of
// site to.
func (p SitePolicy) Allows(from, to string) bool {
	if p.Denied[from] || p.Denied[to] {
		return false
	}
	return !p.OwnSiteOnly || from == to
}

// Provider is what rendering needs of one InferenceProvider.
type Provider struct {
	// Name is the object's name, the candidates' site.
	Name string
	// Cluster is the candidates' cluster.
	Cluster string
	Models  []string
	Phase   v1alpha1.ProviderPhase
	// Credential is the reference the candidates carry; nil for none.
	Credential *envelope.Credential
	// Sites selects the gateway sites that may use the provider; nil
	// selects every site.
	Sites labels.Selector
	// Admission is whether the provider takes new sessions (the
	// admission stage's verdict); empty is new_and_existing.
	Admission admission.State
}

// Remote is a provider of another site, as its site gossiped it. Only the
// providers of sites whose GridSite is Active are given to Overlay.
type Remote struct {
	// Site is the provider's site: the candidates' site and cluster (the
	// provider hop: that site's gateway is the load_balancer cluster a
	// consumer reaches it through).
	Site   string
	Name   string
	Models []string
	Phase  v1alpha1.ProviderPhase
	// Stale: the site is not alive (suspect, dead or left), so the record
	// may be out of date.
	Stale bool
	// Sites is the provider's access policy; nil admits every site.
	Sites labels.Selector
	// Admission is as for Provider.
	Admission admission.State
	// Drained: its site says its owner drains it; Load names the load
	// series it publishes. The admission stage folds both into Admission.
	Drained bool
	Load    []string
}

// Admits reports whether the provider's access policy lets gw use it.
func (p Provider) Admits(gw Gateway) bool { return admits(p.Sites, gw) }

// admits reports whether an access policy (nil: every site) lets gw use a
// provider.
func admits(sites labels.Selector, gw Gateway) bool { return AdmitsSite(sites, gw.Site) }

// AdmitsSite reports whether an access policy (nil: every site) lets a
// gateway of site use a provider.
func AdmitsSite(sites labels.Selector, site string) bool {
	return sites == nil || sites.Matches(labels.Set{v1alpha1.SiteLabel: site})
}

// routable: a provider in this phase has candidates (fresh when
// Available).
func routable(phase v1alpha1.ProviderPhase) bool {
	return phase == v1alpha1.ProviderAvailable || phase == v1alpha1.ProviderDegraded
}

// candidate is one model's candidate, with its stable ID and admission.
func candidate(model, site, cluster string, fresh bool, admitted admission.State) envelope.Candidate {
	c := envelope.Candidate{Kind: envelope.CandidateKindInferenceModel, Name: model, Site: site, Cluster: cluster, Fresh: fresh,
		AdmissionState: string(admitted)}
	c.StableID = envelope.StableID(c.Kind, c.Name, c.Site, c.Cluster)
	return c
}

// admissionOf reads an Admission field: empty is new_and_existing.
func admissionOf(s admission.State) admission.State {
	if s == "" {
		return admission.NewAndExisting
	}
	return s
}

// Overlay renders the overlay of gw: one candidate per model of every
// provider that the gateway's site may use (by the provider's access
// policy and the network's site policy) and that is not Unavailable.
// No candidate at all is a valid, authoritative overlay: it withdraws
// every route.
//
// Remote providers (of trusted sites only: the caller's filter) render as
// candidates whose site is their site and whose cluster is that site's
// gateway, never with a credential (it is added at the provider's own
// site, the final hop), and not fresh while the site is not alive or the
// provider is Degraded. Several providers of one site serving a model make
// one candidate, fresh if any of them is.
//
// Every candidate carries its admission_state: new_and_existing, or
// existing_only for a pressured or drained provider (sessions on it
// continue, new ones go elsewhere); a provider admitting none is left
// out. A remote candidate standing for several providers takes the least
// restrictive of their states.
//
// The order is semantic (it is digested, and the gateway prefers lower
// ranks): candidates taking new sessions before those that do not, fresh
// ones (Available providers) before stale ones (Degraded), then by site
// (provider name), model and cluster. Rank is the position in that order.
// Inputs in any order give the same overlay.
func Overlay(network string, gw Gateway, providers []Provider, remote ...Remote) envelope.Overlay {
	candidates := []envelope.Candidate{}
	for _, p := range providers {
		admitted := admissionOf(p.Admission)
		if !routable(p.Phase) || admitted == admission.None || !p.Admits(gw) || !gw.Policy.Allows(gw.Site, p.Name) {
			continue
		}
		for _, model := range p.Models {
			c := candidate(model, p.Name, p.Cluster, p.Phase == v1alpha1.ProviderAvailable, admitted)
			if p.Credential != nil {
				credential := *p.Credential
				c.Credential = &credential
			}
			candidates = append(candidates, c)
		}
	}
	hop := make(map[string]int, len(candidates)) // stable ID → index in candidates
	for i, c := range candidates {
		hop[c.StableID] = i
	}
	for _, p := range remote {
		admitted := admissionOf(p.Admission)
		if !routable(p.Phase) || admitted == admission.None || !admits(p.Sites, gw) || !gw.Policy.Allows(gw.Site, p.Site) {
			continue
		}
		for _, model := range p.Models {
			c := candidate(model, p.Site, p.Site, p.Phase == v1alpha1.ProviderAvailable && !p.Stale, admitted)
			if i, seen := hop[c.StableID]; seen {
				candidates[i].Fresh = candidates[i].Fresh || c.Fresh
				candidates[i].AdmissionState = string(admission.Least(admission.State(candidates[i].AdmissionState), admitted))
				continue
			}
			hop[c.StableID] = len(candidates)
			candidates = append(candidates, c)
		}
	}
	slices.SortFunc(candidates, compareCandidates)
	for i := range candidates {
		rank := int64(i)
		candidates[i].Rank = &rank
	}
	return envelope.Overlay{Network: network, LocalSite: gw.Site, Candidates: candidates}
}

func compareCandidates(a, b envelope.Candidate) int {
	if ra, rb := admission.Rank(admission.State(a.AdmissionState)), admission.Rank(admission.State(b.AdmissionState)); ra != rb {
		return cmp.Compare(ra, rb)
	}
	if a.Fresh != b.Fresh {
		if a.Fresh {
			return -1
		}
		return 1
	}
	return cmp.Or(
		cmp.Compare(a.Site, b.Site),
		cmp.Compare(a.Name, b.Name),
		cmp.Compare(a.Cluster, b.Cluster),
	)
}
