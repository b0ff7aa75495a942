package base

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/controller-runtime/pkg/event"

	"github.com/gridsync/gridsync/api/v1alpha1"
)

// An event sent before the Lifetime runnable started is kept in the
// channel's buffer for the controller that reads it, not dropped: the
// controllers start beside the runnable and may reconcile first.
func TestAnEventSentBeforeTheStartIsKept(t *testing.T) {
	life := &Lifetime{}
	ch := make(chan event.GenericEvent, 1)
	n := &v1alpha1.GridNetwork{}
	n.Name = "net"
	life.Send(ch, event.GenericEvent{Object: n})
	require.Len(t, ch, 1)
	assert.Equal(t, "net", (<-ch).Object.GetName())

	// A full buffer before the start does not block the sender.
	ch <- event.GenericEvent{Object: n}
	life.Send(ch, event.GenericEvent{Object: n})
	assert.Len(t, ch, 1)

	// Once stopped, nothing blocks either.
	ctx, cancel := context.WithCancel(context.Background())
	go func() { _ = life.Start(ctx) }()
	cancel()
	require.Eventually(t, func() bool {
		c, err := life.Context()
		return err == nil && c.Err() != nil
	}, 5*time.Second, 10*time.Millisecond)
	life.Send(ch, event.GenericEvent{Object: n})
}
