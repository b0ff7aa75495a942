package base

import (
	"context"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/gridsync/gridsync/api/v1alpha1"
	"github.com/gridsync/gridsync/trust/sitetrust"
)

// SiteOf is the site a GridSite stands for: its grid.praxis.fast/site
// label (discovered sites carry it), else its name without the
// "<network>-" prefix, else its name.
func SiteOf(gs *v1alpha1.GridSite) string {
	if s := gs.Labels[v1alpha1.SiteLabel]; s != "" {
		return s
	}
	if p := gs.Spec.GridNetworkRef + "-"; strings.HasPrefix(gs.Name, p) && len(gs.Name) > len(p) {
		return gs.Name[len(p):]
	}
	return gs.Name
}

func SpiffeMode(n *v1alpha1.GridNetwork) bool {
	return n.Spec.PeerTrust != nil && n.Spec.PeerTrust.Mode == "spiffe"
}

func PinsOf(gs *v1alpha1.GridSite) []string {
	if gs.Spec.Trust == nil {
		return nil
	}
	if fp := gs.Spec.Trust.CertFingerprint; fp != "" {
		return []string{fp}
	}
	return gs.Spec.Trust.CanonicalFingerprints
}

// GridSitesOf lists the GridSites of a network from the cache.
func (c *Env) GridSitesOf(ctx context.Context, network string) ([]v1alpha1.GridSite, error) {
	var list v1alpha1.GridSiteList
	if err := c.Client.List(ctx, &list, client.MatchingFields{IndexSiteNetwork: network}); err != nil {
		return nil, fmt.Errorf("list GridSites of %s: %w", network, err)
	}
	return list.Items, nil
}

// TrustedSites are the sites of a network whose GridSite is Active: the
// only ones whose providers reach overlays. No GridSite, no trust.
func (c *Env) TrustedSites(ctx context.Context, network string) (map[string]bool, error) {
	sites, err := c.GridSitesOf(ctx, network)
	if err != nil {
		return nil, err
	}
	out := map[string]bool{}
	for i := range sites {
		if sites[i].Status.Phase == sitetrust.PhaseActive && sites[i].DeletionTimestamp.IsZero() {
			out[SiteOf(&sites[i])] = true
		}
	}
	return out, nil
}

// GridSiteNetwork maps a GridSite to its network, for the network
// reconciler: an overlay follows its sites' phases.
func GridSiteNetwork(_ context.Context, o client.Object) []reconcile.Request {
	gs, ok := o.(*v1alpha1.GridSite)
	if !ok || gs.Spec.GridNetworkRef == "" {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: gs.Spec.GridNetworkRef}}}
}

// SitePhaseChanged passes a GridSite's creation, deletion, phase change
// or move to another network.
var SitePhaseChanged = predicate.Funcs{
	UpdateFunc: func(e event.UpdateEvent) bool {
		o, ok1 := e.ObjectOld.(*v1alpha1.GridSite)
		n, ok2 := e.ObjectNew.(*v1alpha1.GridSite)
		return !ok1 || !ok2 || o.Status.Phase != n.Status.Phase || o.Spec.GridNetworkRef != n.Spec.GridNetworkRef ||
			o.Labels[v1alpha1.SiteLabel] != n.Labels[v1alpha1.SiteLabel]
	},
	GenericFunc: func(event.GenericEvent) bool { return false },
}
