package testenvelope

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gridsync/gridsync/shared/envelope"
)

// Payload is an envelope in one of the overlay ConfigMap's forms, encoded
// once when it is made, so that a benchmark can prepare its payloads
// before it starts timing.
//
// The plain form is the envelope alone under its data key: the bare
// overlay a producer writes beside it is left out, as the benchmarks have
// always left it (the sidecar reads only the envelope, and at 1 MiB the
// two copies would not fit a ConfigMap's 1 MiB). The compressed form is
// what a producer writes: one zstd frame of the envelope under the
// binaryData key, and nothing else.
type Payload struct {
	Encoding string // envelope.EncodingPlain or envelope.EncodingZstd
	data     []byte // what the ConfigMap carries under its key
}

// Encode returns doc in the given form.
func Encode(tb testing.TB, doc []byte, encoding string) Payload {
	tb.Helper()
	switch encoding {
	case envelope.EncodingPlain:
		return Payload{Encoding: encoding, data: doc}
	case envelope.EncodingZstd:
		return Payload{Encoding: encoding, data: envelope.Compress(doc)}
	default:
		tb.Fatalf("no overlay encoding %q", encoding)
		return Payload{}
	}
}

// Len is the size of what the ConfigMap carries: the compressed frame's
// for the compressed form.
func (p Payload) Len() int { return len(p.data) }

// ConfigMap returns the ConfigMap name carrying the payload.
func (p Payload) ConfigMap(name string) *corev1.ConfigMap {
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if p.Encoding == envelope.EncodingZstd {
		cm.BinaryData = map[string][]byte{envelope.CompressedKey(envelope.DataKeyEnvelope): p.data}
	} else {
		cm.Data = map[string]string{envelope.DataKeyEnvelope: string(p.data)}
	}
	return cm
}
