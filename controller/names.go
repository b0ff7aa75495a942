package controller

import (
	"github.com/gridsync/gridsync/controller/internal/base"
	"github.com/gridsync/gridsync/controller/internal/gridsite"
	"github.com/gridsync/gridsync/controller/internal/provider"
	"github.com/gridsync/gridsync/controller/internal/signalcollect"
)

// Membership is how the control plane reaches the other sites of its
// networks (see base.Membership): the agent wires its SWIM runtime behind
// it. Nil in Options: the agent runs without SWIM, and every network stays
// Pending.
type Membership = base.Membership

// DeliveryTracker holds what gateway pods report they deliver (see
// base.DeliveryTracker).
type DeliveryTracker = base.DeliveryTracker

// Labels a site is known by to an InferenceProvider's spec.siteSelector,
// beside grid.praxis.fast/site.
const (
	RegionLabel = base.RegionLabel
	ZoneLabel   = base.ZoneLabel
)

// Accepted condition of a GridSite or an InferenceProvider.
const (
	ConditionAccepted = base.ConditionAccepted
	ReasonAccepted    = base.ReasonAccepted
)

// ReasonFieldNotSupported is the reason of Ready (a GridNetwork) or
// Accepted (a GridSite, an InferenceProvider) while the object sets
// fields this release accepts and does not act on.
const ReasonFieldNotSupported = base.ReasonFieldNotSupported

// Condition types and reasons of a GridSite, as kubectl wait and GitOps
// health checks read them.
const (
	ConditionDiscovered = gridsite.ConditionDiscovered
	ConditionConnected  = gridsite.ConditionConnected
	ReasonSiteLeft      = gridsite.ReasonSiteLeft
	ReasonNotDiscovered = gridsite.ReasonNotDiscovered
	ReasonNetworkAbsent = gridsite.ReasonNetworkAbsent
)

// Reasons of an InferenceProvider's Hosted condition.
const (
	ConditionHosted       = provider.ConditionHosted
	ReasonSiteSelected    = provider.ReasonSiteSelected
	ReasonSiteNotSelected = provider.ReasonSiteNotSelected
)

// Draining is True while the provider's owner drains it
// (trafficPolicy.drain): every overlay lists it existing_only.
const (
	ConditionDraining    = provider.ConditionDraining
	ReasonDrainRequested = provider.ReasonDrainRequested
)

// The MetricsScraped condition of a provider with spec.metricsConfig:
// whether the agent reads its load signals, and if not, why.
const (
	ConditionMetricsScraped = provider.ConditionMetricsScraped
	ReasonScraped           = provider.ReasonScraped
	ReasonScrapeFailed      = provider.ReasonScrapeFailed
	ReasonNoSignalNames     = provider.ReasonNoSignalNames
)

// Defaults of the signals collection.
const (
	DefaultSignalsInterval = signalcollect.DefaultSignalsInterval
	// DefaultScrapeMaxBytes bounds a provider's metrics body.
	DefaultScrapeMaxBytes = signalcollect.DefaultScrapeMaxBytes
)

// PollMaxBytes bounds a peer's answer to a poll of its signals, as
// upstream's relay does.
const PollMaxBytes = signalcollect.PollMaxBytes
