package controller

import (
	"context"
	"fmt"
	"slices"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gridsync/gridsync/api/v1alpha1"
)

// Labels a site is known by to an InferenceProvider's spec.siteSelector,
// beside grid.praxis.fast/site.
const (
	RegionLabel = "grid.praxis.fast/region"
	ZoneLabel   = "grid.praxis.fast/zone"
)

// Reasons of an InferenceProvider's Hosted condition.
const (
	ConditionHosted       = "Hosted"
	ReasonSiteSelected    = "SiteSelected"
	ReasonSiteNotSelected = "SiteNotSelected"
)

// siteLabels are this site's labels in a network: its name, and the
// network's region and zone.
func (c *common) siteLabels(network *v1alpha1.GridNetwork) labels.Set {
	out := labels.Set{}
	if c.opts.SiteName != "" {
		out[v1alpha1.SiteLabel] = c.opts.SiteName
	}
	if network != nil && network.Spec.Region != "" {
		out[RegionLabel] = network.Spec.Region
	}
	if network != nil && network.Spec.Zone != "" {
		out[ZoneLabel] = network.Spec.Zone
	}
	return out
}

// hosted says whether this site hosts the provider: its siteSelector,
// when set, matches the site's labels. A selector that does not parse
// hosts nowhere (fail closed).
func (c *common) hosted(p *v1alpha1.InferenceProvider, network *v1alpha1.GridNetwork) (bool, string) {
	sel := p.Spec.SiteSelector
	if sel == nil {
		return true, ""
	}
	s, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil {
		return false, fmt.Sprintf("spec.siteSelector does not parse (%v): the provider is offered nowhere", err)
	}
	site := c.siteLabels(network)
	if s.Matches(site) {
		return true, fmt.Sprintf("this site (%s) matches spec.siteSelector", site)
	}
	return false, fmt.Sprintf("this site (%s) does not match spec.siteSelector %s: the provider is neither offered nor gossiped here", site, s)
}

// networkOf reads a provider's network from the cache; nil when it does
// not exist.
func (c *common) networkOf(ctx context.Context, p *v1alpha1.InferenceProvider) (*v1alpha1.GridNetwork, error) {
	var n v1alpha1.GridNetwork
	switch err := c.client.Get(ctx, types.NamespacedName{Name: p.Spec.GridNetworkRef}, &n); {
	case apierrors.IsNotFound(err):
		return nil, nil
	case err != nil:
		return nil, err
	}
	return &n, nil
}

// unsupportedProviderFields lists the paths of the fields a provider sets
// that this release accepts and does not act on.
func unsupportedProviderFields(p *v1alpha1.InferenceProvider) []string {
	var out []string
	if p.Spec.Cost != nil {
		out = append(out, "spec.cost")
	}
	for _, m := range p.Spec.Models {
		if len(m.Capabilities) > 0 {
			out = append(out, "spec.models["+m.Name+"].capabilities")
		}
		if m.ContextWindow != nil {
			out = append(out, "spec.models["+m.Name+"].contextWindow")
		}
	}
	slices.Sort(out)
	return out
}

// acceptedCondition is the Accepted condition of a GridSite or an
// InferenceProvider: always True (the API server admitted the object), its
// reason FieldNotSupported while it sets fields this release does not act
// on, naming them.
func acceptedCondition(unsupported []string, generation int64) metav1.Condition {
	c := metav1.Condition{Type: ConditionAccepted, Status: metav1.ConditionTrue, Reason: ReasonAccepted,
		Message: "every field set is in effect", ObservedGeneration: generation}
	if len(unsupported) > 0 {
		c.Reason = ReasonFieldNotSupported
		c.Message = "accepted, not acted on by this release: " + joinLimited(unsupported, 8)
	}
	return c
}

// Accepted condition.
const (
	ConditionAccepted = "Accepted"
	ReasonAccepted    = "Accepted"
)
