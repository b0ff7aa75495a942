package testproc

import (
	"bytes"
	"sync"
)

// Buffer is a bytes.Buffer that many goroutines may write at once, for
// the logs of components a test runs in its own process.
type Buffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
