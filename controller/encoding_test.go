package controller_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"

	"github.com/gridsync/gridsync/api/v1alpha1"
	"github.com/gridsync/gridsync/controller"
	deliveryreport "github.com/gridsync/gridsync/delivery/report"
	"github.com/gridsync/gridsync/shared/envelope"
)

// readsBoth is what a current sidecar reports of the forms it reads.
func readsBoth(encoding string, maxBytes int) func(*deliveryreport.Report) {
	return func(r *deliveryreport.Report) {
		r.Reads = []string{deliveryreport.FormPlain, deliveryreport.FormZstd}
		r.Encoding, r.MaxBytes = encoding, maxBytes
	}
}

// formOf says which form an overlay ConfigMap holds, and fails the test
// when it holds both or mixes them.
func formOf(t *testing.T, cm *corev1.ConfigMap) string {
	t.Helper()
	_, plain := cm.Data[envelope.DataKeyEnvelope]
	_, bare := cm.Data[envelope.DataKeyBare]
	_, packed := cm.BinaryData[envelope.CompressedKey(envelope.DataKeyEnvelope)]
	switch {
	case plain && bare && !packed:
		require.NotContains(t, cm.Annotations, envelope.AnnotationEncoding, "the plain form carries the contract's annotations only")
		return envelope.EncodingPlain
	case packed && !plain && !bare:
		require.Equal(t, envelope.EncodingZstd, cm.Annotations[envelope.AnnotationEncoding])
		return envelope.EncodingZstd
	}
	t.Fatalf("ConfigMap %s holds plain=%t bare=%t compressed=%t", cm.Name, plain, bare, packed)
	return ""
}

// awaitForm waits until the gateway's overlay ConfigMap holds form, and
// form alone.
func (e *env) awaitForm(network *v1alpha1.GridNetwork, gw v1alpha1.ConsumerGateway, form, what string) {
	e.t.Helper()
	var cm *corev1.ConfigMap
	e.eventually(what, func() (bool, string) {
		cm, _ = e.overlayOf(network, gw, anyRevision)
		got := envelope.FormOf(cm.Data, cm.BinaryData, envelope.DataKeyEnvelope)
		return got == form, got
	})
	formOf(e.t, cm)
}

// The overlay's form follows what the gateway's pods report they read:
// plain while none reports, compressed once every reporting pod reads it
// (the pods deliver the same envelope from it), plain again when a pod
// that reads only the plain form joins; the network's setting forces
// either form; a pod's size bound refuses a larger envelope while the
// last one published stays.
func TestOverlayFormFollowsWhatTheGatewayPodsRead(t *testing.T) {
	e := newEnv(t)
	agg := e.watchedReports()
	gw := e.gateway("edge", "east")
	network := e.network(gw)
	e.create(network)
	provider := e.provider("llm", network.Name, "m1")
	e.create(provider)
	// Every overlay compresses here: the point is the choice, not the size.
	e.startAgent(withDeliveries(agg), func(o *controller.ManagerOptions) { o.CompressOverlaysAbove = 1 })
	listener := e.startReportListener(agg)
	status := func(ok func(v1alpha1.GatewayOverlayStatus) bool) v1alpha1.GatewayOverlayStatus {
		return e.gatewayStatus(network, gw.Name, ok)
	}

	cm, first := e.overlayOf(network, gw, anyRevision)
	assert.Equal(t, envelope.EncodingPlain, formOf(t, cm), "no pod reports yet")

	a := e.startPodReporting(network, gw, "edge-a", listener, readsBoth("auto", 4<<20))
	b := e.startPodReporting(network, gw, "edge-b", listener, readsBoth("auto", 4<<20))
	e.awaitForm(network, gw, envelope.EncodingZstd, "the compressed form")
	st := status(func(s v1alpha1.GatewayOverlayStatus) bool { return s.Encoding == envelope.EncodingZstd })
	assert.Positive(t, st.EnvelopeBytes)
	e.eventually("both pods on the first revision", func() (bool, string) {
		return a.revision() == first.Revision && b.revision() == first.Revision, a.revision() + " " + b.revision()
	})

	// A change travels compressed to both pods.
	update(e, provider, func(p *v1alpha1.InferenceProvider) { p.Spec.Models = append(p.Spec.Models, v1alpha1.Model{Name: "m2"}) })
	cm, second := e.overlayOf(network, gw, func(r envelope.Result) bool { return r.Revision != first.Revision })
	assert.Equal(t, envelope.EncodingZstd, formOf(t, cm))
	e.eventually("both pods on the second revision", func() (bool, string) {
		return a.revision() == second.Revision && b.revision() == second.Revision, a.revision() + " " + b.revision()
	})

	// A pod whose sidecar predates the compressed form: plain again, and
	// it delivers.
	old := e.startPod(network, gw, "edge-old", listener)
	e.awaitForm(network, gw, envelope.EncodingPlain, "the plain form again")
	e.eventually("the old pod delivers", func() (bool, string) { return old.revision() == second.Revision, old.revision() })

	// The network's setting wins over the pods'.
	update(e, network, func(n *v1alpha1.GridNetwork) { n.Spec.OverlayEncoding = v1alpha1.OverlayEncodingZstd })
	e.awaitForm(network, gw, envelope.EncodingZstd, "forced compressed")
	old.stopSync()
	old.stopReport()
	update(e, network, func(n *v1alpha1.GridNetwork) { n.Spec.OverlayEncoding = v1alpha1.OverlayEncodingPlain })
	e.awaitForm(network, gw, envelope.EncodingPlain, "forced plain")
	_, before := e.overlayOf(network, gw, anyRevision)

	// A pod that accepts no more than 100 bytes: as soon as it reports,
	// the published envelope is over its bound (the status says so, the
	// last revision stays), and a new one is not published either.
	e.startPodReporting(network, gw, "edge-small", listener, readsBoth("auto", 100))
	st = status(func(s v1alpha1.GatewayOverlayStatus) bool { return s.Reason == "OverlayTooLarge" })
	assert.Contains(t, st.Message, "over 100, the largest envelope the gateway's pods accept")
	update(e, provider, func(p *v1alpha1.InferenceProvider) { p.Spec.Models = append(p.Spec.Models, v1alpha1.Model{Name: "m3"}) })
	status(func(s v1alpha1.GatewayOverlayStatus) bool {
		return s.Reason == "OverlayTooLarge" && s.RenderedRevision != "" && s.RenderedRevision != before.Revision
	})
	cm, kept := e.overlayOf(network, gw, anyRevision)
	assert.Equal(t, before.Revision, kept.Revision, "the last published revision stays")
	assert.Equal(t, envelope.EncodingPlain, formOf(t, cm))
}

