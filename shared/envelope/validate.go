package envelope

import (
	"errors"
	"fmt"
	"regexp"
	"time"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
)

// DefaultMaxBytes is the default size bound: the Kubernetes object limit,
// which the envelope shares with the bare overlay copy in the same ConfigMap.
const DefaultMaxBytes = 1 << 20

// Options tells Validate what to expect.
type Options struct {
	// MaxBytes bounds the payload size; 0 means DefaultMaxBytes.
	MaxBytes int
	// Expect holds the scope this consumer serves. An empty field is not
	// checked, so a tool can validate an envelope for any gateway.
	Expect Scope
	// AcceptLegacy accepts a bare overlay without an envelope, as the
	// gateway does for producers that predate the envelope. Its revision is
	// the computed digest.
	AcceptLegacy bool
}

// Result describes an accepted envelope.
type Result struct {
	// Revision is the content-addressed revision (64 lowercase hex).
	Revision string
	// SchemaVersion is empty for a legacy payload.
	SchemaVersion string
	// Scope is what the envelope claims; a legacy payload has only Network
	// and LocalSite.
	Scope Scope
	// Legacy is true for a bare overlay accepted with Options.AcceptLegacy.
	Legacy bool
	// CandidateCount is the number of routing candidates; zero is a valid,
	// authoritative overlay that withdraws every route.
	CandidateCount int
	// Provenance is zero for a legacy payload or an envelope without one.
	// RenderedAt is zero when rendered_at is absent or not RFC 3339.
	Provenance Provenance
}

var (
	schemaVersionPattern = regexp.MustCompile(`^1(\.(0|[1-9][0-9]*)){0,2}$`)
	hexDigestPattern     = regexp.MustCompile(`^[0-9a-f]{64}$`)
)

// Validate decides whether a consumer accepts data, reaching the Praxis
// gateway's decision and reason for every contract fixture. Checks run in a
// fixed order and the first failure decides the reason:
//
//  1. size (oversized)
//  2. JSON syntax, duplicate names, invalid UTF-8, top level not an object
//     (malformed_structure)
//  3. schema_version absent (missing_schema_version, or legacy_payload for a
//     bare overlay unless AcceptLegacy), not 1.x (unsupported_schema_version)
//  4. member types and required fields (malformed_structure)
//  5. scope: against Options.Expect and against the overlay (scope_mismatch)
//  6. recomputed digest against content_digest (digest_mismatch)
//  7. revision against content_digest (revision_digest_mismatch)
//
// The digest is recomputed before revision and content_digest are compared,
// so a tampered content_digest is reported as digest_mismatch, as the
// gateway does. The returned error is always a *Rejection.
func Validate(data []byte, opts Options) (Result, error) {
	res, rej := validate(data, opts)
	if rej != nil {
		return Result{}, rej
	}
	return res, nil
}

// RejectionReason returns the reason carried by err, or "" when err is not
// a rejection.
func RejectionReason(err error) Reason {
	var rej *Rejection
	if errors.As(err, &rej) {
		return rej.Reason
	}
	return ""
}

// overlayMembers are the overlay members that the digest covers. The bare
// legacy payload has them at the top level.
type overlayMembers struct {
	Network         jsontext.Value `json:"network"`
	LocalSite       jsontext.Value `json:"local_site"`
	Candidates      candidateList  `json:"candidates"`
	SelectionPolicy jsontext.Value `json:"selection_policy"`
}

// wireTop is the envelope decoded in one pass: small members typed, the
// overlay's digested members kept raw. If it does not decode, diagnose
// works out the reason from the raw top level.
type wireTop struct {
	SchemaVersion  jsontext.Value  `json:"schema_version"`
	Revision       *wireRevision   `json:"revision"`
	ContentDigest  *wireDigest     `json:"content_digest"`
	Scope          *Scope          `json:"scope"`
	Provenance     *wireProvenance `json:"provenance"`
	Overlay        *overlayMembers `json:"overlay"`
	overlayMembers `json:",inline"`
}

