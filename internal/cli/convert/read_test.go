package convert

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The limit is the API server's: a document of exactly that many bytes
// is one it would take, a byte more is refused before anything is decoded.
func TestDocumentsRefusesOnlyWhatIsOverTheLimit(t *testing.T) {
	atLimit := strings.Repeat("a", MaxDocumentBytes-1) + "\n"
	docs, err := Documents([]byte("kind: Namespace\n---\n" + atLimit))
	require.NoError(t, err)
	require.Len(t, docs, 2)
	assert.Len(t, docs[1], MaxDocumentBytes)

	_, err = Documents([]byte("kind: Namespace\n---\n" + "a" + atLimit))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "document 2 is 3145729 bytes, over the API server's limit of 3 MiB")
}
