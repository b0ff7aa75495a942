package controller

import (
	"context"
	"errors"

	"sigs.k8s.io/controller-runtime/pkg/client"

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
// from what the network reconciles published: a request reads the
// GridNetworks from the cache and the providers from the snapshot, and
// runs no stage and no API read. An answer is as fresh as each network's
// last reconcile (overlay.Snapshot says when that moves); the networks'
// policies are read at the request. NewManager fills it in.
type Directory struct {
	networks client.Reader
	site     string
	snapshot *overlay.Snapshot
	// remote: the agent runs SWIM, so there are remote providers to list.
	remote bool
}

// ErrDirectoryNotReady: the controller has not started, or a network has
// not been reconciled since.
var ErrDirectoryNotReady = errors.New("the provider directory is not ready")

// Providers lists what a caller may use: callerSite is a peer site, or
// this site's own name for its co-located gateway (ownGateway). A peer
// gets this site's providers that the network's policy and each
// provider's access policy admit for it; the gateway gets those and the
// providers of trusted (Active) remote sites as well. Unavailable
// providers are left out, as they are from overlays.
func (d *Directory) Providers(ctx context.Context, callerSite string, ownGateway bool) ([]ProviderEntry, error) {
	if d == nil || d.snapshot == nil {
		return nil, ErrDirectoryNotReady
	}
	var networks v1alpha1.GridNetworkList
	if err := d.networks.List(ctx, &networks); err != nil {
		return nil, err
	}
	published := d.snapshot.Load()
	out := []ProviderEntry{}
	for i := range networks.Items {
		n := &networks.Items[i]
		pub, ok := published[n.Name]
		if !ok {
			if n.DeletionTimestamp.IsZero() {
				// Not reconciled yet (this replica has just started
				// leading, or the network is new): an answer without it
				// would be wrong rather than late.
				return nil, ErrDirectoryNotReady
			}
			continue
		}
		gw := render.Gateway{Site: callerSite, Policy: overlay.SitePolicy(n.Spec.NetworkPolicy)}
		for _, p := range pub.Local {
			if !routable(p.Phase) || !p.Admits(gw) || !gw.Policy.Allows(gw.Site, p.Name) {
				continue
			}
			out = append(out, ProviderEntry{Name: p.Name, Network: n.Name, Site: d.site, Local: true,
				Models: p.Models, Phase: string(p.Phase), Fresh: p.Phase == v1alpha1.ProviderAvailable})
		}
		if !ownGateway || !d.remote {
			continue // a peer is never handed a third site's providers
		}
		for _, p := range pub.Remote {
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
