package envelope_test

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"io"
	"runtime"
	"testing"

	"github.com/klauspost/compress/zstd"
	"github.com/stretchr/testify/require"

	"github.com/gridsync/gridsync/shared/envelope"
)

func TestCompressedFormRoundTripsAndValidates(t *testing.T) {
	for _, size := range []int{1 << 10, 64 << 10, 1 << 20, 4 << 20} {
		doc := benchEnvelope(t, size)
		packed := envelope.Compress(doc)
		if size >= 64<<10 {
			require.Less(t, len(packed), len(doc)/3, "a routing overlay of %d bytes compresses at least threefold", len(doc))
		}
		got, err := envelope.Decompress(packed, 4<<20)
		require.NoError(t, err)
		require.Equal(t, doc, got)
		_, err = envelope.Validate(got, envelope.Options{MaxBytes: 4 << 20})
		require.NoError(t, err)
	}
}

// Every size declares itself, the smallest included (a frame of 1 to 255
// bytes declares nothing unless it is a single segment).
func TestEverySizeRoundTrips(t *testing.T) {
	for _, n := range []int{0, 1, 26, 255, 256, 70000} {
		doc := bytes.Repeat([]byte("x"), n)
		got, err := envelope.Decompress(envelope.Compress(doc), 1<<20)
		require.NoError(t, err, "%d bytes", n)
		require.Equal(t, doc, got)
	}
}

func TestDecompressRefusesBeforeSpending(t *testing.T) {
	zeros := func(n int) []byte { return make([]byte, n) }
	streamed := func(p []byte) []byte { // a streaming writer does not know the size: no declared size
		var buf bytes.Buffer
		w, err := zstd.NewWriter(&buf)
		require.NoError(t, err)
		_, err = w.Write(p)
		require.NoError(t, err)
		require.NoError(t, w.Close())
		var h zstd.Header
		require.NoError(t, h.Decode(buf.Bytes()))
		require.False(t, h.HasFCS, "the streamed frame declares no size")
		return buf.Bytes()
	}
	corrupt := envelope.Compress(benchEnvelope(t, 64<<10))
	corrupt[len(corrupt)/2] ^= 0xff
	cases := []struct {
		name   string
		src    []byte
		max    int
		reason envelope.Reason
	}{
		{"not zstd", []byte(`{"schema_version":"1.0.0"}`), 1 << 20, envelope.ReasonMalformedStructure},
		{"empty", nil, 1 << 20, envelope.ReasonMalformedStructure},
		{"no declared size", streamed(zeros(512 << 10)), 1 << 20, envelope.ReasonMalformedStructure},
		{"declares more than the limit", envelope.Compress(zeros(2 << 20)), 1 << 20, envelope.ReasonOversized},
		{"declares more than the ceiling", envelope.Compress(zeros(envelope.MaxBytesCeiling + 1)), 1 << 30, envelope.ReasonOversized},
		{"declares less than it holds", declaring(t, envelope.Compress(zeros(64<<20)), 1<<20), 2 << 20, envelope.ReasonMalformedStructure},
		{"a second frame after the first", append(envelope.Compress(zeros(1000)), envelope.Compress(zeros(1000))...), 1 << 20, envelope.ReasonMalformedStructure},
		{"corrupt", corrupt, 1 << 20, envelope.ReasonMalformedStructure},
		{"skippable frame", []byte{0x50, 0x2a, 0x4d, 0x18, 4, 0, 0, 0, 1, 2, 3, 4}, 1 << 20, envelope.ReasonMalformedStructure},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			_, err := envelope.Decompress(c.src, c.max)
			runtime.ReadMemStats(&after)
			require.Error(t, err)
			require.Equal(t, c.reason, envelope.RejectionReason(err), "%v", err)
			// Never more than the limit (and the decoder's own state)
			// however much the frame would expand to.
			require.Less(t, after.TotalAlloc-before.TotalAlloc, uint64(min(c.max, envelope.MaxBytesCeiling))+8<<20, "allocated while refusing")
		})
	}
}

// declaring rewrites a zstd frame's declared content size (a 4-byte field,
// as for contents of 64 KiB and more) to n, leaving its blocks: the frame
// then holds more than it declares.
func declaring(t *testing.T, frame []byte, n uint32) []byte {
	t.Helper()
	var h zstd.Header
	require.NoError(t, h.Decode(frame))
	require.True(t, h.HasFCS)
	descriptor := frame[4]
	require.Equal(t, byte(2), descriptor>>6, "a 4-byte size field")
	out := bytes.Clone(frame)
	binary.LittleEndian.PutUint32(out[h.HeaderSize-4:h.HeaderSize], n)
	return out
}

// BenchmarkCompression weighs the two candidates for the compressed form
// on routing overlays: zstd (klauspost/compress) and the standard
// library's gzip, each at its default level. ratio is the plain size over
// the compressed.
func BenchmarkCompression(b *testing.B) {
	for _, size := range []struct {
		name  string
		bytes int
	}{{"64KiB", 64 << 10}, {"1MiB", 1 << 20}, {"4MiB", 4 << 20}} {
		doc := benchEnvelope(b, size.bytes)
		gz := func(p []byte) []byte {
			var buf bytes.Buffer
			w := gzip.NewWriter(&buf)
			_, _ = w.Write(p)
			_ = w.Close()
			return buf.Bytes()
		}
		ungz := func(p []byte) []byte {
			r, err := gzip.NewReader(bytes.NewReader(p))
			if err != nil {
				b.Fatal(err)
			}
			out, err := io.ReadAll(io.LimitReader(r, int64(len(doc))+1))
			if err != nil {
				b.Fatal(err)
			}
			return out
		}
		unzstd := func(p []byte) []byte {
			out, err := envelope.Decompress(p, 4<<20)
			if err != nil {
				b.Fatal(err)
			}
			return out
		}
		for _, codec := range []struct {
			name   string
			pack   func([]byte) []byte
			unpack func([]byte) []byte
		}{{"zstd", envelope.Compress, unzstd}, {"gzip", gz, ungz}} {
			packed := codec.pack(doc)
			b.Run("codec="+codec.name+"/size="+size.name+"/op=compress", func(b *testing.B) {
				b.SetBytes(int64(len(doc)))
				for b.Loop() {
					codec.pack(doc)
				}
				b.ReportMetric(float64(len(doc))/float64(len(packed)), "ratio")
			})
			b.Run("codec="+codec.name+"/size="+size.name+"/op=decompress", func(b *testing.B) {
				b.SetBytes(int64(len(doc)))
				b.ReportAllocs()
				for b.Loop() {
					codec.unpack(packed)
				}
				b.ReportMetric(float64(len(doc))/float64(len(packed)), "ratio")
			})
		}
	}
}
