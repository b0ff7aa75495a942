package overlay

import (
	"fmt"
	"math"

	corev1 "k8s.io/api/core/v1"

	"github.com/gridsync/gridsync/api/v1alpha1"
	"github.com/gridsync/gridsync/delivery/fold"
	"github.com/gridsync/gridsync/shared/envelope"
)

// DefaultCompressAbove is the envelope size from which a network of
// overlayEncoding Auto compresses a gateway's overlay (when every pod of
// the gateway reads the compressed form).
const DefaultCompressAbove = 128 << 10

// chooseEncoding decides the form of a gateway's overlay ConfigMap and
// says why. Plain is the contract's form, which every consumer reads: it
// is kept unless the network asks for the compressed form, or every pod
// that reports reads it and the envelope is large enough for it to pay (or
// a pod asks for it). A gateway none of whose pods report (an upstream
// sidecar, or none yet) keeps the plain form.
func chooseEncoding(setting v1alpha1.OverlayEncoding, readers fold.Readers, envelopeBytes, compressAbove int) (encoding, why string) {
	switch setting {
	case v1alpha1.OverlayEncodingPlain:
		return envelope.EncodingPlain, "the network's overlayEncoding is Plain"
	case v1alpha1.OverlayEncodingZstd:
		return envelope.EncodingZstd, "the network's overlayEncoding is Zstd"
	}
	switch {
	case readers.Pods == 0:
		return envelope.EncodingPlain, "no pod of the gateway reports which forms it reads"
	case readers.PlainOnly > 0:
		return envelope.EncodingPlain, fmt.Sprintf("%d of the gateway's %d reporting pods read only the plain form", readers.PlainOnly, readers.Pods)
	case readers.AskPlain > 0:
		return envelope.EncodingPlain, fmt.Sprintf("%d of the gateway's pods ask for the plain form", readers.AskPlain)
	case readers.AskZstd > 0:
		return envelope.EncodingZstd, fmt.Sprintf("%d of the gateway's pods ask for the compressed form", readers.AskZstd)
	case envelopeBytes >= compressAbove:
		return envelope.EncodingZstd, fmt.Sprintf("the envelope's %d bytes are at least %d and every reporting pod reads the compressed form", envelopeBytes, compressAbove)
	default:
		return envelope.EncodingPlain, fmt.Sprintf("the envelope's %d bytes are under %d", envelopeBytes, compressAbove)
	}
}

// maxEnvelopeBytes is the largest envelope the agent publishes to a
// gateway: its own bound, or the smallest its pods report when smaller,
// and which of the two it is, for the status message.
func maxEnvelopeBytes(agentMax int, readers fold.Readers) (int, string) {
	if readers.MaxBytes > 0 && readers.MaxBytes < agentMax {
		return readers.MaxBytes, "the largest envelope the gateway's pods accept (their --max-bytes)"
	}
	return agentMax, "the agent's --max-overlay-bytes"
}

// storedEnvelope is the envelope an overlay ConfigMap holds, in either
// form, and the form; a compressed one is read within maxBytes.
func storedEnvelope(cm *corev1.ConfigMap, maxBytes int) ([]byte, string, error) {
	if doc, ok := cm.Data[envelope.DataKeyEnvelope]; ok {
		return []byte(doc), envelope.EncodingPlain, nil
	}
	packed, ok := cm.BinaryData[envelope.CompressedKey(envelope.DataKeyEnvelope)]
	if !ok {
		return nil, "", fmt.Errorf("ConfigMap %s/%s holds no overlay", cm.Namespace, cm.Name)
	}
	doc, err := envelope.Decompress(packed, maxBytes)
	return doc, envelope.EncodingZstd, err
}

// ReadersChangeMatters reports whether a change of what a network's
// gateway pods read would change what is published to one of its gateways:
// another form, an envelope now over a pod's bound, or an overlay refused
// as too large that may now fit. Anything else a report says renders
// nothing (a thousand pods of one gateway report their first state at
// once, and each would otherwise render the network again).
func ReadersChangeMatters(network *v1alpha1.GridNetwork, readers func(namespace, gateway string) fold.Readers, agentMax, compressAbove int) bool {
	for _, st := range network.Status.OverlayStatus {
		if st.Reason == ReasonOverlayTooLarge {
			return true
		}
		r := readers(st.Namespace, st.GatewayName)
		if st.EnvelopeBytes == 0 {
			// Its size not known yet (its status predates this release,
			// or is being written): rendered once if it could go out
			// compressed.
			if encoding, _ := chooseEncoding(network.Spec.OverlayEncoding, r, math.MaxInt, compressAbove); encoding == envelope.EncodingZstd {
				return true
			}
			continue
		}
		current := st.Encoding
		if current == "" {
			current = envelope.EncodingPlain
		}
		if encoding, _ := chooseEncoding(network.Spec.OverlayEncoding, r, int(st.EnvelopeBytes), compressAbove); encoding != current {
			return true
		}
		if limit, _ := maxEnvelopeBytes(agentMax, r); int(st.EnvelopeBytes) > limit {
			return true
		}
	}
	return false
}
