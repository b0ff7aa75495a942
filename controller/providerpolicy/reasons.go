package providerpolicy

import "github.com/gridsync/gridsync/trust/endpointtls"

// Every reason an InferenceProvider's status can carry: its phase's (which
// its Ready condition and Events repeat) and those of its other
// conditions. They are what users see and match on: a string never
// changes, and none is composed at run time, so that this list, Reasons()
// and the table in README.md name them all.
const (
	// The phase, in the order of the chain (Assess).
	ReasonSiteNotSelected                      = "SiteNotSelected"
	ReasonUnsupportedAuthStrategy              = "UnsupportedAuthStrategy"
	ReasonCredentialSecretRefInvalid           = "CredentialSecretRefInvalid"
	ReasonCredentialSecretMissing              = "CredentialSecretMissing"
	ReasonCredentialSecretKeyMissing           = "CredentialSecretKeyMissing"
	ReasonCredentialSecretValueInvalid         = "CredentialSecretValueInvalid"
	ReasonAccessPolicyInvalid                  = "AccessPolicyInvalid"
	ReasonHealthCheckTLSSecretMissing          = "HealthCheckTlsSecretMissing"
	ReasonHealthCheckTLSKeyMissing             = "HealthCheckTlsKeyMissing"
	ReasonHealthCheckTLSMaterialInvalid        = "HealthCheckTlsMaterialInvalid"
	ReasonHealthCheckTLSIdentityMismatch       = "HealthCheckTlsIdentityMismatch"
	ReasonHealthCheckAuthCredentialUnavailable = "HealthCheckAuthCredentialUnavailable"
	ReasonHealthCheckPlaintextRefused          = "HealthCheckPlaintextRefused"
	ReasonHealthCheckFailing                   = "HealthCheckFailing"
	ReasonHealthCheckFailed                    = "HealthCheckFailed"
	ReasonReady                                = "Ready"

	// The Accepted condition (shared with GridSites: the controller's
	// AcceptedCondition writes these strings).
	ReasonAccepted          = "Accepted"
	ReasonFieldNotSupported = "FieldNotSupported"

	// The Hosted condition, present while spec.siteSelector is set
	// (False is ReasonSiteNotSelected, as the phase).
	ReasonSiteSelected = "SiteSelected"

	// The Draining condition, present while trafficPolicy.drain is set.
	ReasonDrainRequested = "DrainRequested"

	// The MetricsScraped condition, present for a provider with
	// spec.metricsConfig once the collector has tried.
	ReasonScraped                          = "Scraped"
	ReasonScrapeFailed                     = "ScrapeFailed"
	ReasonNoSignalNames                    = "NoSignalNames"
	ReasonMetricsTLSSecretMissing          = "MetricsTlsSecretMissing"
	ReasonMetricsTLSKeyMissing             = "MetricsTlsKeyMissing"
	ReasonMetricsTLSMaterialInvalid        = "MetricsTlsMaterialInvalid"
	ReasonMetricsTLSIdentityMismatch       = "MetricsTlsIdentityMismatch"
	ReasonMetricsAuthCredentialUnavailable = "MetricsAuthCredentialUnavailable"
	ReasonMetricsPlaintextRefused          = "MetricsPlaintextRefused"
)

