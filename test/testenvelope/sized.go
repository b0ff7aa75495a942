// Package testenvelope makes overlay envelopes of a chosen size for
// benchmarks.
package testenvelope

import (
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gridsync/gridsync/shared/envelope"
)

// Sized renders an envelope of at most size bytes (as close as candidates
// allow) for scope. Every candidate's name holds variant, so envelopes of
// two variants differ in every candidate: the worst case for validation,
// as a routing change that touches every candidate is.
func Sized(tb testing.TB, scope envelope.Scope, variant, size int) ([]byte, string) {
	tb.Helper()
	overlay := envelope.Overlay{Network: scope.Network, LocalSite: scope.LocalSite}
	build := func(n int) ([]byte, string) {
		overlay.Candidates = overlay.Candidates[:0]
		for c := range n {
			rank := int64(c)
			overlay.Candidates = append(overlay.Candidates, envelope.Candidate{
				Kind: envelope.CandidateKindInferenceModel, Name: fmt.Sprintf("model-%d-%05d", variant, c),
				Site: "site-" + strconv.Itoa(c%50), Cluster: "cluster-" + strconv.Itoa(c%200), Fresh: true, Rank: &rank,
			})
		}
		doc, revision, err := envelope.Build(overlay, scope, envelope.Provenance{Producer: "bench", RenderedAt: time.Now()})
		require.NoError(tb, err)
		return doc, revision
	}
	one, _ := build(1)
	two, _ := build(2)
	per := len(two) - len(one)
	// Later candidates have longer names than the first two: step down
	// until the document fits.
	for n := max(1, (size-len(one))/per); ; n -= 1 + n/500 {
		if doc, revision := build(n); len(doc) <= size || n <= 1 {
			return doc, revision
		}
	}
}
