package overlaysync_test

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gridsync/gridsync/shared/envelope"
	"github.com/gridsync/gridsync/shared/overlaysync"
)

// putBinary replaces the ConfigMap with binaryData only and returns its
// resourceVersion.
func (g *gateway) putBinary(binary map[string][]byte) string {
	g.t.Helper()
	return g.putConfigMap(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: g.configMap}, BinaryData: binary})
}

// putCompressed replaces the ConfigMap with the compressed form of doc.
func (g *gateway) putCompressed(doc []byte) string {
	return g.putBinary(map[string][]byte{envelope.CompressedKey(envelope.DataKeyEnvelope): envelope.Compress(doc)})
}

// The compressed form delivers the same file as the plain one, a switch
// between the forms either way included; an overlay several times the
// ConfigMap limit is delivered compressed when the size bound allows it.
func TestDeliversTheCompressedForm(t *testing.T) {
	g := newGateway(t)
	opts := g.options()
	opts.MaxBytes = 8 << 20
	r := g.start(opts)

	plain, rev1 := g.envelopeFor(1)
	st := r.waitObserved(t, g.putEnvelope(plain))
	require.Equal(t, rev1, st.WrittenRevision)

	big, rev2 := buildEnvelope(t, g.scope, 2, 20000) // several MiB: it fits a ConfigMap only compressed
	require.Greater(t, len(big), 4<<20)
	st = r.waitObserved(t, g.putCompressed(big))
	assert.Equal(t, overlaysync.StateReady, st.State)
	assert.Equal(t, rev2, st.WrittenRevision)
	assert.Equal(t, len(big), st.PayloadBytes, "the payload is the envelope, not its compressed form")
	assert.True(t, readOutput(t, g.output()) == string(big), "the file holds the canonical envelope")

	back, rev3 := g.envelopeFor(3)
	st = r.waitObserved(t, g.putEnvelope(back))
	assert.Equal(t, rev3, st.WrittenRevision)
	assert.True(t, readOutput(t, g.output()) == string(back), "the file holds the plain envelope again")
}

// Every compressed form the sidecar cannot take is refused with its
// reason while the last good file keeps serving: one that declares more
// than the size bound (a decompression bomb), one that is no zstd frame,
// one whose envelope was tampered with before it was compressed (the
// digest is the decompressed envelope's), and a ConfigMap with neither
// form. (A frame that holds more than it declares: the envelope package's
// tests and the attack suite's decompression_bomb.)
func TestRefusesBadCompressedFormsAndKeepsTheLastGoodFile(t *testing.T) {
	g := newGateway(t)
	opts := g.options()
	opts.MaxBytes = 1 << 20
	r := g.start(opts)
	good, rev := g.envelopeFor(1)
	r.waitObserved(t, g.putCompressed(good))

	forged, _ := g.envelopeFor(2)
	forged = []byte(strings.Replace(string(forged), `"model-east"`, `"model-evil"`, 1)) // the digest no longer matches

	key := envelope.CompressedKey(envelope.DataKeyEnvelope)
	for _, c := range []struct {
		name   string
		binary map[string][]byte
		reason string
	}{
		{"a bomb: 64 MiB of zeros in a few KiB", map[string][]byte{key: envelope.Compress(make([]byte, 64<<20))}, string(envelope.ReasonOversized)},
		{"not zstd", map[string][]byte{key: good}, string(envelope.ReasonMalformedStructure)},
		{"tampered before compression", map[string][]byte{key: envelope.Compress(forged)}, string(envelope.ReasonDigestMismatch)},
		{"neither form", map[string][]byte{"other": {1}}, overlaysync.ReasonMissingDataKey},
	} {
		t.Run(c.name, func(t *testing.T) {
			st := r.waitObserved(t, g.putBinary(c.binary))
			assert.Equal(t, c.reason, st.LastRejectionReason)
			assert.Equal(t, rev, st.WrittenRevision, "the last good revision keeps serving")
			assert.True(t, readOutput(t, g.output()) == string(good), "the last good file is in place")
		})
	}
}

// An envelope that came compressed is put back whole when its file goes
// missing (it is held compressed meanwhile: TestAKeptEnvelopeIsHeldCompressedWhenItCameSo).
func TestACompressedLastGoodIsPutBackWhole(t *testing.T) {
	g := newGateway(t)
	opts := g.options()
	opts.MaxBytes = 8 << 20
	opts.RetryWrite = 100 * time.Millisecond
	r := g.start(opts)
	doc, revision := buildEnvelope(t, g.scope, 1, 20000)
	st := r.waitObserved(t, g.putCompressed(doc))
	require.Equal(t, revision, st.WrittenRevision)

	require.NoError(t, os.Remove(g.output()))
	require.Eventually(t, func() bool {
		data, err := os.ReadFile(g.output())
		return err == nil && string(data) == string(doc)
	}, 10*time.Second, 10*time.Millisecond, "the removed output is put back, decompressed")
	r.waitStatus(t, "back and no longer degraded", func(st overlaysync.Status) bool { return !st.Degraded })
}
