package provider

import "github.com/gridsync/gridsync/controller/providerpolicy"

// The provider's conditions beside Accepted and Ready: Hosted, while
// spec.siteSelector is set, whether it selects this site; Draining, True
// while its owner drains it (trafficPolicy.drain: every overlay lists it
// existing_only); MetricsScraped, for a provider with spec.metricsConfig,
// whether the agent reads its load signals.
const (
	ConditionHosted         = "Hosted"
	ConditionDraining       = "Draining"
	ConditionMetricsScraped = "MetricsScraped"
)

// Their reasons are providerpolicy's, as all of a provider's; these names
// stay for the controller package's exported ones.
const (
	ReasonSiteSelected    = providerpolicy.ReasonSiteSelected
	ReasonSiteNotSelected = providerpolicy.ReasonSiteNotSelected
	ReasonDrainRequested  = providerpolicy.ReasonDrainRequested
	ReasonScraped         = providerpolicy.ReasonScraped
	ReasonScrapeFailed    = providerpolicy.ReasonScrapeFailed
	ReasonNoSignalNames   = providerpolicy.ReasonNoSignalNames
)
