package envelope_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gridsync/gridsync/shared/envelope"
)

// mutate applies string replacements to a fixture, failing when one does
// not apply so that a test cannot silently validate the unchanged file.
func mutate(t *testing.T, fixture string, pairs ...string) []byte {
	t.Helper()
	s := string(readFixture(t, fixture))
	for i := 0; i < len(pairs); i += 2 {
		require.Contains(t, s, pairs[i], "mutation %q does not apply", pairs[i])
		s = strings.Replace(s, pairs[i], pairs[i+1], 1)
	}
	return []byte(s)
}

const (
	goodDigest = `"value": "75b057d750d9db77030ecd5a073c235c56b2b0460d3d517340b3e44020e83056"`
	zeroDigest = `"value": "0000000000000000000000000000000000000000000000000000000000000000"`
)

func TestValidateRejectsWithTheFirstFailingCheck(t *testing.T) {
	const base = "valid-multi-candidate.json"
	tests := []struct {
		name    string
		data    []byte
		opts    envelope.Options
		anyone  bool // validate without an expected scope
		want    envelope.Reason
		because string
	}{
		{
			name: "oversized before anything is parsed",
			data: []byte("not json at all" + strings.Repeat(" ", 100)),
			opts: envelope.Options{MaxBytes: 50},
			want: envelope.ReasonOversized,
		},
		{name: "empty input", data: nil, want: envelope.ReasonMalformedStructure},
		{name: "not an object", data: []byte(`["schema_version"]`), want: envelope.ReasonMalformedStructure},
		{name: "truncated", data: readFixture(t, base)[:200], want: envelope.ReasonMalformedStructure},
		{
			name: "duplicate top-level member",
			data: mutate(t, base, `"schema_version": "1.0.0",`, `"schema_version": "1.0.0", "schema_version": "1.0.0",`),
			want: envelope.ReasonMalformedStructure,
		},
		{
			name: "missing schema version wins over a malformed revision",
			data: mutate(t, base, `"schema_version": "1.0.0",`, ``, `"revision": {`, `"revision": "x", "old_revision": {`),
			want: envelope.ReasonMissingSchemaVersion,
		},
		{
			name: "null schema version counts as missing",
			data: mutate(t, base, `"schema_version": "1.0.0"`, `"schema_version": null`),
			want: envelope.ReasonMissingSchemaVersion,
		},
		{
			name:    "unsupported schema wins over a malformed body",
			data:    mutate(t, base, `"schema_version": "1.0.0"`, `"schema_version": "2.0.0"`, `"candidates": [`, `"candidates": {"x":[`, `  ],`+"\n"+`    "generated_at"`, `  ]},`+"\n"+`    "generated_at"`),
			want:    envelope.ReasonUnsupportedSchemaVersion,
			because: "a 2.x envelope may be shaped differently; the reader must say it does not speak it",
		},
		{name: "schema 1.x minor is accepted", data: mutate(t, base, `"schema_version": "1.0.0"`, `"schema_version": "1.7.2"`)},
		{name: "schema 10.x is not 1.x", data: mutate(t, base, `"schema_version": "1.0.0"`, `"schema_version": "10.0.0"`), want: envelope.ReasonUnsupportedSchemaVersion},
		{name: "schema pre-release", data: mutate(t, base, `"schema_version": "1.0.0"`, `"schema_version": "1.0.0-rc1"`), want: envelope.ReasonUnsupportedSchemaVersion},
		{name: "schema not a string", data: mutate(t, base, `"schema_version": "1.0.0"`, `"schema_version": 1`), want: envelope.ReasonMalformedStructure},
		{name: "revision kind", data: mutate(t, base, `"content_addressed"`, `"sequence"`), want: envelope.ReasonMalformedStructure},
		{name: "revision not hex", data: mutate(t, base, goodDigest, `"value": "XYZ"`), want: envelope.ReasonMalformedStructure},
		{name: "digest algorithm", data: mutate(t, base, `"content_digest": {`+"\n"+`    "algorithm": "sha256"`, `"content_digest": {`+"\n"+`    "algorithm": "md5"`), want: envelope.ReasonMalformedStructure},
		{name: "scope missing a field", data: mutate(t, base, `"gateway": "glb-demo-edge-gateway",`, ``), want: envelope.ReasonMalformedStructure},
		{name: "overlay missing", data: mutate(t, base, `"overlay": {`, `"overlay_v0": {`), want: envelope.ReasonMalformedStructure},
		{name: "candidate without a name", data: mutate(t, base, `"name": "model-west",`, ``), want: envelope.ReasonMalformedStructure},
		{name: "candidate fresh not a bool", data: mutate(t, base, `"fresh": true,`, `"fresh": "yes",`), want: envelope.ReasonMalformedStructure},
		{name: "candidate rank not an integer", data: mutate(t, base, `"rank": 1`, `"rank": 1.5`), want: envelope.ReasonMalformedStructure},
		{name: "selection policy without mode", data: mutate(t, base, `"local_site": "east-edge",`+"\n"+`    "candidates"`, `"local_site": "east-edge", "selection_policy": {},`+"\n"+`    "candidates"`), want: envelope.ReasonMalformedStructure},
		{
			name:    "malformed wins over a scope mismatch",
			data:    mutate(t, base, `"network": "glb-demo",`, `"network": "elsewhere",`, `"fresh": true,`, `"fresh": 1,`),
			want:    envelope.ReasonMalformedStructure,
			because: "nothing of a malformed envelope is trusted, its scope included",
		},
		{
			name: "scope mismatch wins over a digest mismatch",
			data: mutate(t, base, `"local_site": "east-edge"`+"\n  }", `"local_site": "west-edge"`+"\n  }", `"algorithm": "sha256",`+"\n    "+goodDigest, `"algorithm": "sha256",`+"\n    "+zeroDigest),
			want: envelope.ReasonScopeMismatch,
		},
		{
			name:   "scope disagreeing with the overlay is a scope mismatch even when nothing is expected",
			data:   mutate(t, base, `"local_site": "east-edge"`+"\n  }", `"local_site": "west-edge"`+"\n  }"),
			anyone: true,
			want:   envelope.ReasonScopeMismatch,
		},
		{
			name:    "digest mismatch wins over revision disagreement",
			data:    readFixture(t, "invalid-digest.json"),
			want:    envelope.ReasonDigestMismatch,
			because: "the gateway recomputes before it compares revision and content_digest",
		},
		{
			name: "a changed candidate no longer matches its digest",
			data: mutate(t, base, `"rank": 1`, `"rank": 2`),
			want: envelope.ReasonDigestMismatch,
		},
		{
			name: "number beyond the double range",
			data: mutate(t, base, `"rank": 1`, `"rank": 1, "weight": 1e999`),
			want: envelope.ReasonMalformedStructure,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			opts := tt.opts
			if !tt.anyone {
				opts.Expect = glbDemoScope
			}
			_, err := envelope.Validate(tt.data, opts)
			if tt.want == "" {
				require.NoError(t, err)
				return
			}
			require.Error(t, err, tt.because)
			assert.Equal(t, tt.want, envelope.RejectionReason(err), "%v (%s)", err, tt.because)
		})
	}
}