// rawTop captures every top-level member raw, so that the schema version
// is judged before anything else is interpreted: a 3.x envelope may be
// shaped differently and must be reported as unsupported, not malformed.
type rawTop struct {
	SchemaVersion jsontext.Value `json:"schema_version"`
	Revision      jsontext.Value `json:"revision"`
	ContentDigest jsontext.Value `json:"content_digest"`
	Scope         jsontext.Value `json:"scope"`
	Overlay       jsontext.Value `json:"overlay"`
	Candidates    jsontext.Value `json:"candidates"` // a bare legacy overlay's
}

type wireRevision struct {
	Kind      string `json:"kind"`
	Algorithm string `json:"algorithm"`
	Value     string `json:"value"`
}

type wireDigest struct {
	Algorithm string `json:"algorithm"`
	Value     string `json:"value"`
}

type wireProvenance struct {
	Producer         string `json:"producer"`
	ProducerVersion  string `json:"producer_version"`
	SourceName       string `json:"source_name"`
	SourceUID        string `json:"source_uid"`
	SourceGeneration int64  `json:"source_generation"`
	RenderedAt       string `json:"rendered_at"`
}

type wireSelectionPolicy struct {
	Mode *string `json:"mode"`
}

func unmarshal(data []byte, v any) error {
	// The defaults of encoding/json/v2 are what the contract needs:
	// duplicate member names and invalid UTF-8 are errors, names match
	// case-sensitively, and unknown members are ignored.
	return json.Unmarshal(data, v)
}

func present(v jsontext.Value) bool {
	return len(v) > 0 && v.Kind() != 'n'
}

func validate(data []byte, opts Options) (Result, *Rejection) {
	maxBytes := opts.MaxBytes
	if maxBytes <= 0 {
		maxBytes = DefaultMaxBytes
	}
	if len(data) > maxBytes {
		return Result{}, reject(ReasonOversized, "payload is %d bytes, limit is %d", len(data), maxBytes)
	}

	var top wireTop
	if !fastDecode(data, &top) {
		top = wireTop{}
		if err := decodeWithCandidates(data, &top, decodeOptions{limitDepth: true}); err != nil {
			// Too deep for the gateway's parser comes first, as it does there.
			if rej := checkDepth(data); rej != nil {
				return Result{}, rej
			}
			return Result{}, diagnose(data, err)
		}
	}
	var overlayCandidates []byte
	if top.Overlay != nil {
		overlayCandidates = top.Overlay.Candidates.raw
	}
	if rej := checkDepth(data, top.Candidates.raw, overlayCandidates); rej != nil {
		return Result{}, rej
	}
	hasEnvelopeMembers := top.Revision != nil || top.ContentDigest != nil || top.Scope != nil || top.Overlay != nil
	legacy := isBareOverlay(hasEnvelopeMembers, top.Candidates.raw != nil)
	schema, rej := checkSchemaVersion(top.SchemaVersion, legacy, opts.AcceptLegacy)
	if rej != nil {
		return Result{}, rej
	}
	if legacy && schema == "" {
		return validateLegacy(top.overlayMembers, opts.Expect)
	}

	env, rej := decodeEnvelope(top)
	if rej != nil {
		return Result{}, rej
	}

	if rej := checkScope(env.scope, opts.Expect, true); rej != nil {
		return Result{}, rej
	}
	if env.scope.Network != env.overlayNetwork {
		return Result{}, reject(ReasonScopeMismatch, "scope.network %s differs from overlay.network %s", quote(env.scope.Network), quote(env.overlayNetwork))
	}
	if env.scope.LocalSite != env.overlayLocalSite {
		return Result{}, reject(ReasonScopeMismatch, "scope.local_site %s differs from overlay.local_site %s", quote(env.scope.LocalSite), quote(env.overlayLocalSite))
	}

	computed, err := env.digest.digest()
	if err != nil {
		return Result{}, reject(ReasonMalformedStructure, "overlay: %v", err)
	}
	if computed != env.contentDigest {
		return Result{}, reject(ReasonDigestMismatch, "content_digest is %s, overlay digests to %s", env.contentDigest, computed)
	}
	if env.revision != env.contentDigest {
		return Result{}, reject(ReasonRevisionDigestMismatch, "revision %s differs from content_digest %s", env.revision, env.contentDigest)
	}

	return Result{
		Revision:       computed,
		SchemaVersion:  schema,
		Scope:          env.scope,
		CandidateCount: env.candidates,
		Provenance:     env.provenance,
	}, nil
}

