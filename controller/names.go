package controller

import (
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gridsync/gridsync/api/v1alpha1"
	"github.com/gridsync/gridsync/controller/internal/base"
	"github.com/gridsync/gridsync/controller/internal/gridsite"
	"github.com/gridsync/gridsync/controller/internal/membership"
	"github.com/gridsync/gridsync/controller/internal/overlay"
	"github.com/gridsync/gridsync/controller/internal/provider"
	"github.com/gridsync/gridsync/controller/internal/signalcollect"
	"github.com/gridsync/gridsync/trust/bundle"
	"github.com/gridsync/gridsync/trust/enrol"
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

// ConditionEvictions is the network's condition on its trust bundle: the
// sites its issuer evicted; these are its reasons.
const (
	ConditionEvictions       = membership.ConditionEvictions
	ReasonNoEvictions        = membership.ReasonNoEvictions
	ReasonEvictionsCurrent   = membership.ReasonEvictionsCurrent
	ReasonEvictionsUnsigned  = membership.ReasonEvictionsUnsigned
	ReasonEvictionsNotIssuer = membership.ReasonEvictionsNotIssuer
)

// ConditionRecordsSigned says how the network's records are
// authenticated: False (NetworkUnsigned) without a grid CA, True
// (RecordsSigned) with one. ResetSiteKeyAnnotation, on a network without
// a grid CA, names the remote sites whose keys this site forgets.
const (
	ConditionRecordsSigned = membership.ConditionRecordsSigned
	ReasonRecordsSigned    = membership.ReasonRecordsSigned
	ReasonNetworkUnsigned  = membership.ReasonNetworkUnsigned
	ResetSiteKeyAnnotation = membership.ResetSiteKeyAnnotation
)

// ConditionSiteIdentity is the network's condition on this site's
// certificate; these are its reasons.
const (
	ConditionSiteIdentity         = membership.ConditionSiteIdentity
	ReasonSiteCertificateIssued   = membership.ReasonSiteCertificateIssued
	ReasonSiteCertificateCurrent  = membership.ReasonSiteCertificateCurrent
	ReasonSiteCertificateGiven    = membership.ReasonSiteCertificateGiven
	ReasonNoSiteIdentity          = membership.ReasonNoSiteIdentity
	ReasonGridCAUnreadable        = membership.ReasonGridCAUnreadable
	ReasonGridCAInvalid           = membership.ReasonGridCAInvalid
	ReasonGridCAGenerationFailed  = membership.ReasonGridCAGenerationFailed
	ReasonSiteSecretUnreadable    = membership.ReasonSiteSecretUnreadable
	ReasonSiteNameMissing         = membership.ReasonSiteNameMissing
	ReasonSiteCertificateMissing  = membership.ReasonSiteCertificateMissing
	ReasonSiteCertificateFailed   = membership.ReasonSiteCertificateFailed
	ReasonSiteSecretConflict      = membership.ReasonSiteSecretConflict
	ReasonSiteCertificateEnrolled = membership.ReasonSiteCertificateEnrolled
	ReasonSiteCertificateRenewed  = membership.ReasonSiteCertificateRenewed
	ReasonEnrollmentTokenMissing  = membership.ReasonEnrollmentTokenMissing
	ReasonEnrollmentRefused       = membership.ReasonEnrollmentRefused
	ReasonIssuerUnreachable       = membership.ReasonIssuerUnreachable
	ReasonIdentityExpired         = membership.ReasonIdentityExpired
)

// ConditionMembership is the network's SWIM condition; these are its
// reasons (and Ready's when membership keeps the network from being
// reconciled).
const (
	ConditionMembership     = membership.ConditionMembership
	ReasonSwimNotRunning    = membership.ReasonSwimNotRunning
	ReasonSwimKeyMissing    = membership.ReasonSwimKeyMissing
	ReasonSwimKeyInvalid    = membership.ReasonSwimKeyInvalid
	ReasonSwimKeyUnreadable = membership.ReasonSwimKeyUnreadable
	ReasonSwimKeyPending    = membership.ReasonSwimKeyPending
	ReasonSeedsUnresolvable = membership.ReasonSeedsUnresolvable
	ReasonGridIDConflict    = membership.ReasonGridIDConflict
	ReasonSiteCertInvalid   = membership.ReasonSiteCertInvalid
	ReasonMembershipRunning = membership.ReasonMembershipRunning
	ReasonStandby           = membership.ReasonStandby
)

// AutoDiscoverSitesLabel on a GridNetwork asks for GridSites of the
// sites discovered in it.
const AutoDiscoverSitesLabel = membership.AutoDiscoverSitesLabel

// Reasons of a gateway's overlay phase, and AnnotationOrphaned, the mark
// of an overlay ConfigMap whose gateway or network is gone.
const (
	ReasonPublished             = overlay.ReasonPublished
	ReasonNamespaceNotWatched   = overlay.ReasonNamespaceNotWatched
	ReasonConfigMapNotOwned     = overlay.ReasonConfigMapNotOwned
	ReasonConfigMapNameConflict = overlay.ReasonConfigMapNameConflict
	ReasonOverlayTooLarge       = overlay.ReasonOverlayTooLarge
	ReasonPublishFailed         = overlay.ReasonPublishFailed
	ReasonRenderFailed          = overlay.ReasonRenderFailed
	AnnotationOrphaned          = overlay.AnnotationOrphaned
)

// AnnotationSiteIdentityFingerprint is the pod-template annotation that
// rolls an opted-in gateway Deployment to a renewed site certificate;
// these are the reasons of a gateway's identityRollout status.
const (
	AnnotationSiteIdentityFingerprint = overlay.AnnotationSiteIdentityFingerprint
	ReasonIdentityRolled              = overlay.ReasonIdentityRolled
	ReasonIdentityCurrent             = overlay.ReasonIdentityCurrent
	ReasonDeploymentForbidden         = overlay.ReasonDeploymentForbidden
	ReasonDeploymentMissing           = overlay.ReasonDeploymentMissing
	ReasonDeploymentPatchFailed       = overlay.ReasonDeploymentPatchFailed
)

// Conditions and reasons of a GridNetwork's Ready and Selection (see the
// overlay package for each one's meaning).
const (
	ConditionSelection             = overlay.ConditionSelection
	ReasonWeightsNotInContract     = overlay.ReasonWeightsNotInContract
	ReasonMountsNotReconciled      = overlay.ReasonMountsNotReconciled
	ReasonPraxisConfigsNotRendered = overlay.ReasonPraxisConfigsNotRendered
	ReasonSignalsNotCollected      = overlay.ReasonSignalsNotCollected
	ReasonServingConfigFailed      = overlay.ReasonServingConfigFailed
)

// EnrolmentAuthority is the issuer's side of enrolment (see
// membership.EnrolmentAuthority): the CA of a network whose site
// certificates this site issues, read uncached through api, whose
// certificates live as the network's own do (membership.SiteLifetime)
// unless the enrolment server is given a lifetime; the sites the
// network's trust bundle evicts are refused.
func EnrolmentAuthority(api client.Reader, book *bundle.Book) enrol.CA {
	return membership.EnrolmentAuthority(api, book)
}

// OfflinePraxisConfig is one gateway's Praxis config rendered from
// manifests, without a cluster.
type OfflinePraxisConfig = overlay.OfflinePraxisConfig

// RenderPraxisConfigs renders the Praxis config of every gateway of a
// network that asks for one, as the agent would with every provider of
// the network Available, every Secret a provider names present, and no
// remote site (see overlay.RenderPraxisConfigs).
func RenderPraxisConfigs(network *v1alpha1.GridNetwork, providers []v1alpha1.InferenceProvider) []OfflinePraxisConfig {
	return overlay.RenderPraxisConfigs(network, providers)
}
