package envelope_test

import (
	"bytes"
	"testing"
	"time"

	"github.com/go-json-experiment/json"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gridsync/gridsync/shared/envelope"
)

// parts decodes a fixture into the producer's inputs.
func parts(t *testing.T, fixture string) (envelope.Overlay, envelope.Scope, envelope.Provenance) {
	t.Helper()
	var doc struct {
		Scope      envelope.Scope      `json:"scope"`
		Provenance envelope.Provenance `json:"provenance"`
		Overlay    envelope.Overlay    `json:"overlay"`
	}
	require.NoError(t, json.Unmarshal(readFixture(t, fixture), &doc))
	return doc.Overlay, doc.Scope, doc.Provenance
}

func TestBuildWritesTheOperatorsBytes(t *testing.T) {
	for _, fixture := range []string{"valid-minimal.json", "valid-multi-candidate.json", "valid-selection-policy.PR84.json"} {
		t.Run(fixture, func(t *testing.T) {
			overlay, scope, provenance := parts(t, fixture)
			got, revision, err := envelope.Build(overlay, scope, provenance)
			require.NoError(t, err)
			// One fixture was saved with a trailing newline by an editor; the
			// operator writes none.
			want := bytes.TrimSuffix(readFixture(t, fixture), []byte("\n"))
			assert.Equal(t, string(want), string(got))
			assert.Equal(t, expectedDecisions(t)[fixture].Revision, revision)
		})
	}
}

func TestBuildThenValidateAcceptsWithTheSameRevision(t *testing.T) {
	overlay, scope, provenance := parts(t, "valid-selection-policy.PR84.json")
	doc, revision, err := envelope.Build(overlay, scope, provenance)
	require.NoError(t, err)
	res, err := envelope.Validate(doc, envelope.Options{Expect: scope})
	require.NoError(t, err)
	assert.Equal(t, revision, res.Revision)
	assert.Equal(t, envelope.SchemaVersion, res.SchemaVersion)
	assert.Equal(t, provenance.RenderedAt, res.Provenance.RenderedAt)
}

func TestBuildWritesAnEmptyCandidateListAsAnAuthoritativeOverlay(t *testing.T) {
	scope := envelope.Scope{Network: "n", Gateway: "g", Namespace: "ns", LocalSite: "s"}
	doc, revision, err := envelope.Build(envelope.Overlay{Network: "n", LocalSite: "s"}, scope, envelope.Provenance{Producer: "p"})
	require.NoError(t, err)
	assert.Contains(t, string(doc), `"candidates": []`)
	assert.NotContains(t, string(doc), "null")

	res, err := envelope.Validate(doc, envelope.Options{Expect: scope})
	require.NoError(t, err)
	assert.Equal(t, revision, res.Revision)
	assert.Zero(t, res.CandidateCount)
}

func TestBuildOmitsOptionalFieldsAndNeverEscapesHTML(t *testing.T) {
	overlay := envelope.Overlay{
		Network:   "n",
		LocalSite: "s",
		Candidates: []envelope.Candidate{{
			Kind: envelope.CandidateKindInferenceModel, Name: "m<&>", Site: "s", Cluster: "c", Fresh: false,
		}},
	}
	doc, _, err := envelope.Build(overlay, envelope.Scope{Network: "n", Gateway: "g", Namespace: "ns", LocalSite: "s"}, envelope.Provenance{})
	require.NoError(t, err)
	for _, absent := range []string{"credential", "stable_id", "score", "rank", "selection_policy", "generated_at", `\u003c`} {
		assert.NotContains(t, string(doc), absent)
	}
	assert.Contains(t, string(doc), `"name": "m<&>"`)
	assert.Contains(t, string(doc), `"fresh": false`)
	assert.False(t, bytes.HasSuffix(doc, []byte("\n")), "no trailing newline")
}

func TestBareOverlayIsTheEnvelopesOverlay(t *testing.T) {
	overlay, scope, provenance := parts(t, "valid-multi-candidate.json")
	bare, err := envelope.BareOverlay(overlay)
	require.NoError(t, err)
	_, revision, err := envelope.Build(overlay, scope, provenance)
	require.NoError(t, err)
	res, err := envelope.Validate(bare, envelope.Options{AcceptLegacy: true})
	require.NoError(t, err)
	assert.Equal(t, revision, res.Revision)
}

func TestProvenanceTimestampsAreRFC3339(t *testing.T) {
	at := time.Date(2026, 11, 30, 10, 11, 12, 345, time.UTC)
	doc, _, err := envelope.Build(envelope.Overlay{Network: "n", LocalSite: "s", GeneratedAt: at},
		envelope.Scope{Network: "n", Gateway: "g", Namespace: "ns", LocalSite: "s"},
		envelope.Provenance{RenderedAt: at})
	require.NoError(t, err)
	assert.Contains(t, string(doc), `"rendered_at": "2026-11-30T10:11:12Z"`)
	assert.Contains(t, string(doc), `"generated_at": "2026-11-30T10:11:12Z"`)
}
