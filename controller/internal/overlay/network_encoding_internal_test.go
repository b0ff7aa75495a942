package overlay

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/gridsync/gridsync/api/v1alpha1"
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
