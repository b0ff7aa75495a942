package envelope_test

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gridsync/gridsync/shared/envelope"
)

func overlayOf(t *testing.T, fixture string) []byte {
	t.Helper()
	var doc struct {
		Overlay jsontext.Value `json:"overlay"`
	}
	require.NoError(t, json.Unmarshal(readFixture(t, fixture), &doc))
	return doc.Overlay
}

func TestDigestMatchesTheContractVector(t *testing.T) {
	overlay := overlayOf(t, "valid-minimal.json")

	canon, err := envelope.CanonicalOverlay(overlay)
	require.NoError(t, err)
	assert.Equal(t,
		`{"candidates":[{"cluster":"cluster-a","fresh":true,"kind":"inference_model","name":"model-a","rank":0,"site":"site-a","stable_id":"abcd1234"}],"local_site":"site-a","network":"test-net"}`,
		string(canon))

	digest, err := envelope.Digest(overlay)
	require.NoError(t, err)
	assert.Equal(t, "abd5f4855454390febb53ad2085d182c465a78c5d14f0132317b4c9335aa8494", digest)
}

// canonicalCandidates returns the canonical bytes of an overlay whose only
// candidate carries extra as additive members.
func canonicalCandidates(t *testing.T, extra string) string {
	t.Helper()
	overlay := `{"network":"n","local_site":"s","candidates":[{"kind":"inference_model","name":"m","site":"s","cluster":"c","fresh":true,` + extra + `}]}`
	canon, err := envelope.CanonicalOverlay([]byte(overlay))
	require.NoError(t, err)
	return string(canon)
}

func TestCanonicalFormFollowsRFC8785(t *testing.T) {
	tests := []struct {
		name  string
		extra string
		want  string // the candidate's extra members as canonicalised
	}{
		{"float exponent uses ECMAScript form", `"score":1e-07`, `"score":1e-7`},
		{"integral float drops its fraction", `"score":3.0`, `"score":3`},
		{"large exponent", `"score":1E+21`, `"score":1e+21`},
		{"negative zero is zero", `"score":-0.0`, `"score":0`},
		{"shortest round-trip digits", `"score":0.30000000000000004`, `"score":0.30000000000000004`},
		{"html characters are not escaped", `"x":"<a>&b"`, `"x":"<a>&b"`},
		{"line and paragraph separators are not escaped", `"x":"\u2028\u2029"`, "\"x\":\"\u2028\u2029\""},
		{"escaped letters are unescaped", `"x":"\u0061\/"`, `"x":"a/"`},
		{"control characters use short or u escapes", `"x":"\u0008\u000f\t"`, `"x":"\b\u000f\t"`},
		{"members sort by UTF-16 code units", `"\u20ac":1,"\ud83d\ude00":2,"\r":3`, "\"\\r\":3" + `,"cluster":"c","fresh":true,"kind":"inference_model","name":"m","site":"s",` + "\"\u20ac\":1,\"\U0001F600\":2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := canonicalCandidates(t, tt.extra)
			assert.Contains(t, got, tt.want, got)
		})
	}
}

func TestDigestCoversAdditiveCandidateFields(t *testing.T) {
	base := overlayOf(t, "valid-minimal.json")
	withField := []byte(strings.Replace(string(base), `"rank": 0`, `"rank": 0, "future_hint": "x"`, 1))
	require.NotEqual(t, string(base), string(withField))

	d1, err := envelope.Digest(base)
	require.NoError(t, err)
	d2, err := envelope.Digest(withField)
	require.NoError(t, err)
	assert.NotEqual(t, d1, d2, "a field the producer digested must change the digest")
}

func TestDigestIgnoresMembersOutsideTheDigestedSet(t *testing.T) {
	base := overlayOf(t, "valid-minimal.json")
	d1, err := envelope.Digest(base)
	require.NoError(t, err)

	changed := strings.Replace(string(base), `"generated_at": "2026-07-29T00:00:00Z"`, `"generated_at": "2099-01-01T00:00:00Z", "note": "x"`, 1)
	require.NotEqual(t, string(base), changed)
	d2, err := envelope.Digest([]byte(changed))
	require.NoError(t, err)
	assert.Equal(t, d1, d2)
}

func TestDigestDependsOnCandidateOrder(t *testing.T) {
	a := `{"network":"n","local_site":"s","candidates":[{"kind":"k","name":"a","site":"s","cluster":"c","fresh":true},{"kind":"k","name":"b","site":"s","cluster":"c","fresh":true}]}`
	b := `{"network":"n","local_site":"s","candidates":[{"kind":"k","name":"b","site":"s","cluster":"c","fresh":true},{"kind":"k","name":"a","site":"s","cluster":"c","fresh":true}]}`
	da, err := envelope.Digest([]byte(a))
	require.NoError(t, err)
	db, err := envelope.Digest([]byte(b))
	require.NoError(t, err)
	assert.NotEqual(t, da, db)
}

func TestDigestIncludesSelectionPolicyOnlyWhenPresent(t *testing.T) {
	without := `{"network":"n","local_site":"s","candidates":[]}`
	with := `{"network":"n","local_site":"s","selection_policy":{"mode":"random"},"candidates":[]}`
	canon, err := envelope.CanonicalOverlay([]byte(without))
	require.NoError(t, err)
	assert.Equal(t, `{"candidates":[],"local_site":"s","network":"n"}`, string(canon))
	sum := sha256.Sum256(canon)
	d, err := envelope.Digest([]byte(without))
	require.NoError(t, err)
	assert.Equal(t, hex.EncodeToString(sum[:]), d)

	canon, err = envelope.CanonicalOverlay([]byte(with))
	require.NoError(t, err)
	assert.Equal(t, `{"candidates":[],"local_site":"s","network":"n","selection_policy":{"mode":"random"}}`, string(canon))
}

func TestDigestRefusesAmbiguousJSON(t *testing.T) {
	tests := map[string]string{
		"duplicate member":             `{"network":"n","network":"m","local_site":"s","candidates":[]}`,
		"duplicate in a candidate":     `{"network":"n","local_site":"s","candidates":[{"kind":"k","name":"a","name":"b","site":"s","cluster":"c","fresh":true}]}`,
		"invalid utf-8":                "{\"network\":\"\xff\",\"local_site\":\"s\",\"candidates\":[]}",
		"number beyond float64":        `{"network":"n","local_site":"s","candidates":[{"kind":"k","name":"a","site":"s","cluster":"c","fresh":true,"x":1e400}]}`,
		"nested number beyond float64": `{"network":"n","local_site":"s","candidates":[{"kind":"k","name":"a","site":"s","cluster":"c","fresh":true,"x":{"y":[1,-1E+400]}}]}`,
		"beyond float64, escaped name": `{"network":"n","local_site":"s","candidates":[{"kind":"k","name":"a","site":"s","cluster":"c","fresh":true,"\u00e9":1e400}]}`,
		"lone surrogate":               `{"network":"\ud800","local_site":"s","candidates":[]}`,
		"trailing garbage":             `{"network":"n","local_site":"s","candidates":[]} x`,
		"candidates is not an array":   `{"network":"n","local_site":"s","candidates":{}}`,
	}
	for name, overlay := range tests {
		t.Run(name, func(t *testing.T) {
			_, err := envelope.Digest([]byte(overlay))
			assert.Error(t, err)
		})
	}
}
