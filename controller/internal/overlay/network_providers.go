package overlay

import (
	"context"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gridsync/gridsync/api/v1alpha1"
	"github.com/gridsync/gridsync/controller/internal/base"
	"github.com/gridsync/gridsync/controller/render"
	"github.com/gridsync/gridsync/gossip/sites"
)

// remoteProviders are the provider records gossiped by the sites whose
// GridSite is Active; a record whose access policy does not parse is left
// out (fail closed), and so is a stale one older than the network's
// spec.staleCandidateTtlSeconds.
func (r *Reconciler) remoteProviders(ctx context.Context, network *v1alpha1.GridNetwork, view sites.NetworkView) ([]render.Remote, error) {
	if len(view.Providers) == 0 {
		return nil, nil
	}
	trusted, err := r.TrustedSites(ctx, network.Name)
	if err != nil {
		return nil, err
	}
	expired := expiredSites(network, view, r.Opts.Now())
	where := make(map[string]sites.Site, len(view.Sites))
	for _, s := range view.Sites {
		where[s.Name] = s
	}
	var out []render.Remote
	for _, p := range view.Providers {
		if !trusted[p.Site] || expired[p.Site] {
			continue
		}
		rp := render.Remote{Site: p.Site, Name: p.Name, Models: p.Models, Phase: v1alpha1.ProviderPhase(p.Phase), Stale: p.Stale, Drained: p.Drained, Load: p.Load, Weight: p.Weight,
			Region: where[p.Site].Region, Zone: where[p.Site].Zone}
		if r.Opts.Signals != nil {
			// Its site says the provider cannot serve now: not fresh,
			// whatever the gossiped phase.
			if ready, known := r.Opts.Signals.Ready(p.Site, p.Name); known && !ready {
				rp.Stale = true
			}
		}
		if p.Sites != "" {
			sel, err := labels.Parse(p.Sites)
			if err != nil {
				continue
			}
			rp.Sites = sel
		}
		out = append(out, rp)
	}
	return out, nil
}

// expiredSites are the sites whose records are stale (not alive) for at
// least the network's spec.staleCandidateTtlSeconds: their candidates
// leave the overlays, while membership keeps the records.
func expiredSites(network *v1alpha1.GridNetwork, view sites.NetworkView, now time.Time) map[string]bool {
	ttl := network.Spec.StaleCandidateTTLSeconds
	if ttl == nil || *ttl <= 0 {
		return nil
	}
	out := map[string]bool{}
	for _, s := range view.Sites {
		if s.State != sites.SiteAlive && !s.Since.IsZero() && now.Sub(s.Since) >= time.Duration(*ttl)*time.Second {
			out[s.Name] = true
		}
	}
	return out
}

// gateways lists the network's consumer gateways, each once.
func gateways(n *v1alpha1.GridNetwork) []render.Gateway {
	policy := SitePolicy(n.Spec.NetworkPolicy)
	seen := map[types.NamespacedName]bool{}
	var out []render.Gateway
	for _, g := range n.Spec.ConsumerGateways {
		key := types.NamespacedName{Namespace: g.Namespace, Name: g.Name}
		if seen[key] {
			continue
		}
		seen[key] = true
		site := g.SiteName
		if site == "" {
			site = n.Name
		}
		gw := render.Gateway{Name: g.Name, Namespace: g.Namespace, Site: site, Policy: policy,
			Region: n.Spec.Region, Zone: n.Spec.Zone, ScoreFirst: n.Spec.RoutingPolicy == v1alpha1.RoutingScoreFirst}
		if sp := n.Spec.SelectionPolicy; sp != nil {
			gw.Selection = sp.Mode
		}
		gw.Weighted = weighted(n)
		if n.Spec.ScoringPolicy != nil {
			policy, _ := admissionPolicy(n)
			gw.Scored, gw.Signal = true, policy.Signal
		}
		out = append(out, gw)
	}
	return out
}

// SitePolicy reads the network's networkPolicy.
func SitePolicy(np *v1alpha1.NetworkPolicy) render.SitePolicy {
	var p render.SitePolicy
	if np == nil {
		return p
	}
	p.OwnSiteOnly = np.DefaultAllow != nil && !*np.DefaultAllow
	for _, d := range np.Deny {
		if p.Denied == nil {
			p.Denied = map[string]bool{}
		}
		p.Denied[d.Site] = true
	}
	return p
}

// assessProviders assesses every provider of the network this site
// hosts (spec.siteSelector), and returns them with the provider objects.
func (r *Reconciler) assessProviders(ctx context.Context, network *v1alpha1.GridNetwork) ([]render.Provider, []v1alpha1.InferenceProvider, error) {
	var all v1alpha1.InferenceProviderList
	if err := r.Client.List(ctx, &all, client.MatchingFields{base.IndexNetwork: network.Name}); err != nil {
		return nil, nil, fmt.Errorf("list providers of %s: %w", network.Name, err)
	}
	var list v1alpha1.InferenceProviderList
	for i := range all.Items {
		if ok, _ := r.Hosted(&all.Items[i], network); ok {
			list.Items = append(list.Items, all.Items[i])
		}
	}
	out := make([]render.Provider, 0, len(list.Items))
	secrets := base.NewSecretReader(ctx, r.API) // each Secret read once per reconcile
	var refs []types.NamespacedName
	for i := range list.Items {
		if a := list.Items[i].Spec.Auth; a != nil && a.SecretRef != nil && !a.CredentialsManagedExternally &&
			a.SecretRef.Name != "" && r.Opts.Watches(a.SecretRef.Namespace) {
			refs = append(refs, types.NamespacedName{Namespace: a.SecretRef.Namespace, Name: a.SecretRef.Name})
		}
	}
	secrets.Prefetch(refs)
	for i := range list.Items {
		p := &list.Items[i]
		if !p.DeletionTimestamp.IsZero() {
			continue
		}
		v, err := r.Assess(p, secrets)
		if err != nil {
			return nil, nil, err
		}
		v.Provider.Weight = capacityWeight(p)
		out = append(out, v.Provider)
	}
	return out, list.Items, nil
}

// capacityWeight is a provider's placementPolicy.capacityWeight; 0 when
// unset (the overlay counts it as 1).
func capacityWeight(p *v1alpha1.InferenceProvider) int32 {
	if pp := p.Spec.PlacementPolicy; pp != nil {
		return pp.CapacityWeight
	}
	return 0
}

// gossipProviders is what the other sites learn of this site's providers.
func gossipProviders(items []v1alpha1.InferenceProvider, assessed []render.Provider) []sites.Provider {
	phase := map[string]render.Provider{}
	for _, p := range assessed {
		phase[p.Name] = p
	}
	var out []sites.Provider
	for i := range items {
		p := &items[i]
		a, ok := phase[p.Name]
		if !ok {
			continue
		}
		mp := sites.Provider{
			Name: p.Name, Models: a.Models, Cluster: a.Cluster, Phase: string(a.Phase),
			ProviderKind: p.Spec.ProviderKind, BackendKind: p.Spec.BackendKind,
			Credentialed: a.Credential != nil,
			Drained:      base.Drained(p),
			Load:         measuredLoad(p),
			Weight:       capacityWeight(p),
		}
		if a.Sites != nil {
			mp.Sites = a.Sites.String()
		}
		out = append(out, mp)
	}
	return out
}
