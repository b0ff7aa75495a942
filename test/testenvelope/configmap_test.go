package testenvelope_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gridsync/gridsync/shared/envelope"
	"github.com/gridsync/gridsync/test/testenvelope"
)

func TestPayloadWritesEachFormUnderItsKeyAlone(t *testing.T) {
	scope := envelope.Scope{Network: "net", Gateway: "gw", Namespace: "ns", LocalSite: "east"}
	doc, _ := testenvelope.Sized(t, scope, 1, 64<<10)

	plain := testenvelope.Encode(t, doc, envelope.EncodingPlain).ConfigMap("overlay")
	require.Equal(t, "overlay", plain.Name)
	require.Equal(t, map[string]string{envelope.DataKeyEnvelope: string(doc)}, plain.Data)
	require.Empty(t, plain.BinaryData)

	payload := testenvelope.Encode(t, doc, envelope.EncodingZstd)
	packed := payload.ConfigMap("overlay")
	require.Empty(t, packed.Data, "the compressed form carries no plain copy")
	require.Len(t, packed.BinaryData, 1)
	frame := packed.BinaryData[envelope.CompressedKey(envelope.DataKeyEnvelope)]
	require.Len(t, frame, payload.Len())
	require.Less(t, payload.Len(), len(doc))
	unpacked, err := envelope.Decompress(frame, len(doc))
	require.NoError(t, err)
	require.Equal(t, doc, unpacked)
}
