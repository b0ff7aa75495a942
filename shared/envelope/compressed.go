package envelope

import (
	"sync"

	"github.com/klauspost/compress/zstd"
)

// The compressed form of an overlay ConfigMap. A large overlay's two plain
// copies (the envelope and the bare overlay) cost the API server a copy of
// each to every watching pod, and both share the ConfigMap's 1 MiB. The
// compressed form is one copy: the canonical envelope as a single zstd
// frame, under binaryData, with the data key's name and ".zst" appended.
// The producer writes it only for gateways whose pods all read it; the
// file a gateway reads is the same envelope either way.
const (
	// EncodingPlain is the contract's form: the envelope and the bare
	// overlay as text under data.
	EncodingPlain = "plain"
	// EncodingZstd is the compressed form.
	EncodingZstd = "zstd"
	// EncodingAuto is what a sidecar asks for when it leaves the form to
	// the agent: compressed when large and every pod of its gateway reads
	// it.
	EncodingAuto = "auto"

	// CompressedSuffix turns a data key into the compressed form's
	// binaryData key.
	CompressedSuffix = ".zst"
	// AnnotationEncoding marks an overlay ConfigMap in the compressed form
	// (its value "zstd"), for people and tools; the plain form carries the
	// contract's annotations only. Readers go by the keys present.
	AnnotationEncoding = "grid.praxis.fast/overlay-encoding"

	// MaxBytesCeiling bounds every envelope size setting: no consumer is
	// ever asked to hold more than this in memory for one revision.
	MaxBytesCeiling = 64 << 20
)

// CompressedKey is the binaryData key of dataKey's compressed form.
func CompressedKey(dataKey string) string { return dataKey + CompressedSuffix }

// FormOf says which form an overlay ConfigMap's data and binaryData hold
// the envelope in (the plain key is read first), "" when neither.
func FormOf(data map[string]string, binaryData map[string][]byte, dataKey string) string {
	if _, ok := data[dataKey]; ok {
		return EncodingPlain
	}
	if _, ok := binaryData[CompressedKey(dataKey)]; ok {
		return EncodingZstd
	}
	return ""
}

var (
	encoderOnce sync.Once
	encoder     *zstd.Encoder
	decoderOnce sync.Once
	decoder     *zstd.Decoder
)

// Compress returns doc as one zstd frame that declares its size (which
// Decompress requires) and carries a checksum.
func Compress(doc []byte) []byte {
	encoderOnce.Do(func() {
		// Only errors of invalid options, which these are not.
		// A single segment always declares its size: otherwise a frame of
		// 1 to 255 bytes would not, and Decompress refuses those.
		encoder, _ = zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedDefault), zstd.WithEncoderCRC(true),
			zstd.WithEncoderConcurrency(1), zstd.WithLowerEncoderMem(true), zstd.WithSingleSegment(true))
	})
	return encoder.EncodeAll(doc, make([]byte, 0, len(doc)/4+64))
}

// Decompress returns the envelope held in a compressed form. It spends
// nothing it has not bounded first: the frame must declare its size, the
// size must be within maxBytes (DefaultMaxBytes when 0) before a byte is
// decompressed, and decompression stops at the declared size. A frame that
// declares more than maxBytes is refused as oversized, like an oversized
// plain envelope; one that lies about its size, is cut short or fails its
// checksum is malformed.
func Decompress(src []byte, maxBytes int) ([]byte, error) {
	if maxBytes <= 0 {
		maxBytes = DefaultMaxBytes
	}
	maxBytes = min(maxBytes, MaxBytesCeiling)
	var h zstd.Header
	if err := h.Decode(src); err != nil {
		return nil, reject(ReasonMalformedStructure, "compressed overlay: no zstd frame: %v", err)
	}
	switch {
	case h.Skippable:
		return nil, reject(ReasonMalformedStructure, "compressed overlay: a skippable frame holds no envelope")
	case !h.HasFCS:
		return nil, reject(ReasonMalformedStructure, "compressed overlay: the frame does not declare its size")
	case h.FrameContentSize > uint64(maxBytes):
		return nil, reject(ReasonOversized, "compressed overlay declares %d bytes, limit is %d", h.FrameContentSize, maxBytes)
	case h.DictionaryID != 0:
		return nil, reject(ReasonMalformedStructure, "compressed overlay: the frame needs a dictionary")
	}
	declared := int(h.FrameContentSize)
	decoderOnce.Do(func() {
		// Only errors of invalid options, which these are not.
		decoder, _ = zstd.NewReader(nil, zstd.WithDecodeAllCapLimit(true), zstd.WithDecoderLowmem(true),
			zstd.WithDecoderMaxMemory(MaxBytesCeiling), zstd.WithDecoderMaxWindow(MaxBytesCeiling))
	})
	// With the cap limit, DecodeAll writes no more than cap(dst): a frame
	// whose content runs past its declared size (or a second frame after
	// it) fails there instead of growing the buffer.
	out, err := decoder.DecodeAll(src, make([]byte, 0, declared))
	if err != nil {
		return nil, reject(ReasonMalformedStructure, "compressed overlay: %v", err)
	}
	if len(out) != declared {
		return nil, reject(ReasonMalformedStructure, "compressed overlay: %d bytes where the frame declares %d", len(out), declared)
	}
	return out, nil
}
