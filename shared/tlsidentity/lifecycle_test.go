package tlsidentity_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gridsync/gridsync/shared/tlsidentity"
	"github.com/gridsync/gridsync/test/testpki"
)

// The polling is the process's: once its context ends, Run returns at
// once and nothing reads the files again, so a rotation published after
// it never becomes active (and no goroutine outlives the process's
// shutdown).
func TestPollingStopsWithItsProcess(t *testing.T) {
	f := newFixture(t)
	f.publishLeaf(t, "leaf-1", testpki.Opts{})
	r, err := tlsidentity.New(f.options())
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()

	f.publishLeaf(t, "leaf-2", testpki.Opts{})
	require.Eventually(t, func() bool { return r.Current().Certificate.Leaf.Subject.CommonName == "leaf-2" }, time.Second, time.Millisecond,
		"running, it polls")

	cancel()
	select {
	case err := <-done:
		require.NoError(t, err, "an ended process is no error")
	case <-time.After(time.Second):
		t.Fatal("Run kept polling after its context ended")
	}
	f.publishLeaf(t, "leaf-3", testpki.Opts{})
	time.Sleep(10 * f.options().Interval)
	assert.Equal(t, "leaf-2", r.Current().Certificate.Leaf.Subject.CommonName, "stopped, it reads nothing")
	assert.Equal(t, 2.0, f.reloads("certificate", "success"))
}

// Every series of the reload counter exists from the first scrape, both
// results of both materials, before anything was rejected: a rate or an
// alert on rejections has a series to start from.
func TestTheReloadCounterStartsWithBothResults(t *testing.T) {
	f := newFixture(t)
	f.publishLeaf(t, "leaf-1", testpki.Opts{})
	_, err := tlsidentity.New(f.options())
	require.NoError(t, err)
	for _, material := range []string{"certificate", "ca_bundle"} {
		assert.Equal(t, 1.0, f.reloads(material, "success"), "%s: the start's load", material)
		assert.Equal(t, 0.0, f.reloads(material, "rejected"), "%s: present at zero, not absent", material)
	}
}
