package main

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestDrainNeedsAProvider(t *testing.T) {
	var out, errOut bytes.Buffer
	assert.Equal(t, 2, drainProvider(nil, &out, &errOut))
	assert.Contains(t, errOut.String(), "--provider is required")
	assert.Empty(t, out.String())
}
