package envelope_test

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
	"github.com/stretchr/testify/require"

	"github.com/gridsync/gridsync/shared/envelope"
)

// alphabet mixes characters that JSON encoders disagree about: HTML
// characters, U+2028/2029, quotes, backslashes, control characters,
// non-BMP characters (sorted by UTF-16 in JCS) and plain ASCII.
var alphabet = []rune("abcxyz-_.<>&\"\\/\u2028\u2029\u00e9\u20ac\U0001F600\t\n\x01 ")

func randomString(r *rand.Rand) string {
	n := 1 + r.IntN(12)
	var b strings.Builder
	for range n {
		b.WriteRune(alphabet[r.IntN(len(alphabet))])
	}
	return b.String()
}

func randomFloat(r *rand.Rand) float64 {
	switch r.IntN(4) {
	case 0:
		return float64(r.IntN(100)) // integral: 3.0 must canonicalise as 3
	case 1:
		return r.Float64() * math.Pow10(r.IntN(40)-20) // exponents both ways
	case 2:
		return -r.Float64()
	default:
		return r.NormFloat64() * 1e-7
	}
}

func randomOverlay(r *rand.Rand) envelope.Overlay {
	o := envelope.Overlay{Network: randomString(r), LocalSite: randomString(r)}
	if r.IntN(2) == 0 {
		modes := []string{envelope.SelectionDeterministic, envelope.SelectionRoundRobin, envelope.SelectionRandom}
		o.SelectionPolicy = &envelope.SelectionPolicy{Mode: modes[r.IntN(len(modes))]}
	}
	if r.IntN(2) == 0 {
		o.GeneratedAt = time.Unix(r.Int64N(4e9), 0)
	}
	for i := range r.IntN(6) {
		c := envelope.Candidate{
			Kind:    envelope.CandidateKindInferenceModel,
			Name:    randomString(r),
			Site:    randomString(r),
			Cluster: randomString(r),
			Fresh:   r.IntN(2) == 0,
		}
		c.StableID = envelope.StableID(c.Kind, c.Name, c.Site, c.Cluster)
		rank := int64(i)
		c.Rank = &rank
		if r.IntN(2) == 0 {
			c.Credential = &envelope.Credential{Strategy: "bearer_token", SecretRef: envelope.SecretRef{Name: randomString(r), Namespace: "ns", Key: "token"}}
		}
		if r.IntN(2) == 0 {
			score := randomFloat(r)
			c.Score = &score
			c.ScoreBreakdown = &envelope.ScoreBreakdown{
				Locality: randomFloat(r), QueueDepth: randomFloat(r), KVCache: randomFloat(r),
				PrefixCache: randomFloat(r), Latency: randomFloat(r), Cost: randomFloat(r), Total: score,
			}
		}
		if r.IntN(3) == 0 {
			group := int64(r.IntN(3))
			c.SelectionGroup = &group
		}
		o.Candidates = append(o.Candidates, c)
	}
	return o
}

// relayout re-encodes a document compactly with object members in
// reverse order: same JSON value, different bytes.
func relayout(t *testing.T, doc []byte) []byte {
	t.Helper()
	var v any
	require.NoError(t, json.Unmarshal(doc, &v))
	reversed, err := json.Marshal(reverseMembers(v))
	require.NoError(t, err)
	return reversed
}

type orderedObject []struct {
	name  string
	value any
}

func (o orderedObject) MarshalJSONTo(enc *jsontext.Encoder) error {
	if err := enc.WriteToken(jsontext.BeginObject); err != nil {
		return err
	}
	for _, m := range o {
		if err := enc.WriteToken(jsontext.String(m.name)); err != nil {
			return err
		}
		if err := json.MarshalEncode(enc, m.value); err != nil {
			return err
		}
	}
	return enc.WriteToken(jsontext.EndObject)
}

func reverseMembers(v any) any {
	switch v := v.(type) {
	case map[string]any:
		names := make([]string, 0, len(v))
		for name := range v {
			names = append(names, name)
		}
		// Sorted descending: the reverse of what JCS produces.
		for i := range names {
			for j := i + 1; j < len(names); j++ {
				if names[j] > names[i] {
					names[i], names[j] = names[j], names[i]
				}
			}
		}
		out := make(orderedObject, 0, len(v))
		for _, name := range names {
			out = append(out, struct {
				name  string
				value any
			}{name, reverseMembers(v[name])})
		}
		return out
	case []any:
		for i := range v {
			v[i] = reverseMembers(v[i])
		}
		return v
	default:
		return v
	}
}

func TestRoundTripProperties(t *testing.T) {
	for seed := range uint64(300) {
		r := rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))
		overlay := randomOverlay(r)
		scope := envelope.Scope{Network: overlay.Network, Gateway: randomString(r), Namespace: randomString(r), LocalSite: overlay.LocalSite}
		provenance := envelope.Provenance{Producer: "grid-operator", SourceGeneration: r.Int64N(100), RenderedAt: time.Unix(r.Int64N(4e9), 0)}

		doc, revision, err := envelope.Build(overlay, scope, provenance)
		require.NoError(t, err, "seed %d", seed)

		// Validate(Build(x)) accepts with the digest Build reported.
		res, err := envelope.Validate(doc, envelope.Options{Expect: scope})
		require.NoError(t, err, "seed %d", seed)
		require.Equal(t, revision, res.Revision, "seed %d", seed)
		require.Len(t, overlay.Candidates, res.CandidateCount)

		// Build is deterministic.
		again, _, err := envelope.Build(overlay, scope, provenance)
		require.NoError(t, err)
		require.Equal(t, doc, again, "seed %d", seed)

		// The revision is a property of the JSON value, not of its layout.
		res, err = envelope.Validate(relayout(t, doc), envelope.Options{Expect: scope})
		require.NoError(t, err, "seed %d", seed)
		require.Equal(t, revision, res.Revision, "seed %d", seed)

		// Timestamps and provenance are not digested.
		provenance.RenderedAt = provenance.RenderedAt.Add(time.Hour)
		provenance.SourceGeneration++
		overlay.GeneratedAt = overlay.GeneratedAt.Add(time.Minute)
		_, moved, err := envelope.Build(overlay, scope, provenance)
		require.NoError(t, err)
		require.Equal(t, revision, moved, "seed %d", seed)

		// Routing state is digested.
		if len(overlay.Candidates) > 0 {
			overlay.Candidates[0].Fresh = !overlay.Candidates[0].Fresh
			_, changed, err := envelope.Build(overlay, scope, provenance)
			require.NoError(t, err)
			require.NotEqual(t, revision, changed, "seed %d", seed)
		}
	}
}
