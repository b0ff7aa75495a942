package overlaysync_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/go-json-experiment/json"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gridsync/gridsync/shared/envelope"
	"github.com/gridsync/gridsync/shared/overlaysync"
)

const fixtureDir = "../envelope/testdata/overlay-contract/v1"

func fixture(t *testing.T, name string) []byte {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(fixtureDir, name))
	require.NoError(t, err)
	return data
}

// Every fixture of the gateway's contract, delivered as a real ConfigMap
// update through the API server: accepted ones reach the file, rejected
// ones leave the last-known-good in place with the manifest's reason.
func TestEveryFixtureDecisionThroughConfigMapUpdates(t *testing.T) {
	g := newGateway(t)
	r := g.start(g.options())

	var manifest struct {
		Fixtures map[string]struct {
			Expected string `json:"expected"`
			Reason   string `json:"reason"`
			Revision string `json:"revision"`
		} `json:"fixtures"`
	}
	require.NoError(t, json.Unmarshal(fixture(t, "manifest.json"), &manifest))

	good := fixture(t, "valid-multi-candidate.json")
	st := r.waitObserved(t, g.putEnvelope(good))
	require.Equal(t, overlaysync.StateReady, st.State)
	require.Equal(t, string(good), readOutput(t, g.output()))

	order := []string{
		"invalid-digest.json", "local-site-scope-mismatch.json", "network-scope-mismatch.json",
		"revision-digest-disagreement.json", "unsupported-schema-version.json", "malformed-envelope.json",
		"hybrid-missing-schema.json", "legacy-payload.json", "timestamp-change-same-revision.json",
		"unknown-additive-field.json", "valid-minimal.json", "valid-multi-candidate.json",
	}
	require.Len(t, order, len(manifest.Fixtures), "every manifest fixture is delivered")
	for _, name := range order {
		want := manifest.Fixtures[name]
		t.Run(name, func(t *testing.T) {
			writesBefore := r.metric(t, "grid_overlay_sync_file_writes_total", "outcome", "success")
			st := r.waitObserved(t, g.putEnvelope(fixture(t, name)))
			// The file never changes: the one accepted revision of this
			// gateway's scope is already on disk.
			assert.Equal(t, string(good), readOutput(t, g.output()))
			assert.Equal(t, writesBefore, r.metric(t, "grid_overlay_sync_file_writes_total", "outcome", "success"), "nothing written")
			assert.True(t, st.Ready, "the last-known-good keeps the gateway ready")
			switch {
			case name == "valid-minimal.json":
				// Valid, but for another gateway's scope (test-net).
				assert.Equal(t, string(envelope.ReasonScopeMismatch), st.DegradedReason)
			case want.Expected == "accept":
				assert.Equal(t, want.Revision, st.ObservedRevision)
				assert.Equal(t, overlaysync.StateReady, st.State)
				assert.Empty(t, st.DegradedReason)
			case want.Expected == "accept_legacy":
				assert.Equal(t, string(envelope.ReasonLegacyPayload), st.DegradedReason)
			default:
				assert.Empty(t, st.ObservedRevision, "a rejected envelope has no trusted revision")
				assert.Equal(t, want.Reason, st.DegradedReason)
				assert.Equal(t, overlaysync.StateReadyDegraded, st.State)
				assert.Equal(t, want.Reason, st.LastRejectionReason)
			}
		})
	}
}

func TestDeliversTheSelectionPolicyContract(t *testing.T) {
	g := newGatewayFor(t, envelope.Scope{Network: "test-net", Gateway: "gw", Namespace: "ns", LocalSite: "site-a"})
	r := g.start(g.options())
	doc := fixture(t, "valid-selection-policy.PR84.json")
	st := r.waitObserved(t, g.putEnvelope(doc))
	assert.Equal(t, overlaysync.StateReady, st.State)
	assert.Equal(t, "d3321586b5e414b8bd80c07a9d16ac10dce38d6810e3591a8526a6bdd0639007", st.WrittenRevision)
	assert.Equal(t, string(doc), readOutput(t, g.output()))
}
