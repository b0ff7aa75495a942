package envelope

import "fmt"

// Reason is why an envelope was rejected. The set is closed: every value is
// listed in Reasons, so it is safe to use as a metric label.
type Reason string

// The rejection reasons. The first six are the Praxis gateway's own
// vocabulary and must keep their spelling.
const (
	ReasonMalformedStructure       Reason = "malformed_structure"
	ReasonMissingSchemaVersion     Reason = "missing_schema_version"
	ReasonUnsupportedSchemaVersion Reason = "unsupported_schema_version"
	ReasonScopeMismatch            Reason = "scope_mismatch"
	ReasonRevisionDigestMismatch   Reason = "revision_digest_mismatch"
	ReasonDigestMismatch           Reason = "digest_mismatch"

	// ReasonOversized: the payload is larger than the configured bound. It is
	// checked before anything is parsed.
	ReasonOversized Reason = "oversized"
	// ReasonLegacyPayload: a bare overlay without an envelope, which the
	// gateway accepts for old producers but a sidecar delivers only when told
	// to (Options.AcceptLegacy).
	ReasonLegacyPayload Reason = "legacy_payload"
)

// Reasons returns every rejection reason, for pre-initialising metrics.
func Reasons() []Reason {
	return []Reason{
		ReasonOversized,
		ReasonMalformedStructure,
		ReasonMissingSchemaVersion,
		ReasonUnsupportedSchemaVersion,
		ReasonLegacyPayload,
		ReasonScopeMismatch,
		ReasonDigestMismatch,
		ReasonRevisionDigestMismatch,
	}
}

// Rejection is the error Validate returns for an envelope it refuses.
// Reason is bounded; Detail explains it to a person and never contains
// payload bytes beyond short, truncated identifiers.
type Rejection struct {
	Reason Reason
	Detail string
}

func (r *Rejection) Error() string {
	return fmt.Sprintf("overlay envelope rejected (%s): %s", r.Reason, r.Detail)
}

// maxDetail bounds Detail, which may embed a decoder error message.
const maxDetail = 256

func reject(reason Reason, format string, args ...any) *Rejection {
	detail := fmt.Sprintf(format, args...)
	if len(detail) > maxDetail {
		detail = detail[:maxDetail] + "..."
	}
	return &Rejection{Reason: reason, Detail: detail}
}

// quote renders a value from the payload for an error message: quoted and
// cut short, so that a hostile payload cannot flood logs through Detail.
func quote(s string) string {
	const limit = 64
	if len(s) > limit {
		return fmt.Sprintf("%q...", s[:limit])
	}
	return fmt.Sprintf("%q", s)
}
