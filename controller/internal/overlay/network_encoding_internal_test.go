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

func TestReadersChangeMatters(t *testing.T) {
	const above = 128 << 10
	status := func(entries ...v1alpha1.GatewayOverlayStatus) *v1alpha1.GridNetwork {
		return &v1alpha1.GridNetwork{Status: v1alpha1.GridNetworkStatus{OverlayStatus: entries}}
	}
	plainBig := v1alpha1.GatewayOverlayStatus{Namespace: "ns", GatewayName: "gw", Encoding: envelope.EncodingPlain, EnvelopeBytes: 200 << 10}
	plainSmall := plainBig
	plainSmall.EnvelopeBytes = 10 << 10
	readers := func(r fold.Readers) func(string, string) fold.Readers {
		return func(string, string) fold.Readers { return r }
	}
	assert.False(t, ReadersChangeMatters(status(plainSmall), readers(fold.Readers{Pods: 1000}), 1<<20, above),
		"a small overlay stays plain however many pods read the compressed form")
	assert.True(t, ReadersChangeMatters(status(plainBig), readers(fold.Readers{Pods: 3}), 1<<20, above),
		"a large plain overlay every pod now reads compressed")
	assert.False(t, ReadersChangeMatters(status(plainBig), readers(fold.Readers{Pods: 3, PlainOnly: 1}), 1<<20, above))
	assert.True(t, ReadersChangeMatters(status(plainSmall), readers(fold.Readers{Pods: 3, MaxBytes: 1 << 10}), 1<<20, above),
		"now over a pod's bound")
	tooLarge := v1alpha1.GatewayOverlayStatus{Namespace: "ns", GatewayName: "gw", Reason: ReasonOverlayTooLarge}
	assert.True(t, ReadersChangeMatters(status(tooLarge), readers(fold.Readers{}), 1<<20, above), "a refused overlay may fit now")
	unknown := v1alpha1.GatewayOverlayStatus{Namespace: "ns", GatewayName: "gw"}
	assert.True(t, ReadersChangeMatters(status(unknown), readers(fold.Readers{Pods: 3}), 1<<20, above),
		"its size not known: rendered once when it could go out compressed")
	assert.False(t, ReadersChangeMatters(status(unknown), readers(fold.Readers{Pods: 3, PlainOnly: 1}), 1<<20, above))
}
