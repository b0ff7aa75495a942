package provider

// Reasons of an InferenceProvider's Hosted condition.
const (
	ConditionHosted       = "Hosted"
	ReasonSiteSelected    = "SiteSelected"
	ReasonSiteNotSelected = "SiteNotSelected"
)
