package base

import (
	"context"
	"fmt"
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gridsync/gridsync/api/v1alpha1"
	assess "github.com/gridsync/gridsync/controller/providerpolicy"
)

// Labels a site is known by to an InferenceProvider's spec.siteSelector,
// beside grid.praxis.fast/site.
const (
	RegionLabel = "grid.praxis.fast/region"
	ZoneLabel   = "grid.praxis.fast/zone"
)

// SiteLabels are this site's labels in a network: its name, and the
// network's region and zone.
func (c *Env) SiteLabels(network *v1alpha1.GridNetwork) labels.Set {
	out := labels.Set{}
	if c.Opts.SiteName != "" {
		out[v1alpha1.SiteLabel] = c.Opts.SiteName
	}
	if network != nil && network.Spec.Region != "" {
		out[RegionLabel] = network.Spec.Region
	}
	if network != nil && network.Spec.Zone != "" {
		out[ZoneLabel] = network.Spec.Zone
	}
	return out
}

// Hosted says whether this site hosts the provider: its siteSelector,
// when set, matches the site's labels. A selector that does not parse
// hosts nowhere (fail closed).
func (c *Env) Hosted(p *v1alpha1.InferenceProvider, network *v1alpha1.GridNetwork) (bool, string) {
	sel := p.Spec.SiteSelector
	if sel == nil {
		return true, ""
	}
	s, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil {
		return false, fmt.Sprintf("spec.siteSelector does not parse (%v): the provider is offered nowhere", err)
	}
	site := c.SiteLabels(network)
	if s.Matches(site) {
		return true, fmt.Sprintf("this site (%s) matches spec.siteSelector", site)
	}
	return false, fmt.Sprintf("this site (%s) does not match spec.siteSelector %s: the provider is neither offered nor gossiped here", site, s)
}

// NetworkOf reads a provider's network from the cache; nil when it does
// not exist.
func (c *Env) NetworkOf(ctx context.Context, p *v1alpha1.InferenceProvider) (*v1alpha1.GridNetwork, error) {
	var n v1alpha1.GridNetwork
	switch err := c.Client.Get(ctx, types.NamespacedName{Name: p.Spec.GridNetworkRef}, &n); {
	case apierrors.IsNotFound(err):
		return nil, nil
	case err != nil:
		return nil, err
	}
	return &n, nil
}

// UnsupportedProviderFields lists the paths of the fields a provider sets
// that this release accepts and does not act on.
func UnsupportedProviderFields(p *v1alpha1.InferenceProvider) []string {
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

// AcceptedCondition is the Accepted condition of a GridSite or an
// InferenceProvider: always True (the API server admitted the object), its
// reason FieldNotSupported while it sets fields this release does not act
// on, naming them.
func AcceptedCondition(unsupported []string, generation int64) metav1.Condition {
	c := metav1.Condition{Type: ConditionAccepted, Status: metav1.ConditionTrue, Reason: ReasonAccepted,
		Message: "every field set is in effect", ObservedGeneration: generation}
	if len(unsupported) > 0 {
		c.Reason = ReasonFieldNotSupported
		c.Message = "accepted, not acted on by this release: " + JoinLimited(unsupported, 8)
	}
	return c
}

// Accepted condition.
const (
	ConditionAccepted = "Accepted"
	ReasonAccepted    = "Accepted"
)

// Assess decides a provider's phase (package assess) with the prober's
// health and the Secrets secrets reads.
func (c *Env) Assess(p *v1alpha1.InferenceProvider, secrets assess.Secrets) (assess.Verdict, error) {
	return assess.Assess(p, assess.Options{
		Secrets:                secrets,
		SecretNamespaceWatched: c.Opts.Watches,
		Health:                 c.Prober.Health(p.Name),
	})
}

// Drained reports whether a provider's owner drains it.
func Drained(p *v1alpha1.InferenceProvider) bool {
	return p.Spec.TrafficPolicy != nil && p.Spec.TrafficPolicy.Drain
}

// SetConditionWhile sets c while there is a reason to (while), and
// removes a condition of its type otherwise.
func SetConditionWhile(conditions *[]metav1.Condition, while bool, c metav1.Condition) {
	if !while {
		meta.RemoveStatusCondition(conditions, c.Type)
		return
	}
	meta.SetStatusCondition(conditions, c)
}
