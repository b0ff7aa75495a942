package envelope

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// decodeBothWays decodes data with the general decoder and, when it takes
// it, with the fast one, and fails when the two disagree on anything a
// later check reads.
func decodeBothWays(t *testing.T, data []byte) (fastTook bool) {
	t.Helper()
	var fast wireTop
	if !fastDecode(data, &fast) {
		return false
	}
	var general wireTop
	if err := decodeWithCandidates(data, &general, decodeOptions{limitDepth: true}); err != nil {
		t.Fatalf("the fast path took what the decoder refuses (%v):\n%s", err, data)
	}
	for _, pair := range [][2]*candidateList{{&fast.Candidates, &general.Candidates}, {overlayCandidates(fast), overlayCandidates(general)}} {
		f, g := pair[0], pair[1]
		if (f == nil) != (g == nil) {
			t.Fatalf("overlay present on one path only:\n%s", data)
		}
		if f == nil {
			continue
		}
		if (f.canonical == nil) != (g.canonical == nil) {
			t.Fatalf("candidates present on one path only:\n%s", data)
		}
		if f.canonical != nil {
			if fs, gs := f.canonical.hash.Sum(nil), g.canonical.hash.Sum(nil); string(fs) != string(gs) {
				t.Fatalf("canonical candidates differ:\n%s", data)
			}
		}
		f.canonical, g.canonical = nil, nil
	}
	if !reflect.DeepEqual(fast, general) {
		t.Fatalf("decoded members differ\nfast:    %+v\ngeneral: %+v\n%s", fast, general, data)
	}
	return true
}

func overlayCandidates(top wireTop) *candidateList {
	if top.Overlay == nil {
		return nil
	}
	return &top.Overlay.Candidates
}

func fixtureFiles(t testing.TB) map[string][]byte {
	t.Helper()
	files, err := filepath.Glob("testdata/overlay-contract/v1/*.json")
	require.NoError(t, err)
	require.NotEmpty(t, files)
	out := map[string][]byte{}
	for _, file := range files {
		data, err := os.ReadFile(file)
		require.NoError(t, err)
		out[filepath.Base(file)] = data
	}
	return out
}

// producedEnvelope is what the agent writes, with every candidate member
// and numbers that need reformatting.
func producedEnvelope(t testing.TB, n int) []byte {
	t.Helper()
	overlay := Overlay{Network: "net", LocalSite: "east", GeneratedAt: time.Unix(1.8e9, 0), SelectionPolicy: &SelectionPolicy{Mode: SelectionRoundRobin}}
	for i := range n {
		score, rank, group := 0.1+0.2*float64(i), int64(i), int64(i%3)
		overlay.Candidates = append(overlay.Candidates, Candidate{
			Kind: CandidateKindInferenceModel, Name: fmt.Sprintf("model-%d", i), Site: "west", Cluster: "c", Fresh: i%2 == 0,
			Credential:     &Credential{Strategy: "bearer_token", SecretRef: SecretRef{Name: "s", Namespace: "ns", Key: "token"}},
			StableID:       StableID(CandidateKindInferenceModel, fmt.Sprintf("model-%d", i), "west", "c"),
			AdmissionState: "new_and_existing", Score: &score, Rank: &rank, SelectionGroup: &group,
			ScoreBreakdown: &ScoreBreakdown{KVCache: 1e-7, Latency: 1e22, Total: score},
		})
	}
	doc, _, err := Build(overlay, Scope{Network: "net", Gateway: "gw", Namespace: "ns", LocalSite: "east"}, Provenance{Producer: "gridsync"})
	require.NoError(t, err)
	return doc
}

func TestFastDecodeTakesWhatProducersWrite(t *testing.T) {
	for name, data := range fixtureFiles(t) {
		if name == "manifest.json" {
			continue
		}
		// Every fixture is printable ASCII without escapes except the
		// malformed one, which the decoder must explain.
		want := name != "malformed-envelope.json"
		require.Equal(t, want, decodeBothWays(t, data), name)
	}
	for _, n := range []int{0, 1, 50} {
		doc := producedEnvelope(t, n)
		require.True(t, decodeBothWays(t, doc), "a produced envelope of %d candidates", n)
		res, err := Validate(doc, Options{})
		require.NoError(t, err)
		require.Equal(t, n, res.CandidateCount)
	}
}

