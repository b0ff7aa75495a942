package main

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/gridsync/gridsync/api/v1alpha1"
	"github.com/gridsync/gridsync/test/testproc"
)

// A manager that never returns once stopped is given up grace after the
// stop, the warning saying what state it was in; one that returns is
// waited for, and its error kept.
func TestRunUntilStoppedGivesUpAManagerThatNeverReturns(t *testing.T) {
	var logs bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&logs, nil))
	stuck := make(chan struct{})
	t.Cleanup(func() { close(stuck) })
	neverSynced := func() (bool, bool) { return false, false }
	run := runUntilStopped(func(context.Context) error { <-stuck; return nil }, 50*time.Millisecond, neverSynced, log)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	began := time.Now()
	require.NoError(t, run(ctx))
	assert.Less(t, time.Since(began), 2*time.Second)
	assert.Contains(t, logs.String(), "manager_stop_abandoned")
	assert.Contains(t, logs.String(), "its caches never synced")
	assert.NotContains(t, logs.String(), "Lease not released")

	logs.Reset()
	run = runUntilStopped(func(context.Context) error { <-stuck; return nil }, 50*time.Millisecond, func() (bool, bool) { return true, true }, log)
	require.NoError(t, run(ctx))
	assert.Contains(t, logs.String(), "Lease not released")
	assert.Contains(t, logs.String(), `"leader":true`)
	assert.NotContains(t, logs.String(), "never synced", "a leader's caches had synced")

	logs.Reset()
	run = runUntilStopped(func(context.Context) error { <-stuck; return nil }, 50*time.Millisecond, func() (bool, bool) { return true, false }, log)
	require.NoError(t, run(ctx))
	assert.Contains(t, logs.String(), "its caches had synced, it was not leading")

	failed := errors.New("leader election lost")
	run = runUntilStopped(func(context.Context) error { return failed }, time.Hour, neverSynced, log)
	assert.ErrorIs(t, run(context.Background()), failed)

	slow := runUntilStopped(func(ctx context.Context) error {
		<-ctx.Done()
		time.Sleep(20 * time.Millisecond)
		return failed
	}, time.Hour, neverSynced, log)
	ctx, cancel = context.WithCancel(context.Background())
	cancel()
	assert.ErrorIs(t, slow(ctx), failed, "a manager that returns within the grace is waited for")
}

// Until the caches hold their first list, the agent says so at every
// report; once they do, it is ready.
func TestAwaitCacheSyncSaysItWaitsUntilTheFirstList(t *testing.T) {
	var logs testproc.Buffer
	log := slog.New(slog.NewJSONHandler(&logs, nil))
	listed := make(chan struct{})
	ready := make(chan struct{})
	answers := func(context.Context) error { return nil }
	go awaitCacheSync(context.Background(), func(context.Context) bool { <-listed; return true }, answers, 10*time.Millisecond, log,
		func() { close(ready) })
	require.Eventually(t, func() bool { return strings.Contains(logs.String(), "cache_sync_waiting") }, 5*time.Second, 5*time.Millisecond)
	select {
	case <-ready:
		t.Fatal("ready before the first list")
	default:
	}
	close(listed)
	<-ready
	require.Eventually(t, func() bool { return strings.Contains(logs.String(), "cache_synced") }, 5*time.Second, 5*time.Millisecond)
}

// While the caches wait, each report says what a list of GridNetworks
// answered: a kind the API server does not serve names the missing CRDs,
// any other failure is reported as it is.
func TestAwaitCacheSyncSaysWhyItWaits(t *testing.T) {
	notServed := &meta.NoKindMatchError{GroupKind: schema.GroupKind{Group: v1alpha1.GroupVersion.Group, Kind: "GridNetwork"}, SearchedVersions: []string{"v1alpha1"}}
	notFound := apierrors.NewNotFound(schema.GroupResource{Group: v1alpha1.GroupVersion.Group, Resource: "gridnetworks"}, "")
	forbidden := apierrors.NewForbidden(schema.GroupResource{Group: v1alpha1.GroupVersion.Group, Resource: "gridnetworks"}, "", errors.New("RBAC: access denied"))
	tests := map[string]struct {
		probe error
		want  []string
		not   string
	}{
		"no CRDs, no match":  {probe: notServed, want: []string{"are the CRDs installed?", "GridNetwork"}},
		"no CRDs, not found": {probe: notFound, want: []string{"are the CRDs installed?", "gridnetworks"}},
		"refused":            {probe: forbidden, want: []string{"access denied", "has not answered"}, not: "CRDs"},
		"answered":           {want: []string{"answers a list of GridNetworks"}, not: `"error"`},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			var logs testproc.Buffer
			log := slog.New(slog.NewJSONHandler(&logs, nil))
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			probed := make(chan time.Duration, 100)
			go awaitCacheSync(ctx, func(ctx context.Context) bool { <-ctx.Done(); return false }, func(ctx context.Context) error {
				deadline, _ := ctx.Deadline()
				select { // never blocks the waiter once the test has what it needs
				case probed <- time.Until(deadline):
				default:
				}
				return tt.probe
			}, 10*time.Millisecond, log, func() { t.Error("synced") })
			require.Eventually(t, func() bool { return strings.Contains(logs.String(), "cache_sync_waiting") }, 5*time.Second, 5*time.Millisecond)
			left := <-probed
			assert.LessOrEqual(t, left, cacheSyncProbeTimeout, "the list is bounded")
			for _, w := range tt.want {
				assert.Contains(t, logs.String(), w)
			}
			if tt.not != "" {
				assert.NotContains(t, logs.String(), tt.not)
			}
		})
	}
}
