package controller

import (
	"context"
	"errors"

	"github.com/gridsync/gridsync/api/v1alpha1"
	"github.com/gridsync/gridsync/controller/internal/overlay"
	"github.com/gridsync/gridsync/controller/render"
)

// ProviderEntry is one provider of the discovery API.
type ProviderEntry struct {
	Name    string   `json:"name"`
	Network string   `json:"network"`
	Site    string   `json:"site"`
	Local   bool     `json:"local"`
	Models  []string `json:"models"`
	Phase   string   `json:"phase"`
	Fresh   bool     `json:"fresh"`
}

// Directory answers the provider discovery API (GET /v1/grid/providers)
// from the controller's caches. NewManager fills it in.
type Directory struct {
	r *overlay.Reconciler
}

// ErrDirectoryNotReady: the controller has not started.
var ErrDirectoryNotReady = errors.New("the provider directory is not ready")

// Providers lists what a caller may use: callerSite is a peer site, or
// this site's own name for its co-located gateway (ownGateway). A peer
// gets this site's providers that the network's policy and each
// provider's access policy admit for it; the gateway gets those and the
// providers of trusted (Active) remote sites as well. Unavailable
// providers are left out, as they are from overlays.
func (d *Directory) Providers(ctx context.Context, callerSite string, ownGateway bool) ([]ProviderEntry, error) {
	if d == nil || d.r == nil {
		return nil, ErrDirectoryNotReady
	}
	r := d.r
	var networks v1alpha1.GridNetworkList
	if err := r.Client.List(ctx, &networks); err != nil {
		return nil, err
	}
	out := []ProviderEntry{}
	for i := range networks.Items {
		n := &networks.Items[i]
		gw := render.Gateway{Site: callerSite, Policy: overlay.SitePolicy(n.Spec.NetworkPolicy)}
		local, _, err := r.AssessProviders(ctx, n)
		if err != nil {
			return nil, err
		}
		for _, p := range local {
			if !routable(p.Phase) || !p.Admits(gw) || !gw.Policy.Allows(gw.Site, p.Name) {
				continue
			}
			out = append(out, ProviderEntry{Name: p.Name, Network: n.Name, Site: r.Opts.SiteName, Local: true,
				Models: p.Models, Phase: string(p.Phase), Fresh: p.Phase == v1alpha1.ProviderAvailable})
		}
		if !ownGateway || r.Opts.Membership == nil {
			continue // a peer is never handed a third site's providers
		}
		remote, err := r.RemoteProviders(ctx, n, r.Opts.Membership.View(n.Name))
		if err != nil {
			return nil, err
		}
		for _, p := range remote {
			if !routable(p.Phase) || !render.AdmitsSite(p.Sites, gw.Site) || !gw.Policy.Allows(gw.Site, p.Site) {
				continue
			}
			out = append(out, ProviderEntry{Name: p.Name, Network: n.Name, Site: p.Site, Models: p.Models, Phase: string(p.Phase),
				Fresh: p.Phase == v1alpha1.ProviderAvailable && !p.Stale})
		}
	}
	return out, nil
}

func routable(phase v1alpha1.ProviderPhase) bool {
	return phase == v1alpha1.ProviderAvailable || phase == v1alpha1.ProviderDegraded
}