// An overlay of several megabytes: too large for the plain form's two
// copies in a ConfigMap, it is refused (the status says why) until the
// gateway's pods report that they read the compressed form; then it is
// published compressed, and both pods deliver it.
func TestAnOverlayOfSeveralMegabytesIsDeliveredCompressed(t *testing.T) {
	e := newEnv(t)
	agg := e.watchedReports()
	gw := e.gateway("edge", "east")
	network := e.network(gw)
	e.create(network)
	// 24 providers of 256 models with long names: about 3 MiB of envelope.
	for i := range 24 {
		models := make([]string, 256)
		for j := range models {
			models[j] = fmt.Sprintf("%s-%03d-%03d", strings.Repeat("a-very-long-model-name", 10), i, j)
		}
		e.create(e.provider(fmt.Sprintf("llm-%02d", i), network.Name, models...))
	}
	e.startAgent(withDeliveries(agg), func(o *controller.ManagerOptions) { o.MaxOverlayBytes = 4 << 20 })
	listener := e.startReportListener(agg)

	st := e.gatewayStatus(network, gw.Name, func(s v1alpha1.GatewayOverlayStatus) bool {
		return s.Reason == "OverlayTooLarge" && s.CandidateCount == 24*256
	})
	assert.Contains(t, st.Message, "the overlay's two copies take")
	assert.Contains(t, st.Message, "no pod of the gateway reports which forms it reads")
	require.Greater(t, st.EnvelopeBytes, int64(3<<20))
	require.Less(t, st.EnvelopeBytes, int64(4<<20))

	a := e.startPodReporting(network, gw, "edge-a", listener, readsBoth("auto", 4<<20))
	b := e.startPodReporting(network, gw, "edge-b", listener, readsBoth("auto", 4<<20))
	st = e.gatewayStatus(network, gw.Name, func(s v1alpha1.GatewayOverlayStatus) bool { return s.Phase == v1alpha1.OverlayDistributed })
	assert.Equal(t, envelope.EncodingZstd, st.Encoding)
	cm, res := e.overlayOf(network, gw, anyRevision)
	assert.Equal(t, envelope.EncodingZstd, formOf(t, cm))
	assert.Equal(t, 24*256, res.CandidateCount)
	packed := cm.BinaryData[envelope.CompressedKey(envelope.DataKeyEnvelope)]
	t.Logf("envelope %d bytes, compressed %d", st.EnvelopeBytes, len(packed))
	e.eventually("both pods deliver the large overlay", func() (bool, string) {
		return a.revision() == res.Revision && b.revision() == res.Revision, a.revision() + " " + b.revision()
	})
}