// diagnose names the reason for an envelope that did not decode in one
// pass. The schema version decides first; otherwise the document is
// malformed, and decodeErr says where.
func diagnose(data []byte, decodeErr error) *Rejection {
	var top rawTop
	if err := unmarshal(data, &top); err != nil {
		return reject(ReasonMalformedStructure, "not a JSON object: %v", err)
	}
	hasEnvelopeMembers := top.Revision != nil || top.ContentDigest != nil || top.Scope != nil || top.Overlay != nil
	legacy := isBareOverlay(hasEnvelopeMembers, top.Candidates != nil)
	// A legacy payload that is accepted would be judged malformed below.
	if _, rej := checkSchemaVersion(top.SchemaVersion, legacy, false); rej != nil && rej.Reason != ReasonLegacyPayload {
		return rej
	}
	// The candidate walk explains its own findings.
	var rej *Rejection
	if errors.As(decodeErr, &rej) {
		return rej
	}
	return reject(ReasonMalformedStructure, "%s", describeDecodeError(decodeErr))
}

// isBareOverlay recognises the pre-envelope payload: overlay members at
// the top level and none of the envelope's. An envelope that only lacks
// its schema_version is not one: it is missing_schema_version.
func isBareOverlay(hasEnvelopeMembers, hasCandidates bool) bool {
	return hasCandidates && !hasEnvelopeMembers
}

// describeDecodeError says where a document departs from the envelope's
// shape, in JSON terms rather than the decoder's Go types.
func describeDecodeError(err error) string {
	var semantic *json.SemanticError
	if errors.As(err, &semantic) && semantic.JSONPointer != "" {
		if semantic.JSONKind != 0 {
			return fmt.Sprintf("%s has the wrong type (JSON %s)", semantic.JSONPointer, semantic.JSONKind)
		}
		return fmt.Sprintf("%s is malformed", semantic.JSONPointer)
	}
	return err.Error()
}

// checkSchemaVersion returns the envelope's schema version. legacy says
// whether the document is a bare overlay (isBareOverlay); one allowed by
// acceptLegacy returns "" and no rejection.
func checkSchemaVersion(raw jsontext.Value, legacy, acceptLegacy bool) (string, *Rejection) {
	if !present(raw) {
		switch {
		case legacy && acceptLegacy:
			return "", nil
		case legacy:
			return "", reject(ReasonLegacyPayload, "bare overlay without an envelope (legacy payloads are not accepted)")
		default:
			return "", reject(ReasonMissingSchemaVersion, "schema_version is missing")
		}
	}
	var schema string
	if err := unmarshal(raw, &schema); err != nil {
		return "", reject(ReasonMalformedStructure, "schema_version is not a string")
	}
	if !schemaVersionPattern.MatchString(schema) {
		return "", reject(ReasonUnsupportedSchemaVersion, "schema_version %s is not 1.x", quote(schema))
	}
	return schema, nil
}

func validateLegacy(members overlayMembers, expect Scope) (Result, *Rejection) {
	in, count, rej := members.decode()
	if rej != nil {
		return Result{}, rej
	}
	scope := Scope{Network: in.network, LocalSite: in.localSite}
	// A bare overlay names no gateway or namespace, so only network and
	// local site can be held against what this consumer serves.
	if rej := checkScope(scope, Scope{Network: expect.Network, LocalSite: expect.LocalSite}, false); rej != nil {
		return Result{}, rej
	}
	revision, err := in.digest()
	if err != nil {
		return Result{}, reject(ReasonMalformedStructure, "overlay: %v", err)
	}
	return Result{Revision: revision, Scope: scope, Legacy: true, CandidateCount: count}, nil
}

