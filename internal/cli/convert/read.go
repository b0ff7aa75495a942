package convert

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"

	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

// Bounds of what convert reads, checked before anything is decoded: a
// decoded document takes many times its size in memory (a mapping of a
// million keys, 15 MB, took 720 MiB), so the size is what bounds it.
const (
	// MaxDocumentBytes is the API server's request limit: a larger
	// document could not be applied anyway.
	MaxDocumentBytes = 3 << 20
	// MaxFileBytes bounds one input: room for hundreds of manifests.
	MaxFileBytes = 32 << 20
)

// ReadInput reads one input whole, refusing one over MaxFileBytes.
func ReadInput(r io.Reader) ([]byte, error) {
	data, err := io.ReadAll(io.LimitReader(r, MaxFileBytes+1))
	if err != nil {
		return nil, err
	}
	if len(data) > MaxFileBytes {
		return nil, fmt.Errorf("over %d MiB: split it into several files", MaxFileBytes>>20)
	}
	return data, nil
}

// Documents splits an input at its YAML document separators and refuses
// a document over MaxDocumentBytes, before any of them is decoded. A JSON
// input without separators is one document.
func Documents(data []byte) ([][]byte, error) {
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var docs [][]byte
	for i := 1; ; i++ {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return docs, nil
		}
		if err != nil {
			return nil, fmt.Errorf("document %d: %w", i, err)
		}
		if len(doc) > MaxDocumentBytes {
			return nil, fmt.Errorf("document %d is %d bytes, over the API server's limit of %d MiB a request", i, len(doc), MaxDocumentBytes>>20)
		}
		docs = append(docs, doc)
	}
}