// TestFastDecodeLeavesTheRestToTheDecoder: each of these is valid JSON the
// fast path does not decide alone, or a document it must not take; the
// verdict is the general path's either way.
func TestFastDecodeLeavesTheRestToTheDecoder(t *testing.T) {
	doc := string(producedEnvelope(t, 2))
	for name, edit := range map[string]func(string) string{
		"escape":           func(s string) string { return strings.Replace(s, `"model-1"`, `"model\u002d1"`, 1) },
		"non-ASCII":        func(s string) string { return strings.Replace(s, `"model-1"`, `"modèle-1"`, 1) },
		"duplicate name":   func(s string) string { return strings.Replace(s, `"fresh": true`, `"fresh": true, "fresh": true`, 1) },
		"trailing comma":   func(s string) string { return strings.Replace(s, `"fresh": true`, `"fresh": true,`, 1) },
		"leading zero":     func(s string) string { return strings.Replace(s, `"rank": 1`, `"rank": 01`, 1) },
		"bare fraction":    func(s string) string { return strings.Replace(s, `"rank": 1`, `"rank": 1.`, 1) },
		"wrong type":       func(s string) string { return strings.Replace(s, `"rank": 1`, `"rank": 1.5`, 1) },
		"missing required": func(s string) string { return strings.Replace(s, `"fresh": true,`, ``, 1) },
		"number range":     func(s string) string { return strings.Replace(s, `"rank": 1`, `"rank": 1, "x": 1e400`, 1) },
		"garbage after":    func(s string) string { return s + "x" },
		"control byte":     func(s string) string { return strings.Replace(s, `"model-1"`, "\"model\t1\"", 1) },
		"candidates null":  func(s string) string { return strings.Replace(s, `"candidates": [`, `"candidates": null, "c": [`, 1) },
		"overlay a string": func(s string) string { return strings.Replace(s, `"overlay": {`, `"overlay": "x", "o": {`, 1) },
		"truncated":        func(s string) string { return s[:len(s)/2] },
		"too deep":         func(s string) string { return strings.Replace(s, `"rank": 1`, `"rank": 1, "x": `+nest(MaxDepth), 1) },
	} {
		edited := edit(doc)
		require.NotEqual(t, doc, edited, name)
		require.False(t, decodeBothWays(t, []byte(edited)), name)
		_, fastErr := Validate([]byte(edited), Options{})
		var top wireTop
		generalErr := decodeWithCandidates([]byte(edited), &top, decodeOptions{limitDepth: true})
		if generalErr == nil {
			// Valid JSON the fast path left alone: the verdict is the
			// general path's, accepted or not.
			continue
		}
		require.Error(t, fastErr, name)
	}
	// Within the limit the fast path goes as deep as the gateway reads.
	deep := strings.Replace(doc, `"rank": 1`, `"rank": 1, "x": `+nest(MaxDepth-5), 1)
	require.True(t, decodeBothWays(t, []byte(deep)))
}

func nest(levels int) string {
	return strings.Repeat(`{"a":[`, levels/2) + "1" + strings.Repeat("]}", levels/2)
}

// FuzzFastDecodeAgrees: whatever the fast decoder takes, the general
// decoder decodes to the same members and the same canonical candidates.
//
//	go test ./shared/envelope -run '^$' -fuzz FuzzFastDecodeAgrees -fuzztime 1m
func FuzzFastDecodeAgrees(f *testing.F) {
	for _, data := range fixtureFiles(f) {
		f.Add(data)
	}
	f.Add(producedEnvelope(f, 3))
	f.Add([]byte(`{"network":"n","local_site":"s","candidates":[{"kind":"k","name":"m","site":"s","cluster":"c","fresh":true,"n":[-0,1E+2,0.30000000000000004,123456789012345678,5e-324]}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		decodeBothWays(t, data)
	})
}