// Reasons lists every reason of an InferenceProvider once: the phase's in
// the order of the chain, then the conditions' (Accepted, Hosted,
// Draining, MetricsScraped). README.md's table lists the same, in the
// same order (a test compares them).
func Reasons() []string {
	return []string{
		ReasonSiteNotSelected,
		ReasonUnsupportedAuthStrategy,
		ReasonCredentialSecretRefInvalid,
		ReasonCredentialSecretMissing,
		ReasonCredentialSecretKeyMissing,
		ReasonCredentialSecretValueInvalid,
		ReasonAccessPolicyInvalid,
		ReasonHealthCheckTLSSecretMissing,
		ReasonHealthCheckTLSKeyMissing,
		ReasonHealthCheckTLSMaterialInvalid,
		ReasonHealthCheckTLSIdentityMismatch,
		ReasonHealthCheckAuthCredentialUnavailable,
		ReasonHealthCheckPlaintextRefused,
		ReasonHealthCheckFailing,
		ReasonHealthCheckFailed,
		ReasonReady,
		ReasonAccepted,
		ReasonFieldNotSupported,
		ReasonSiteSelected,
		ReasonDrainRequested,
		ReasonScraped,
		ReasonScrapeFailed,
		ReasonNoSignalNames,
		ReasonMetricsTLSSecretMissing,
		ReasonMetricsTLSKeyMissing,
		ReasonMetricsTLSMaterialInvalid,
		ReasonMetricsTLSIdentityMismatch,
		ReasonMetricsAuthCredentialUnavailable,
		ReasonMetricsPlaintextRefused,
	}
}

// Refusal is why a request to a provider's endpoint (a health check, a
// metrics scrape) was not sent at all: its TLS material (endpointtls) or
// its credential cannot be used, or would travel in plaintext. Each kind
// of request reports it with its own reason (HealthCheckReason,
// MetricsReason).
type Refusal string

// The refusals; the first four are endpointtls's reasons.
const (
	RefusalTLSSecretMissing          = Refusal(endpointtls.SecretMissing)
	RefusalTLSKeyMissing             = Refusal(endpointtls.KeyMissing)
	RefusalTLSMaterialInvalid        = Refusal(endpointtls.MaterialInvalid)
	RefusalTLSIdentityMismatch       = Refusal(endpointtls.IdentityMismatch)
	RefusalAuthCredentialUnavailable = Refusal("AuthCredentialUnavailable")
	RefusalPlaintext                 = Refusal("PlaintextRefused")
)

// refusals gives each refusal its reason on the provider (health check:
// Degraded) and on its MetricsScraped condition.
var refusals = []struct {
	refusal              Refusal
	healthCheck, metrics string
}{
	{RefusalTLSSecretMissing, ReasonHealthCheckTLSSecretMissing, ReasonMetricsTLSSecretMissing},
	{RefusalTLSKeyMissing, ReasonHealthCheckTLSKeyMissing, ReasonMetricsTLSKeyMissing},
	{RefusalTLSMaterialInvalid, ReasonHealthCheckTLSMaterialInvalid, ReasonMetricsTLSMaterialInvalid},
	{RefusalTLSIdentityMismatch, ReasonHealthCheckTLSIdentityMismatch, ReasonMetricsTLSIdentityMismatch},
	{RefusalAuthCredentialUnavailable, ReasonHealthCheckAuthCredentialUnavailable, ReasonMetricsAuthCredentialUnavailable},
	{RefusalPlaintext, ReasonHealthCheckPlaintextRefused, ReasonMetricsPlaintextRefused},
}

// TLSRefusal is the refusal of material endpointtls could not use; false
// for a reason it does not know (the caller fails the request instead).
func TLSRefusal(reason endpointtls.Reason) (Refusal, bool) {
	switch reason {
	case endpointtls.SecretMissing, endpointtls.KeyMissing, endpointtls.MaterialInvalid, endpointtls.IdentityMismatch:
		return Refusal(reason), true
	}
	return "", false
}

// HealthCheckReason is the provider's reason while its health check is
// not sent for r. Only the constants above are ever refusals; anything
// else would be a failing check, and says so.
func HealthCheckReason(r Refusal) string {
	for _, x := range refusals {
		if x.refusal == r {
			return x.healthCheck
		}
	}
	return ReasonHealthCheckFailing
}

// MetricsReason is the provider's MetricsScraped reason while its scrape
// is not sent for r; anything but the constants is a failed scrape.
func MetricsReason(r Refusal) string {
	for _, x := range refusals {
		if x.refusal == r {
			return x.metrics
		}
	}
	return ReasonScrapeFailed
}
