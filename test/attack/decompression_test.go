package attack

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"
	"github.com/stretchr/testify/require"

	"github.com/gridsync/gridsync/shared/envelope"
	"github.com/gridsync/gridsync/shared/overlaysync"
	"github.com/gridsync/gridsync/test/measure"
	"github.com/gridsync/gridsync/test/testproc"
)

// bombExpansion is what each bomb expands to: a gigabyte of zeros
// compresses to a few tens of KiB, well within a ConfigMap.
const bombExpansion = 1 << 30

// A writer of the overlay ConfigMap puts compressed forms that expand far
// past what the sidecar may hold (32 MiB in the chart) after it delivered
// a good overlay: a frame that declares a gigabyte, one that declares a
// small size and holds a gigabyte, one that declares nothing, and a valid
// envelope's frame followed by a gigabyte in frames that each declare the
// size bound. Each is refused before it is expanded; the last good file
// keeps serving, the sidecar stays ready and takes the next good update,
// and its memory never leaves the chart's limit.
func TestSidecarDecompressionBomb(t *testing.T) {
	s := startSidecar(t)
	good, _ := s.pod.Envelope(2)
	s.pod.PutCompressed(good)
	waitForOutput(t, s, good)
	peakBefore := measure.MustPeakRSSMiB(t, s.Cmd.Process.Pid)

	maxBytes := envelope.DefaultMaxBytes // the chart's default --max-bytes
	next, _ := s.pod.Envelope(3)
	bombs := []struct {
		name   string
		frame  []byte
		reason envelope.Reason
	}{
		{"declares_a_gigabyte", zerosFrame(t, bombExpansion, true), envelope.ReasonOversized},
		{"declares_less_than_it_holds", declaringSize(t, zerosFrame(t, bombExpansion, true), 64<<10), envelope.ReasonMalformedStructure},
		{"declares_nothing", zerosFrame(t, bombExpansion, false), envelope.ReasonMalformedStructure},
		{"frames_after_a_valid_one", append(envelope.Compress(next), bytes.Repeat(envelope.Compress(make([]byte, maxBytes)), bombExpansion/maxBytes)...), envelope.ReasonMalformedStructure},
	}

	// The full form sends the four again and again: refusals must not add
	// up to what one expansion would cost.
	rounds := size(10, 1)
	refused, sent, unchanged, ready := 0, 0, true, true
	reasons := make([]string, len(bombs))
	var lastRejection time.Time
	for range rounds {
		for i, bomb := range bombs {
			sent++
			st, handled := waitHandled(t, s, s.pod.PutBinary(bomb.frame))
			reasons[i] = bomb.name + ":" + st.LastRejectionReason
			if handled && st.LastRejectionReason == string(bomb.reason) && st.LastRejectionAt.After(lastRejection) {
				refused++ // this bomb's own refusal, not the one before it
			}
			lastRejection = st.LastRejectionAt
			after, err := os.ReadFile(s.pod.Output())
			unchanged = unchanged && err == nil && bytes.Equal(after, good)
			code, _ := testproc.Get(t, "http://"+s.probe+"/readyz")
			ready = ready && code == http.StatusOK
		}
	}
	sizes := make([]string, len(bombs))
	for i, bomb := range bombs {
		sizes[i] = fmt.Sprintf("%s:%d", bomb.name, len(bomb.frame)>>10)
	}

	// The next good update is delivered compressed, as the bombs came.
	s.pod.PutCompressed(next)
	delivered := outputBecomes(s, next, 10*time.Second)
	peak := measure.MustPeakRSSMiB(t, s.Cmd.Process.Pid)

	report(t, "decompression_bomb",
		refused == sent && unchanged && ready && delivered && s.Running() && peak < sidecarMemoryLimitMiB,
		figure{"bombs", len(bombs)}, figure{"rounds", rounds}, figure{"expands_mib_each", bombExpansion >> 20}, figure{"configmap_kib", strings.Join(sizes, ",")},
		figure{"max_bytes", maxBytes}, figure{"refused", fmt.Sprintf("%d/%d", refused, sent)}, figure{"reasons", strings.Join(reasons, ",")},
		figure{"last_good_unchanged", unchanged}, figure{"still_ready", ready}, figure{"next_update_delivered", delivered},
		figure{"sidecar_rss_peak_before_mib", peakBefore}, figure{"sidecar_rss_peak_mib", peak}, figure{"limit_mib", sidecarMemoryLimitMiB})
}

// zerosFrame is one zstd frame of n zeros, compressed as a stream (the
// zeros never held at once), declaring n when declare is set and no size
// otherwise.
func zerosFrame(t *testing.T, n int, declare bool) []byte {
	t.Helper()
	enc, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderConcurrency(1))
	require.NoError(t, err)
	var buf bytes.Buffer
	if declare {
		enc.ResetContentSize(&buf, int64(n))
	} else {
		enc.Reset(&buf)
	}
	chunk := make([]byte, 1<<20)
	for left := n; left > 0; left -= len(chunk) {
		_, err := enc.Write(chunk[:min(left, len(chunk))])
		require.NoError(t, err)
	}
	require.NoError(t, enc.Close())
	var h zstd.Header
	require.NoError(t, h.Decode(buf.Bytes()))
	require.Equal(t, declare, h.HasFCS, "the frame declares its size when asked to, and only then")
	return buf.Bytes()
}

// declaringSize rewrites a frame's declared content size (its 4-byte
// field, the last of the header) to n, leaving its blocks: the frame then
// holds far more than it declares.
func declaringSize(t *testing.T, frame []byte, n uint32) []byte {
	t.Helper()
	var h zstd.Header
	require.NoError(t, h.Decode(frame))
	require.True(t, h.HasFCS)
	require.Equal(t, byte(2), frame[4]>>6, "a 4-byte size field")
	binary.LittleEndian.PutUint32(frame[h.HeaderSize-4:h.HeaderSize], n)
	require.NoError(t, h.Decode(frame))
	require.Equal(t, uint64(n), h.FrameContentSize)
	return frame
}

// waitHandled waits up to 20 s for the sidecar's /status to name
// resourceVersion rv as the last one it handled, and returns that status
// and whether it did.
func waitHandled(t *testing.T, s *sidecar, rv string) (overlaysync.Status, bool) {
	t.Helper()
	var st overlaysync.Status
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		_, body := testproc.Get(t, "http://"+s.health+"/status")
		st = overlaysync.Status{}
		if json.Unmarshal([]byte(body), &st) == nil && st.Source.ResourceVersion == rv {
			return st, true
		}
	}
	return st, false
}

// outputBecomes says whether the published file holds doc within wait.
func outputBecomes(s *sidecar, doc []byte, wait time.Duration) bool {
	for deadline := time.Now().Add(wait); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if got, err := os.ReadFile(s.pod.Output()); err == nil && bytes.Equal(got, doc) {
			return true
		}
	}
	return false
}

func waitForOutput(t *testing.T, s *sidecar, doc []byte) {
	t.Helper()
	require.True(t, outputBecomes(s, doc, 10*time.Second), "the good overlay was not delivered")
}
