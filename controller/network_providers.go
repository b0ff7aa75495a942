package controller

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gridsync/gridsync/controller/api/v1alpha1"
	"github.com/gridsync/gridsync/controller/assess"
	"github.com/gridsync/gridsync/controller/render"
	"github.com/gridsync/gridsync/controller/sites"
)

// remoteProviders are the provider records gossiped by the sites whose
// GridSite is Active; a record whose access policy does not parse is left
// out (fail closed).
func (r *networkReconciler) remoteProviders(ctx context.Context, network string, view sites.NetworkView) ([]render.Remote, error) {
	if len(view.Providers) == 0 {
		return nil, nil
	}
	trusted, err := r.trustedSites(ctx, network)
	if err != nil {
		return nil, err
	}
	var out []render.Remote
	for _, p := range view.Providers {
		if !trusted[p.Site] {
			continue
		}
		rp := render.Remote{Site: p.Site, Name: p.Name, Models: p.Models, Phase: v1alpha1.ProviderPhase(p.Phase), Stale: p.Stale}
		if r.opts.Signals != nil {
			// Its site says the provider cannot serve now: not fresh,
			// whatever the gossiped phase.
			if ready, known := r.opts.Signals.Ready(p.Site, p.Name); known && !ready {
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

// gateways lists the network's consumer gateways, each once.
func gateways(n *v1alpha1.GridNetwork) []render.Gateway {
	policy := sitePolicy(n.Spec.NetworkPolicy)
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
		out = append(out, render.Gateway{Name: g.Name, Namespace: g.Namespace, Site: site, Policy: policy})
	}
	return out
}

// sitePolicy reads the network's networkPolicy.
func sitePolicy(np *v1alpha1.NetworkPolicy) render.SitePolicy {
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

// assessProviders assesses every provider of the network, and returns
// them with the provider objects.
func (r *networkReconciler) assessProviders(ctx context.Context, network string) ([]render.Provider, []v1alpha1.InferenceProvider, error) {
	var list v1alpha1.InferenceProviderList
	if err := r.client.List(ctx, &list, client.MatchingFields{indexNetwork: network}); err != nil {
		return nil, nil, fmt.Errorf("list providers of %s: %w", network, err)
	}
	out := make([]render.Provider, 0, len(list.Items))
	secrets := newSecretReader(ctx, r.api) // each Secret read once per reconcile
	var refs []types.NamespacedName
	for i := range list.Items {
		if a := list.Items[i].Spec.Auth; a != nil && a.SecretRef != nil && !a.CredentialsManagedExternally &&
			a.SecretRef.Name != "" && r.opts.watches(a.SecretRef.Namespace) {
			refs = append(refs, types.NamespacedName{Namespace: a.SecretRef.Namespace, Name: a.SecretRef.Name})
		}
	}
	secrets.prefetch(refs)
	for i := range list.Items {
		p := &list.Items[i]
		if !p.DeletionTimestamp.IsZero() {
			continue
		}
		v, err := r.assess(p, secrets)
		if err != nil {
			return nil, nil, err
		}
		out = append(out, v.Provider)
	}
	return out, list.Items, nil
}

func (c *common) assess(p *v1alpha1.InferenceProvider, secrets assess.Secrets) (assess.Verdict, error) {
	return assess.Assess(p, assess.Options{
		Secrets:                secrets,
		SecretNamespaceWatched: c.opts.watches,
		Health:                 c.prober.Health(p.Name),
	})
}
