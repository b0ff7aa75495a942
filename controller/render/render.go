// Package render turns a network's providers into the overlay of one
// gateway. It is pure: the reconciler gathers the inputs (provider phases,
// verified credentials) and publishes the result.
package render

import (
	"cmp"
	"slices"

	"k8s.io/apimachinery/pkg/labels"

	"github.com/gridsync/gridsync/api/v1alpha1"
	"github.com/gridsync/gridsync/controller/admission"
	"github.com/gridsync/gridsync/controller/scoring"
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
	// Region and Zone are where the gateway's site runs (the network's
	// spec.region and spec.zone), for the candidates' locality tiers.
	Region, Zone string
	// ScoreFirst orders by freshness before locality, and groups fresh
	// admitted candidates of every tier together (routingPolicy
	// scoreFirst); otherwise geographyFirst.
	ScoreFirst bool
	// Selection is the overlay's selection_policy mode; empty for none.
	Selection string
	// Scored: the network names a scoring strategy, so every candidate
	// carries its score and score_breakdown (Signal's contribution), and
	// scores order candidates within a selection group. Without one the
	// overlay carries no scores.
	Scored bool
	Signal admission.Signal
	// Weighted: the network asks for weightedRandom selection. Contract
	// 1.0.0 has no such mode, so the overlay's selection_policy is random,
	// the nearest the gateway executes, and every candidate carries its
	// capacity as selection_weight for a gateway that reads it.
	Weighted bool
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
	// Score is the provider's published score (the admission stage's,
	// quantised), used when the gateway is Scored.
	Score float64
	// Weight is its placementPolicy.capacityWeight (1 to 1000; 0 is 1),
	// used when the gateway is Weighted.
	Weight int32
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
	// Admission, Score and Weight are as for Provider.
	Admission admission.State
	Score     float64
	Weight    int32
	// Drained: its site says its owner drains it; Load names the load
	// series it publishes. The admission stage folds both into Admission.
	Drained bool
	Load    []string
	// Region and Zone are where its site runs, as the site signed them.
	Region, Zone string
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

// Locality tiers, nearest first: a candidate's selection_tier.
const (
	TierSameSite    = "same_site"
	TierSameZone    = "same_zone"
	TierSameRegion  = "same_region"
	TierCrossRegion = "cross_region"
	TierUnknown     = "unknown"
)

var tierRank = map[string]int{TierSameSite: 0, TierSameZone: 1, TierSameRegion: 2, TierCrossRegion: 3, TierUnknown: 4}

// tier is the locality of a provider site seen from the gateway's. A zone
// counts only within its region: zone names are not unique across them.
func tier(gw Gateway, region, zone string) string {
	switch {
	case gw.Region == "" || region == "":
		return TierUnknown
	case gw.Region != region:
		return TierCrossRegion
	case gw.Zone != "" && gw.Zone == zone:
		return TierSameZone
	}
	return TierSameRegion
}

// candidate is one model's candidate, with its stable ID, admission and
// locality tier.
func candidate(gw Gateway, model, site, cluster string, fresh bool, admitted admission.State, locality string, score float64, weight int32) envelope.Candidate {
	c := envelope.Candidate{Kind: envelope.CandidateKindInferenceModel, Name: model, Site: site, Cluster: cluster, Fresh: fresh,
		AdmissionState: string(admitted), SelectionTier: locality}
	c.StableID = envelope.StableID(c.Kind, c.Name, c.Site, c.Cluster)
	if gw.Scored {
		setScore(gw, &c, score)
	}
	if gw.Weighted {
		w := int64(Weight(weight))
		c.SelectionWeight = &w
	}
	return c
}

// MaxWeight bounds a provider's capacityWeight, as the schema does; a
// weight gossiped by another site is held to it too.
const MaxWeight = 1000

// Weight is a capacityWeight as the overlay counts it: unset is 1, and
// it is held within 1 to MaxWeight.
func Weight(w int32) int32 {
	return min(max(w, 1), MaxWeight)
}

// setScore gives c its score and the breakdown that explains it.
func setScore(gw Gateway, c *envelope.Candidate, score float64) {
	b := scoring.Breakdown(gw.Signal, score)
	c.Score, c.ScoreBreakdown = &b.Total, &b
}

// scoreOf is a candidate's score; 0 when it carries none.
func scoreOf(c envelope.Candidate) float64 {
	if c.Score == nil {
		return 0
	}
	return *c.Score
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
// Every candidate carries its locality tier (selection_tier): same_site
// for this site's providers; for a remote site's, same_zone, same_region
// or cross_region from the two sites' region and zone, unknown when
// either has no region.
//
// The order is semantic (it is digested, and the gateway prefers lower
// ranks): candidates taking new sessions before those that do not; then,
// geographyFirst (the default), nearer tiers before farther ones and
// fresh candidates (Available providers) before stale ones (Degraded),
// or, scoreFirst, freshness before tier; then, when the network scores,
// the higher score (scoreFirst: before the tier); then by site (provider
// name), model and cluster. Rank is the position in that order.
// Candidates equal in what orders them before score and tie-break form
// one selection group (selection_group, from 0): geographyFirst
// admission, tier and freshness, scoreFirst admission and freshness. A
// score orders a group and never splits it. A remote candidate standing
// for several providers takes the best of their scores. The gateway chooses
// within the first viable group as the selection policy says (none:
// deterministically). Inputs in any order give the same overlay.
func Overlay(network string, gw Gateway, providers []Provider, remote ...Remote) envelope.Overlay {
	candidates := []envelope.Candidate{}
	for _, p := range providers {
		admitted := admissionOf(p.Admission)
		if !routable(p.Phase) || admitted == admission.None || !p.Admits(gw) || !gw.Policy.Allows(gw.Site, p.Name) {
			continue
		}
		for _, model := range p.Models {
			c := candidate(gw, model, p.Name, p.Cluster, p.Phase == v1alpha1.ProviderAvailable, admitted, TierSameSite, p.Score, p.Weight)
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
			c := candidate(gw, model, p.Site, p.Site, p.Phase == v1alpha1.ProviderAvailable && !p.Stale, admitted, tier(gw, p.Region, p.Zone), p.Score, p.Weight)
			if i, seen := hop[c.StableID]; seen {
				candidates[i].Fresh = candidates[i].Fresh || c.Fresh
				candidates[i].AdmissionState = string(admission.Least(admission.State(candidates[i].AdmissionState), admitted))
				if gw.Scored && p.Score > scoreOf(candidates[i]) {
					setScore(gw, &candidates[i], p.Score)
				}
				if gw.Weighted { // the site's providers' capacities add up
					*candidates[i].SelectionWeight += *c.SelectionWeight
				}
				continue
			}
			hop[c.StableID] = len(candidates)
			candidates = append(candidates, c)
		}
	}
	slices.SortFunc(candidates, func(a, b envelope.Candidate) int {
		// Within a group the higher score first; then, scoreFirst, the
		// nearer tier (geographyFirst already ordered by it).
		return cmp.Or(comparePreference(gw, a, b), cmp.Compare(scoreOf(b), scoreOf(a)), compareTier(a, b),
			cmp.Compare(a.Site, b.Site), cmp.Compare(a.Name, b.Name), cmp.Compare(a.Cluster, b.Cluster))
	})
	group := int64(0)
	for i := range candidates {
		if i > 0 && comparePreference(gw, candidates[i-1], candidates[i]) != 0 {
			group++
		}
		rank, g := int64(i), group
		candidates[i].Rank, candidates[i].SelectionGroup = &rank, &g
	}
	o := envelope.Overlay{Network: network, LocalSite: gw.Site, Candidates: candidates}
	switch {
	case gw.Weighted:
		o.SelectionPolicy = &envelope.SelectionPolicy{Mode: envelope.SelectionRandom}
	case gw.Selection != "":
		o.SelectionPolicy = &envelope.SelectionPolicy{Mode: gw.Selection}
	}
	return o
}

// comparePreference orders candidates by what makes one preferred to
// another, before the tie-break: 0 means equally preferred (one selection
// group).
func comparePreference(gw Gateway, a, b envelope.Candidate) int {
	admitted := cmp.Compare(admission.Rank(admission.State(a.AdmissionState)), admission.Rank(admission.State(b.AdmissionState)))
	fresh := compareFresh(a.Fresh, b.Fresh)
	if gw.ScoreFirst {
		return cmp.Or(admitted, fresh)
	}
	return cmp.Or(admitted, compareTier(a, b), fresh)
}

func compareTier(a, b envelope.Candidate) int {
	return cmp.Compare(tierRank[a.SelectionTier], tierRank[b.SelectionTier])
}

func compareFresh(a, b bool) int {
	switch {
	case a == b:
		return 0
	case a:
		return -1
	}
	return 1
}
