package main

import (
	"context"
	"log/slog"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gridsync/gridsync/api/v1alpha1"
	"github.com/gridsync/gridsync/controller"
)

// managerStopGrace is how long the agent waits for the manager once it is
// told to stop: the manager's own shutdown timeout and a margin.
const managerStopGrace = controller.ShutdownTimeout + 2*time.Second

// managerState is what is known of the manager when it has to be given
// up: whether its caches synced and whether it led.
type managerState func() (synced, leading bool)

// runUntilStopped runs start until it returns, and returns at most grace
// after ctx ends even when it has not. controller-runtime's manager (v0.25)
// never returns when it is stopped while its caches wait for their first
// list, the API server unreachable or refusing it since the agent started:
// it spins on the ended context. Such an agent never led (it leads only
// once its caches synced), so it has no Lease to release nor SWIM to
// leave, and it exits without the manager. A manager can hang for other
// reasons too: the warning says what state it was in, so that a Lease
// left held (it then runs out on its own) is not taken for a cache that
// never synced.
func runUntilStopped(start func(context.Context) error, grace time.Duration, state managerState, log *slog.Logger) func(context.Context) error {
	return func(ctx context.Context) error {
		done := make(chan error, 1)
		go func() { done <- start(ctx) }()
		select {
		case err := <-done:
			return err
		case <-ctx.Done():
		}
		t := time.NewTimer(grace)
		defer t.Stop()
		select {
		case err := <-done:
			return err
		case <-t.C:
			synced, leading := state()
			log.Warn("manager_stop_abandoned", "after", grace.String(), "cache_synced", synced, "leader", leading,
				"why", abandonedWhy(synced, leading))
			return nil
		}
	}
}

// abandonedWhy words the manager_stop_abandoned warning after what was
// known of the manager.
func abandonedWhy(synced, leading bool) string {
	switch {
	case leading:
		return "the manager did not return while leading: Lease not released, another replica takes over once it expires"
	case !synced:
		return "the manager did not return: its caches never synced"
	default:
		return "the manager did not return: its caches had synced, it was not leading"
	}
}

// cacheSyncReport is how often the agent says that its caches still wait
// for their first list.
const cacheSyncReport = 10 * time.Second

// cacheSyncProbeTimeout bounds the list made at each cache_sync_waiting
// to say why the caches wait.
const cacheSyncProbeTimeout = 3 * time.Second

// awaitCacheSync calls synced once the caches hold their first list, and
// says every report until then that they do not: the informers retry the
// list in the background, at a debug level of their own, and an agent
// whose API server is unreachable or refuses the list would otherwise
// be unready without a word. At each report it makes one cheap list
// (probe) and says what it answered: the Grid kinds are mapped without
// discovery, so a cluster without the CRDs would otherwise read as an
// API server that does not answer.
func awaitCacheSync(ctx context.Context, wait func(context.Context) bool, probe func(context.Context) error, report time.Duration, log *slog.Logger, synced func()) {
	done := make(chan bool, 1)
	go func() { done <- wait(ctx) }()
	began := time.Now()
	tick := time.NewTicker(report)
	defer tick.Stop()
	for {
		select {
		case ok := <-done:
			if ok {
				synced()
				log.Info("cache_synced", "after", time.Since(began).Round(time.Millisecond).String())
			}
			return
		case <-tick.C:
			attrs := []any{"since", time.Since(began).Round(time.Second).String()}
			probeCtx, cancel := context.WithTimeout(ctx, cacheSyncProbeTimeout)
			err := probe(probeCtx)
			cancel()
			switch {
			case err == nil:
				attrs = append(attrs, "why", "the API server answers a list of GridNetworks, but the watched objects' first list has not completed; it is retried in the background")
			case meta.IsNoMatchError(err) || apierrors.IsNotFound(err):
				attrs = append(attrs, "error", err.Error(), "why", "the API server does not serve GridNetworks: are the CRDs installed?")
			default:
				attrs = append(attrs, "error", err.Error(), "why", "the API server has not answered the first list of the watched objects; it is retried in the background")
			}
			log.Warn("cache_sync_waiting", attrs...)
		}
	}
}

// listOneGridNetwork is the cheap list awaitCacheSync makes to say why the
// caches wait.
func listOneGridNetwork(api client.Reader) func(context.Context) error {
	return func(ctx context.Context) error {
		return api.List(ctx, &v1alpha1.GridNetworkList{}, client.Limit(1))
	}
}
