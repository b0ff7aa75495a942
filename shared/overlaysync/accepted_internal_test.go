package overlaysync

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gridsync/gridsync/shared/envelope"
)

// Once on disk, an envelope that came compressed is held compressed (the
// decompressed bytes are dropped), and given back whole; a plain one is
// held as it is.
func TestAKeptEnvelopeIsHeldCompressedWhenItCameSo(t *testing.T) {
	doc := []byte(`{"schema_version":"1.0.0"}`)
	packed := envelope.Compress(doc)
	kept := (&accepted{data: doc, packed: packed}).kept()
	assert.Nil(t, kept.data, "the decompressed bytes are not held")
	got, err := kept.envelope(1 << 20)
	require.NoError(t, err)
	assert.Equal(t, doc, got)

	plain := &accepted{data: doc}
	assert.Same(t, plain, plain.kept())
	got, err = plain.kept().envelope(1 << 20)
	require.NoError(t, err)
	assert.Equal(t, doc, got)
}
