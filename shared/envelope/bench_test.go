package envelope_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gridsync/gridsync/shared/envelope"
)

// benchEnvelope builds a realistic envelope of about size bytes: fully
// populated candidates, as a large network's overlay would have, with a
// plain one every other candidate so that small sizes can be reached.
func benchEnvelope(tb testing.TB, size int) []byte {
	tb.Helper()
	overlay := envelope.Overlay{Network: "production-network", LocalSite: "east-edge", GeneratedAt: time.Unix(1.8e9, 0)}
	scope := envelope.Scope{Network: overlay.Network, Gateway: "edge-gateway", Namespace: "grid-system", LocalSite: overlay.LocalSite}
	provenance := envelope.Provenance{Producer: "grid-operator", RenderedAt: time.Unix(1.8e9, 0)}
	build := func(n int) []byte {
		overlay.Candidates = overlay.Candidates[:0]
		for i := range n {
			overlay.Candidates = append(overlay.Candidates, benchCandidate(i))
		}
		doc, _, err := envelope.Build(overlay, scope, provenance)
		if err != nil {
			tb.Fatal(err)
		}
		return doc
	}
	// Grow geometrically, then settle on the largest count that fits.
	n := 1
	for len(build(n*2)) <= size {
		n *= 2
	}
	for step := n / 2; step > 0; step /= 2 {
		if len(build(n+step)) <= size {
			n += step
		}
	}
	return build(n)
}

func benchCandidate(i int) envelope.Candidate {
	c := envelope.Candidate{
		Kind:    envelope.CandidateKindInferenceModel,
		Name:    fmt.Sprintf("model-%05d", i),
		Site:    fmt.Sprintf("site-%03d", i%97),
		Cluster: fmt.Sprintf("cluster-%04d", i%1013),
		Fresh:   i%7 != 0,
	}
	c.StableID = envelope.StableID(c.Kind, c.Name, c.Site, c.Cluster)
	rank := int64(i)
	c.Rank = &rank
	if i%2 == 1 {
		group, score := int64(i%4), 0.5+float64(i%100)/1000
		c.Credential = &envelope.Credential{Strategy: "bearer_token", SecretRef: envelope.SecretRef{
			Name: fmt.Sprintf("provider-%04d-token", i%211), Namespace: "grid-system", Key: "token",
		}}
		c.AdmissionState = "new_and_existing"
		c.SelectionTier = "same_region"
		c.Score = &score
		c.ScoreBreakdown = &envelope.ScoreBreakdown{Locality: 0.25, QueueDepth: 0.125, KVCache: 1e-7, PrefixCache: 0.3, Latency: 12.5, Cost: 3, Total: score}
		c.SelectionGroup = &group
	}
	return c
}

func BenchmarkValidate(b *testing.B) {
	for _, size := range []struct {
		name  string
		bytes int
	}{{"1KiB", 1 << 10}, {"64KiB", 64 << 10}, {"1MiB", 1 << 20}} {
		doc := benchEnvelope(b, size.bytes)
		b.Run("size="+size.name, func(b *testing.B) {
			opts := envelope.Options{}
			b.SetBytes(int64(len(doc)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := envelope.Validate(doc, opts); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkNested is the worst shape for canonicalisation: 1 MiB of
// nesting, about 9,980 levels, in a candidate's member and in
// selection_policy. Validate refuses it at the depth limit before any
// canonicalisation; CanonicalOverlay (what Digest does) canonicalises it,
// and must stay linear: compare with the flat 1 MiB case.
func BenchmarkNested(b *testing.B) {
	const levels = 9980
	member := strings.Repeat(`{"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa":`, levels/2) + "1" + strings.Repeat("}", levels/2)
	policy := strings.Repeat(`{"bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb":[`, levels/2) + "1" + strings.Repeat("]}", levels/2)
	overlay := []byte(`{"network":"n","local_site":"s","candidates":[{"kind":"k","name":"m","site":"s","cluster":"c","fresh":true,"x":` + member + `}],"selection_policy":{"mode":"weighted","deep":` + policy + `}}`)
	doc := []byte(`{"schema_version":"1.0.0","revision":{"kind":"content_addressed","algorithm":"sha256","value":"0"},` +
		`"content_digest":{"algorithm":"sha256","value":"0"},"scope":{"network":"n","gateway":"g","namespace":"ns","local_site":"s"},"overlay":` + string(overlay) + `}`)
	b.Run("op=validate", func(b *testing.B) {
		b.SetBytes(int64(len(doc)))
		for b.Loop() {
			if _, err := envelope.Validate(doc, envelope.Options{MaxBytes: 2 << 20}); envelope.RejectionReason(err) != envelope.ReasonMalformedStructure {
				b.Fatalf("not refused as malformed: %v", err)
			}
		}
	})
	b.Run("op=canonicalise", func(b *testing.B) {
		b.SetBytes(int64(len(overlay)))
		for b.Loop() {
			if _, err := envelope.CanonicalOverlay(overlay); err != nil {
				b.Fatal(err)
			}
		}
	})
}
