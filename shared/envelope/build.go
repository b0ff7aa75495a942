package envelope

import (
	"fmt"
	"time"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
)

// SchemaVersion is the envelope schema this package writes. Consumers
// accept any 1.x.
const SchemaVersion = "1.0.0"

// Scope says which gateway an envelope is for.
type Scope struct {
	Network   string `json:"network"`
	Gateway   string `json:"gateway"`
	Namespace string `json:"namespace"`
	LocalSite string `json:"local_site"`
}

// Provenance says who rendered an envelope from what. It is not digested.
type Provenance struct {
	Producer         string    `json:"producer"`
	ProducerVersion  string    `json:"producer_version"`
	SourceName       string    `json:"source_name"`
	SourceUID        string    `json:"source_uid"`
	SourceGeneration int64     `json:"source_generation"`
	RenderedAt       time.Time `json:"rendered_at"`
}

// Overlay is the routing state a gateway selects providers from. Field
// order is the Grid operator's key order; it is part of the byte-level
// contract (selection_policy comes before candidates).
type Overlay struct {
	Network         string           `json:"network"`
	LocalSite       string           `json:"local_site"`
	SelectionPolicy *SelectionPolicy `json:"selection_policy,omitempty"`
	// Candidates is never omitted: an empty list is an authoritative
	// overlay that withdraws every route. Order is semantic.
	Candidates  []Candidate `json:"candidates"`
	GeneratedAt time.Time   `json:"generated_at,omitzero"`
}

// Selection modes of SelectionPolicy.Mode.
const (
	SelectionDeterministic = "deterministic"
	SelectionRoundRobin    = "roundRobin"
	SelectionRandom        = "random"
)

// SelectionPolicy tells the gateway how to pick among equally ranked
// candidates. Absent means deterministic.
type SelectionPolicy struct {
	Mode string `json:"mode"`
}

// CandidateKindInferenceModel is the only candidate kind of schema 1.x.
const CandidateKindInferenceModel = "inference_model"

// Candidate is one routable model at one site and cluster. Optional fields
// are omitted, never written as null.
type Candidate struct {
	Kind           string          `json:"kind"`
	Name           string          `json:"name"`
	Site           string          `json:"site"`
	Cluster        string          `json:"cluster"`
	Fresh          bool            `json:"fresh"`
	Credential     *Credential     `json:"credential,omitempty"`
	StableID       string          `json:"stable_id,omitempty"`
	AdmissionState string          `json:"admission_state,omitempty"`
	SelectionTier  string          `json:"selection_tier,omitempty"`
	Score          *float64        `json:"score,omitempty"`
	ScoreBreakdown *ScoreBreakdown `json:"score_breakdown,omitempty"`
	Rank           *int64          `json:"rank,omitempty"`
	SelectionGroup *int64          `json:"selection_group,omitempty"`
	// SelectionWeight is the candidate's capacity weight under the
	// weightedRandom selection the network asked for: a field of this
	// producer, additive to contract 1.0.0 (whose selection modes carry no
	// weight), so a gateway that does not read it ignores it.
	SelectionWeight *int64 `json:"selection_weight,omitempty"`
}

// Credential references the Secret that holds a provider's bearer token.
// It is a reference only: token bytes never travel in an overlay.
type Credential struct {
	Strategy  string    `json:"strategy"`
	SecretRef SecretRef `json:"secretRef"`
}

// SecretRef names a key of a Secret.
type SecretRef struct {
	Name      string `json:"name"`
	Namespace string `json:"namespace"`
	Key       string `json:"key"`
}

// ScoreBreakdown explains a candidate's score.
type ScoreBreakdown struct {
	Locality    float64 `json:"locality"`
	QueueDepth  float64 `json:"queue_depth"`
	KVCache     float64 `json:"kv_cache"`
	PrefixCache float64 `json:"prefix_cache"`
	Latency     float64 `json:"latency"`
	Cost        float64 `json:"cost"`
	Total       float64 `json:"total"`
}

// envelope is the document Build writes, in the operator's key order.
type envelope struct {
	SchemaVersion string         `json:"schema_version"`
	Revision      revisionRef    `json:"revision"`
	ContentDigest contentDigest  `json:"content_digest"`
	Scope         Scope          `json:"scope"`
	Provenance    Provenance     `json:"provenance"`
	Overlay       jsontext.Value `json:"overlay"`
}

type revisionRef struct {
	Kind      string `json:"kind"`
	Algorithm string `json:"algorithm"`
	Value     string `json:"value"`
}

type contentDigest struct {
	Algorithm string `json:"algorithm"`
	Value     string `json:"value"`
}

// Build renders an envelope the way the Grid operator writes it: pretty
// JSON with a 2-space indent, no trailing newline, keys in contract order,
// no HTML escaping. It returns the document and its revision. The digest is
// computed from the overlay's own serialised bytes by the same function
// Validate uses, so the two sides cannot drift apart.
func Build(overlay Overlay, scope Scope, provenance Provenance) ([]byte, string, error) {
	overlay = normalise(overlay)
	provenance.RenderedAt = wholeSecondsUTC(provenance.RenderedAt)
	raw, err := json.Marshal(overlay)
	if err != nil {
		return nil, "", fmt.Errorf("encode overlay: %w", err)
	}
	revision, err := Digest(raw)
	if err != nil {
		return nil, "", fmt.Errorf("digest overlay: %w", err)
	}
	doc := envelope{
		SchemaVersion: SchemaVersion,
		Revision:      revisionRef{Kind: "content_addressed", Algorithm: "sha256", Value: revision},
		ContentDigest: contentDigest{Algorithm: "sha256", Value: revision},
		Scope:         scope,
		Provenance:    provenance,
		Overlay:       raw,
	}
	out, err := json.Marshal(doc, jsontext.Multiline(true), jsontext.WithIndent("  "))
	if err != nil {
		return nil, "", fmt.Errorf("encode envelope: %w", err)
	}
	return out, revision, nil
}

// BareOverlay renders the overlay alone, the routing-config.json copy for
// consumers that predate the envelope, formatted like the envelope.
func BareOverlay(overlay Overlay) ([]byte, error) {
	out, err := json.Marshal(normalise(overlay), jsontext.Multiline(true), jsontext.WithIndent("  "))
	if err != nil {
		return nil, fmt.Errorf("encode overlay: %w", err)
	}
	return out, nil
}

// normalise makes an overlay serialise as the operator writes it: an empty
// candidate list rather than none, timestamps in whole seconds UTC.
func normalise(overlay Overlay) Overlay {
	if overlay.Candidates == nil {
		overlay.Candidates = []Candidate{}
	}
	overlay.GeneratedAt = wholeSecondsUTC(overlay.GeneratedAt)
	return overlay
}

// wholeSecondsUTC formats as the operator's timestamps do
// (2026-07-29T00:00:00Z): RFC 3339, UTC, no fraction.
func wholeSecondsUTC(t time.Time) time.Time {
	if t.IsZero() {
		return t
	}
	return t.UTC().Truncate(time.Second)
}
