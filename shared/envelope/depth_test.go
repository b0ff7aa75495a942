package envelope_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gridsync/gridsync/shared/envelope"
)

// nestedArrays is k arrays, one inside the other, around a number.
func nestedArrays(k int) string {
	return strings.Repeat("[", k) + "1" + strings.Repeat("]", k)
}

// nestedObjects is k objects, one inside the other, around a number.
func nestedObjects(k int) string {
	return strings.Repeat(`{"a":`, k) + "1" + strings.Repeat("}", k)
}

// envelopeWith builds a correctly digested envelope whose only candidate
// carries an extra member x (additive members are digested), whose
// selection_policy carries policy and whose top level carries extra (each
// when not empty). The envelope is depth 1, the overlay 2, candidates 3,
// the candidate 4: x at k levels makes the document 4+k deep; policy at k
// levels 3+k, extra 1+k.
func envelopeWith(t testing.TB, x, policy, extra string) []byte {
	t.Helper()
	candidate := `{"kind":"inference_model","name":"m","site":"s","cluster":"c","fresh":true`
	if x != "" {
		candidate += `,"x":` + x
	}
	overlay := `{"network":"n","local_site":"s","candidates":[` + candidate + `}]`
	if policy != "" {
		overlay += `,"selection_policy":{"mode":"weighted","deep":` + policy + `}`
	}
	overlay += `}`
	digest, err := envelope.Digest([]byte(overlay))
	require.NoError(t, err)
	top := ""
	if extra != "" {
		top = `"extra":` + extra + `,`
	}
	return []byte(fmt.Sprintf(`{%s"schema_version":"1.0.0",`+
		`"revision":{"kind":"content_addressed","algorithm":"sha256","value":"%s"},`+
		`"content_digest":{"algorithm":"sha256","value":"%s"},`+
		`"scope":{"network":"n","gateway":"g","namespace":"ns","local_site":"s"},"overlay":%s}`, top, digest, digest, overlay))
}

func envelopeWithMember(t testing.TB, x string) []byte { return envelopeWith(t, x, "", "") }

// The gateway's parser (serde_json, default recursion limit 128) reads
// 127 levels and refuses 128: so does the validator, before any
// canonicalisation.
func TestNestingDeeperThanTheGatewayReadsIsMalformed(t *testing.T) {
	for _, nest := range []func(int) string{nestedArrays, nestedObjects} {
		deepest := envelopeWithMember(t, nest(envelope.MaxDepth-4))
		_, err := envelope.Validate(deepest, envelope.Options{})
		require.NoError(t, err, "127 levels are readable by the gateway")

		tooDeep := envelopeWithMember(t, nest(envelope.MaxDepth-3))
		_, err = envelope.Validate(tooDeep, envelope.Options{})
		require.Error(t, err)
		assert.Equal(t, envelope.ReasonMalformedStructure, envelope.RejectionReason(err))
		assert.Contains(t, err.Error(), "nested deeper than 127 levels")
	}
}

// The limit holds wherever the nesting is: in a candidate (checked while
// the candidates are walked), in selection_policy and in a member nobody
// reads (checked by a scan of what lies outside the candidates).
func TestTheDepthLimitHoldsEverywhereInTheDocument(t *testing.T) {
	places := []struct {
		name  string
		build func(k int) []byte
		base  int // the depth of the member holding the nesting
	}{
		{"candidate member", func(k int) []byte { return envelopeWith(t, nestedObjects(k), "", "") }, 4},
		{"selection_policy", func(k int) []byte { return envelopeWith(t, "", nestedArrays(k), "") }, 3},
		{"unknown top-level member", func(k int) []byte { return envelopeWith(t, "", "", nestedArrays(k)) }, 1},
		{"everywhere at once", func(k int) []byte {
			return envelopeWith(t, nestedArrays(k), nestedArrays(k), nestedArrays(k+3))
		}, 4},
	}
	for _, p := range places {
		t.Run(p.name, func(t *testing.T) {
			_, err := envelope.Validate(p.build(envelope.MaxDepth-p.base), envelope.Options{})
			require.NoError(t, err, "%d levels", envelope.MaxDepth)
			_, err = envelope.Validate(p.build(envelope.MaxDepth-p.base+1), envelope.Options{})
			assert.Equal(t, envelope.ReasonMalformedStructure, envelope.RejectionReason(err), "%d levels: %v", envelope.MaxDepth+1, err)
		})
	}
}

// Too deep is reported before any other reason, as the gateway fails to
// parse such a file before it looks at its scope.
func TestTooDeepComesBeforeScope(t *testing.T) {
	doc := envelopeWith(t, nestedArrays(envelope.MaxDepth), "", "")
	_, err := envelope.Validate(doc, envelope.Options{Expect: envelope.Scope{Network: "another"}})
	assert.Equal(t, envelope.ReasonMalformedStructure, envelope.RejectionReason(err))
}

// Brackets inside strings are not nesting, escaped quotes included.
func TestDepthIgnoresBracketsInStrings(t *testing.T) {
	x := `"` + strings.Repeat(`[{\"`, 200) + `"`
	_, err := envelope.Validate(envelopeWithMember(t, x), envelope.Options{})
	require.NoError(t, err)
}

// Canonicalisation is linear at any depth: the digest of a deeply nested
// overlay (which Validate refuses, but Digest, the producer's function,
// takes) matches the library's canonical form, and takes time in
// proportion to its size (BenchmarkCanonicalNested shows it).
func TestDeepValuesCanonicaliseAsTheLibraryDoes(t *testing.T) {
	for _, x := range []string{
		nestedArrays(3000),
		nestedObjects(3000),
		strings.Repeat(`{"b":[1,{"z":2,"a":`, 500) + "1" + strings.Repeat("}]}", 500),
	} {
		overlay := `{"network":"n","local_site":"s","candidates":[{"kind":"k","name":"m","site":"s","cluster":"c","fresh":true,"x":` + x + `}],"selection_policy":{"mode":"weighted","deep":` + x + `}}`
		got, err := envelope.CanonicalOverlay([]byte(overlay))
		require.NoError(t, err)
		assert.Equal(t, string(libraryCanonical(t, []byte(overlay))), string(got))
	}
}