func TestValidateChecksEveryExpectedScopeField(t *testing.T) {
	data := readFixture(t, "valid-multi-candidate.json")
	for _, field := range []string{"network", "gateway", "namespace", "local_site"} {
		t.Run(field, func(t *testing.T) {
			expect := glbDemoScope
			switch field {
			case "network":
				expect.Network = "other"
			case "gateway":
				expect.Gateway = "other"
			case "namespace":
				expect.Namespace = "other"
			case "local_site":
				expect.LocalSite = "other"
			}
			_, err := envelope.Validate(data, envelope.Options{Expect: expect})
			require.Error(t, err)
			assert.Equal(t, envelope.ReasonScopeMismatch, envelope.RejectionReason(err))
			assert.Contains(t, err.Error(), "scope."+field)
		})
	}
	_, err := envelope.Validate(data, envelope.Options{})
	require.NoError(t, err, "a scope field that is not expected is not checked")
}

func TestRejectionDetailIsBounded(t *testing.T) {
	long := strings.Repeat("x", 10000)
	data := mutate(t, "valid-multi-candidate.json", `"network": "glb-demo",`, `"network": "`+long+`",`)
	_, err := envelope.Validate(data, envelope.Options{Expect: glbDemoScope})
	require.Error(t, err)
	assert.Less(t, len(err.Error()), 400)
}

func TestReasonsAreAClosedSetWithTheGatewayVocabulary(t *testing.T) {
	reasons := envelope.Reasons()
	for _, r := range []envelope.Reason{"malformed_structure", "missing_schema_version", "unsupported_schema_version", "scope_mismatch", "revision_digest_mismatch", "digest_mismatch", "oversized"} {
		assert.Contains(t, reasons, r)
	}
	seen := map[envelope.Reason]bool{}
	for _, r := range reasons {
		assert.False(t, seen[r], "duplicate %s", r)
		seen[r] = true
	}
}

func TestEscapedMemberNamesAreTheSameMembers(t *testing.T) {
	// "\u0066resh" is "fresh": a wrong type behind an escaped name is still
	// a wrong type, and an escaped required member still counts.
	data := mutate(t, "valid-multi-candidate.json", `"fresh": true,`, `"\u0066resh": "yes",`)
	_, err := envelope.Validate(data, envelope.Options{})
	assert.Equal(t, envelope.ReasonMalformedStructure, envelope.RejectionReason(err))

	data = mutate(t, "valid-multi-candidate.json", `"fresh": true,`, `"\u0066resh": true,`)
	res, err := envelope.Validate(data, envelope.Options{})
	require.NoError(t, err, "an escaped name is canonicalised, so the digest still matches")
	assert.Equal(t, "75b057d750d9db77030ecd5a073c235c56b2b0460d3d517340b3e44020e83056", res.Revision)
}
