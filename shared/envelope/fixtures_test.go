package envelope_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/go-json-experiment/json"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gridsync/gridsync/shared/envelope"
)

// The gateway's contract fixtures, copied verbatim from the Praxis AI
// repository (tests/fixtures/overlay-contract/v1) with their manifest.
const fixtureDir = "testdata/overlay-contract/v1"

type manifest struct {
	ContractVersion string                     `json:"contract_version"`
	Fixtures        map[string]manifestFixture `json:"fixtures"`
}

type manifestFixture struct {
	Expected      string `json:"expected"`
	Reason        string `json:"reason"`
	Revision      string `json:"revision"`
	ContentDigest string `json:"content_digest"`
}

// Scopes the fixtures were written for: two small ones use test-net, the
// rest the glb-demo network.
var (
	testNetScope = envelope.Scope{Network: "test-net", Gateway: "gw", Namespace: "ns", LocalSite: "site-a"}
	glbDemoScope = envelope.Scope{Network: "glb-demo", Gateway: "glb-demo-edge-gateway", Namespace: "grid-system", LocalSite: "east-edge"}
)

func fixtureScope(name string) envelope.Scope {
	if strings.HasPrefix(name, "valid-minimal") || strings.HasPrefix(name, "valid-selection-policy") {
		return testNetScope
	}
	return glbDemoScope
}

func readFixture(t testing.TB, name string) []byte {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(fixtureDir, name))
	require.NoError(t, err)
	return data
}

func loadManifest(t *testing.T) manifest {
	t.Helper()
	var m manifest
	require.NoError(t, json.Unmarshal(readFixture(t, "manifest.json"), &m))
	return m
}

// expectedDecisions adds the one fixture the manifest does not list: the
// newer selection-policy contract (Praxis PR 84), accepted with this
// revision.
func expectedDecisions(t *testing.T) map[string]manifestFixture {
	decisions := loadManifest(t).Fixtures
	decisions["valid-selection-policy.PR84.json"] = manifestFixture{
		Expected: "accept",
		Revision: "d3321586b5e414b8bd80c07a9d16ac10dce38d6810e3591a8526a6bdd0639007",
	}
	return decisions
}

func TestEveryFixtureHasAnExpectedDecision(t *testing.T) {
	decisions := expectedDecisions(t)
	files, err := filepath.Glob(filepath.Join(fixtureDir, "*.json"))
	require.NoError(t, err)
	require.NotEmpty(t, files)
	for _, f := range files {
		name := filepath.Base(f)
		if name == "manifest.json" {
			continue
		}
		assert.Contains(t, decisions, name, "fixture without an expected decision")
	}
}

func TestValidateReachesTheGatewayDecisionForEveryFixture(t *testing.T) {
	for name, want := range expectedDecisions(t) {
		t.Run(name, func(t *testing.T) {
			res, err := envelope.Validate(readFixture(t, name), envelope.Options{Expect: fixtureScope(name)})
			switch want.Expected {
			case "accept":
				require.NoError(t, err)
				assert.Equal(t, want.Revision, res.Revision)
				if want.ContentDigest != "" {
					assert.Equal(t, want.ContentDigest, res.Revision)
				}
				assert.False(t, res.Legacy)
			case "reject":
				require.Error(t, err)
				assert.Equal(t, envelope.Reason(want.Reason), envelope.RejectionReason(err), err.Error())
			case "accept_legacy":
				// The sidecar delivers envelopes; a bare overlay is refused
				// unless legacy payloads are explicitly allowed.
				require.Error(t, err)
				assert.Equal(t, envelope.ReasonLegacyPayload, envelope.RejectionReason(err))
			default:
				t.Fatalf("unknown expectation %q", want.Expected)
			}
		})
	}
}

func TestValidateAcceptsTheLegacyPayloadOnlyWhenAllowed(t *testing.T) {
	data := readFixture(t, "legacy-payload.json")

	_, err := envelope.Validate(data, envelope.Options{})
	require.Equal(t, envelope.ReasonLegacyPayload, envelope.RejectionReason(err))

	res, err := envelope.Validate(data, envelope.Options{AcceptLegacy: true, Expect: glbDemoScope})
	require.NoError(t, err)
	assert.True(t, res.Legacy)
	assert.Empty(t, res.SchemaVersion)
	assert.Equal(t, 2, res.CandidateCount)
	// The legacy payload carries the same routing state as
	// valid-multi-candidate.json, so it has the same content revision.
	assert.Equal(t, "75b057d750d9db77030ecd5a073c235c56b2b0460d3d517340b3e44020e83056", res.Revision)

	// Only network and local site can be checked on a bare overlay.
	_, err = envelope.Validate(data, envelope.Options{AcceptLegacy: true, Expect: envelope.Scope{LocalSite: "west-edge"}})
	assert.Equal(t, envelope.ReasonScopeMismatch, envelope.RejectionReason(err))
}

func TestValidateReportsWhatTheEnvelopeCarries(t *testing.T) {
	res, err := envelope.Validate(readFixture(t, "valid-multi-candidate.json"), envelope.Options{})
	require.NoError(t, err)
	assert.Equal(t, "1.0.0", res.SchemaVersion)
	assert.Equal(t, glbDemoScope, res.Scope)
	assert.Equal(t, 2, res.CandidateCount)
	assert.Equal(t, "grid-operator", res.Provenance.Producer)
	assert.Equal(t, int64(1), res.Provenance.SourceGeneration)
	assert.Equal(t, "2026-07-29T00:00:00Z", res.Provenance.RenderedAt.Format("2006-01-02T15:04:05Z07:00"))
}
