package overlay

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gridsync/gridsync/api/v1alpha1"
	"github.com/gridsync/gridsync/controller/internal/base"
	"github.com/gridsync/gridsync/delivery/fold"
	"github.com/gridsync/gridsync/shared/envelope"
)

func TestChooseEncoding(t *testing.T) {
	const above = 128 << 10
	all := fold.Readers{Pods: 3}
	for _, c := range []struct {
		name    string
		setting v1alpha1.OverlayEncoding
		readers fold.Readers
		size    int
		want    string
	}{
		{"no pod reports", "", fold.Readers{}, 1 << 20, envelope.EncodingPlain},
		{"every pod reads it, large", "", all, above, envelope.EncodingZstd},
		{"every pod reads it, small", "", all, above - 1, envelope.EncodingPlain},
		{"explicit Auto is the default", v1alpha1.OverlayEncodingAuto, all, above, envelope.EncodingZstd},
		{"a pod reads only plain", "", fold.Readers{Pods: 3, PlainOnly: 1}, 1 << 20, envelope.EncodingPlain},
		{"a pod asks for plain", "", fold.Readers{Pods: 3, AskPlain: 1, AskZstd: 1}, 1 << 20, envelope.EncodingPlain},
		{"a pod asks for zstd, small", "", fold.Readers{Pods: 3, AskZstd: 1}, 10, envelope.EncodingZstd},
		{"a pod asking for zstd does not override one reading only plain", "", fold.Readers{Pods: 3, AskZstd: 2, PlainOnly: 1}, 1 << 20, envelope.EncodingPlain},
		{"the network forces zstd", v1alpha1.OverlayEncodingZstd, fold.Readers{}, 10, envelope.EncodingZstd},
		{"the network forces plain", v1alpha1.OverlayEncodingPlain, fold.Readers{Pods: 3, AskZstd: 3}, 1 << 20, envelope.EncodingPlain},
	} {
		got, why := chooseEncoding(c.setting, c.readers, c.size, above)
		assert.Equal(t, c.want, got, c.name)
		assert.NotEmpty(t, why, c.name)
	}
}

func TestMaxEnvelopeBytes(t *testing.T) {
	got, _ := maxEnvelopeBytes(1<<20, fold.Readers{})
	assert.Equal(t, 1<<20, got, "nobody reports a bound: the agent's")
	got, why := maxEnvelopeBytes(1<<20, fold.Readers{Pods: 2, MaxBytes: 512 << 10})
	assert.Equal(t, 512<<10, got)
	assert.Contains(t, why, "pods accept")
	got, _ = maxEnvelopeBytes(1<<20, fold.Readers{Pods: 2, MaxBytes: 4 << 20})
	assert.Equal(t, 1<<20, got, "the agent's own bound holds when the pods accept more")
}

func TestReadersChangeMatters(t *testing.T) {
	r := &Reconciler{Env: &base.Env{Opts: base.Config{MaxOverlayBytes: 1 << 20, CompressOverlaysAbove: 128 << 10}}}
	gw := types.NamespacedName{Namespace: "ns", Name: "gw"}
	readers := func(now fold.Readers) func(string, string) fold.Readers {
		return func(string, string) fold.Readers { return now }
	}
	assert.True(t, r.ReadersChangeMatters("net", readers(fold.Readers{})), "a network not published since the start is rendered")

	r.decisions.set(gw, formDecision{network: "net", envelopeBytes: 10 << 10})
	assert.False(t, r.ReadersChangeMatters("net", readers(fold.Readers{Pods: 1000})),
		"a small overlay stays plain however many pods read the compressed form")
	assert.True(t, r.ReadersChangeMatters("net", readers(fold.Readers{Pods: 3, MaxBytes: 1 << 10})), "now over a pod's bound")

	r.decisions.set(gw, formDecision{network: "net", envelopeBytes: 200 << 10})
	assert.True(t, r.ReadersChangeMatters("net", readers(fold.Readers{Pods: 3})), "a large overlay every pod now reads compressed")
	assert.False(t, r.ReadersChangeMatters("net", readers(fold.Readers{Pods: 3, PlainOnly: 1})))

	// Judged against what the publication saw, not what a status says: a
	// plain-only pod arriving after a compressed decision matters.
	r.decisions.set(gw, formDecision{network: "net", readers: fold.Readers{Pods: 2}, envelopeBytes: 200 << 10})
	assert.True(t, r.ReadersChangeMatters("net", readers(fold.Readers{Pods: 3, PlainOnly: 1})))
	assert.False(t, r.ReadersChangeMatters("net", readers(fold.Readers{Pods: 3})), "another pod like the others")

	r.decisions.set(gw, formDecision{network: "net", envelopeBytes: 3 << 20, tooLarge: true})
	assert.True(t, r.ReadersChangeMatters("net", readers(fold.Readers{})), "a refused overlay may fit now")

	r.decisions.forgetNetwork("net")
	assert.True(t, r.ReadersChangeMatters("net", readers(fold.Readers{})), "forgotten: rendered")
}
