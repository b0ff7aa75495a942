package overlay

import (
	"fmt"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gridsync/gridsync/api/v1alpha1"
	"github.com/gridsync/gridsync/controller/internal/base"
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

// formDecision is what one gateway's last publication decided and from
// what: the readers it saw, the network's setting and the envelope's size.
type formDecision struct {
	network       string
	setting       v1alpha1.OverlayEncoding
	readers       fold.Readers
	envelopeBytes int
	tooLarge      bool
}

// formDecisions holds each gateway's last decision, written when it is
// made (before the apply), so that a report arriving meanwhile is judged
// against what that publication saw, not a status not written yet.
type formDecisions struct{ m sync.Map } // types.NamespacedName -> formDecision

func (d *formDecisions) set(gw types.NamespacedName, fd formDecision) { d.m.Store(gw, fd) }

func (d *formDecisions) forget(gw types.NamespacedName) { d.m.Delete(gw) }

// forgetNetwork drops every decision of a network (deleted, or gone).
func (d *formDecisions) forgetNetwork(network string) {
	d.m.Range(func(k, v any) bool {
		if v.(formDecision).network == network {
			d.m.Delete(k)
		}
		return true
	})
}

// ReadersChangeMatters reports whether a change of what a network's
// gateway pods read would change what is published to one of its
// gateways: another form, an envelope now over a pod's bound or back under
// it, or an overlay refused as too large that may now fit. Anything else a
// report says renders nothing (a thousand pods of one gateway report their
// first state at once, and each would otherwise render the network again).
// A network not published since the agent started is rendered.
func (r *Reconciler) ReadersChangeMatters(network string, readers func(namespace, gateway string) fold.Readers) bool {
	matters, known := false, false
	r.decisions.m.Range(func(k, v any) bool {
		d := v.(formDecision)
		if d.network != network {
			return true
		}
		known = true
		gw := k.(types.NamespacedName)
		now := readers(gw.Namespace, gw.Name)
		if d.tooLarge || decide(d.setting, now, d.envelopeBytes, r.Opts) != decide(d.setting, d.readers, d.envelopeBytes, r.Opts) {
			matters = true
			return false
		}
		return true
	})
	return matters || !known
}

// decide is what a publication chooses from its inputs: the form, and
// whether the envelope is within the bound.
func decide(setting v1alpha1.OverlayEncoding, readers fold.Readers, envelopeBytes int, opts base.Config) [2]string {
	encoding, _ := chooseEncoding(setting, readers, envelopeBytes, opts.CompressOverlaysAbove)
	limit, _ := maxEnvelopeBytes(opts.MaxOverlayBytes, readers)
	within := "within"
	if envelopeBytes > limit {
		within = "over"
	}
	return [2]string{encoding, within}
}