func checkScope(got, expect Scope, envelope bool) *Rejection {
	checks := []struct {
		field     string
		got, want string
	}{
		{"network", got.Network, expect.Network},
		{"gateway", got.Gateway, expect.Gateway},
		{"namespace", got.Namespace, expect.Namespace},
		{"local_site", got.LocalSite, expect.LocalSite},
	}
	prefix := "overlay."
	if envelope {
		prefix = "scope."
	}
	for _, c := range checks {
		if c.want != "" && c.got != c.want {
			return reject(ReasonScopeMismatch, "%s%s is %s, expected %s", prefix, c.field, quote(c.got), quote(c.want))
		}
	}
	return nil
}

// decodedEnvelope is the typed view of an envelope that passed the
// structural checks.
type decodedEnvelope struct {
	revision         string
	contentDigest    string
	scope            Scope
	provenance       Provenance
	overlayNetwork   string
	overlayLocalSite string
	candidates       int
	digest           digestInput
}

func decodeEnvelope(top wireTop) (decodedEnvelope, *Rejection) {
	var env decodedEnvelope

	rev := top.Revision
	if rev == nil || rev.Kind != "content_addressed" || rev.Algorithm != "sha256" || !hexDigestPattern.MatchString(rev.Value) {
		return env, reject(ReasonMalformedStructure, "revision must be content_addressed sha256 with 64 lowercase hex digits")
	}
	env.revision = rev.Value

	cd := top.ContentDigest
	if cd == nil || cd.Algorithm != "sha256" || !hexDigestPattern.MatchString(cd.Value) {
		return env, reject(ReasonMalformedStructure, "content_digest must be sha256 with 64 lowercase hex digits")
	}
	env.contentDigest = cd.Value

	if s := top.Scope; s == nil || s.Network == "" || s.Gateway == "" || s.Namespace == "" || s.LocalSite == "" {
		return env, reject(ReasonMalformedStructure, "scope needs network, gateway, namespace and local_site")
	}
	env.scope = *top.Scope

	if p := top.Provenance; p != nil {
		env.provenance = Provenance{
			Producer:         p.Producer,
			ProducerVersion:  p.ProducerVersion,
			SourceName:       p.SourceName,
			SourceUID:        p.SourceUID,
			SourceGeneration: p.SourceGeneration,
		}
		// rendered_at feeds the render-to-disk latency only; an unparsable
		// timestamp is not the gateway's business, so it is not a rejection.
		if t, err := time.Parse(time.RFC3339, p.RenderedAt); err == nil {
			env.provenance.RenderedAt = t
		}
	}

	if top.Overlay == nil {
		return env, reject(ReasonMalformedStructure, "overlay is not an object")
	}
	in, count, rej := top.Overlay.decode()
	if rej != nil {
		return env, rej
	}
	env.overlayNetwork, env.overlayLocalSite = in.network, in.localSite
	env.candidates = count
	env.digest = in.digestInput
	return env, nil
}

type decodedOverlay struct {
	digestInput
	network, localSite string
}

// decode checks the digested members' types and required fields.
func (m overlayMembers) decode() (decodedOverlay, int, *Rejection) {
	var out decodedOverlay
	if !present(m.Network) || unmarshal(m.Network, &out.network) != nil || out.network == "" {
		return out, 0, reject(ReasonMalformedStructure, "overlay.network must be a non-empty string")
	}
	if !present(m.LocalSite) || unmarshal(m.LocalSite, &out.localSite) != nil || out.localSite == "" {
		return out, 0, reject(ReasonMalformedStructure, "overlay.local_site must be a non-empty string")
	}
	if m.Candidates.raw == nil {
		return out, 0, reject(ReasonMalformedStructure, "overlay.candidates must be an array")
	}
	count := m.Candidates.count
	if m.SelectionPolicy != nil {
		var p wireSelectionPolicy
		if m.SelectionPolicy.Kind() != '{' || unmarshal(m.SelectionPolicy, &p) != nil || p.Mode == nil || *p.Mode == "" || checkNumbers(m.SelectionPolicy) != nil {
			return out, 0, reject(ReasonMalformedStructure, "overlay.selection_policy must be an object with a mode")
		}
	}
	out.digestInput = digestInput{
		Network:         m.Network,
		LocalSite:       m.LocalSite,
		Candidates:      m.Candidates.canonical,
		SelectionPolicy: m.SelectionPolicy,
	}
	return out, count, nil
}
