package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	deliveryreport "github.com/gridsync/gridsync/delivery/report"
	"github.com/gridsync/gridsync/shared/health"
	"github.com/gridsync/gridsync/shared/kubeconfig"
	"github.com/gridsync/gridsync/shared/overlaysync"
	"github.com/gridsync/gridsync/shared/runtimecfg"
	"github.com/gridsync/gridsync/shared/syncflags"
	"github.com/gridsync/gridsync/shared/tlsidentity"
)

const binary = "gridsync-sidecar"

// shutdownGrace bounds the health server's shutdown; the whole process
// exits within a few seconds of SIGTERM.
const shutdownGrace = 2 * time.Second

// runSidecar wires the sidecar: flags, client, syncer and health server,
// run together until SIGTERM or SIGINT (the binary is PID 1 in its
// container, so it must handle them itself).
func runSidecar(args []string, stderr io.Writer) int {
	cfg, err := syncflags.Parse(syncflags.Sidecar, binary, args, os.Getenv, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	if err != nil {
		return exitUsage
	}
	log := cfg.NewLogger(stderr, binary)
	procs := runtimecfg.SingleProcessor()
	// The output and its replacement, on the pod's emptyDir in memory, are
	// charged to this container too.
	memoryLimit := runtimecfg.MemoryLimitFromContainer(os.Getenv, 2*int64(cfg.MaxBytes))
	fail := func(event string, err error) int {
		log.Error(event, "error", err)
		fmt.Fprintf(stderr, "%s: %v\n", binary, err)
		return exitFailure
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()

	// --once publishes and exits, like the upstream sidecar's: it serves
	// no endpoints, so it never needs (or fails for) the health port.
	var ln, probeLn net.Listener
	if !cfg.Once {
		if ln, err = health.Listen(ctx, cfg.HealthAddr); err != nil {
			return fail("health_bind_failed", err)
		}
		if cfg.ProbeAddr != "" {
			if probeLn, err = health.Listen(ctx, cfg.ProbeAddr); err != nil {
				return fail("health_bind_failed", err)
			}
		}
	}
	restConfig, err := kubeconfig.Load(cfg.Kubeconfig, binary+"/"+version)
	if err != nil {
		return fail("kubeconfig_failed", err)
	}
	reg := health.NewRegistry(binary, version)
	opts := cfg.SyncOptions()
	opts.Logger = log
	opts.Registerer = reg
	var syncer *overlaysync.Syncer
	var reporter *deliveryreport.Reporter
	if !cfg.Once {
		if reporter, err = newReporter(cfg, func() *overlaysync.Syncer { return syncer }, log, reg); err != nil {
			return fail("start_failed", err)
		}
	}
	if reporter != nil {
		opts.Notify = reporter.Notify
	}
	syncer, err = overlaysync.New(restConfig, opts)
	if err != nil {
		return fail("start_failed", err)
	}
	var identity *tlsidentity.Reloader
	if cfg.IdentityEnabled() {
		idOpts := cfg.IdentityOptions()
		idOpts.Logger, idOpts.Registerer = log, reg
		if idOpts.OnChange, err = cfg.IdentityPublisher(log); err != nil {
			return fail("identity_invalid", err)
		}
		// Invalid initial material stops the start: no silent fallback.
		if identity, err = tlsidentity.New(idOpts); err != nil {
			return fail("identity_invalid", err)
		}
	}
	checks := health.Checks{
		Ready:   func() (bool, string) { return ready(syncer, identity) },
		Started: syncer.Started,
		Status:  func() any { return statusOf(syncer, identity) },
	}
	handler := health.Handler(checks, reg)

	if cfg.Once {
		log.Info("started", "version", version, "once", true, "gomaxprocs", procs, "memory_limit_bytes", memoryLimit)
		err = syncer.Run(ctx) // no endpoints and no identity polling: one publication
	} else {
		log.Info("started", "version", version, "health_addr", ln.Addr().String(), "gomaxprocs", procs, "memory_limit_bytes", memoryLimit)
		err = serve(ctx, ln, handler, syncer, identity, reporter, probeLn, health.ProbeHandler(checks))
	}
	if err != nil {
		return fail("stopped_with_error", err)
	}
	if ctx.Err() != nil {
		log.Info("shutdown", "signal", "received")
	} else {
		log.Info("done", "revision", syncer.Status().WrittenRevision)
	}
	return exitOK
}

// serve runs the sync loop, the health endpoints and the identity
// reloader together until ctx ends or one of them stops.
func serve(ctx context.Context, ln net.Listener, handler http.Handler, syncer *overlaysync.Syncer, identity *tlsidentity.Reloader,
	reporter *deliveryreport.Reporter, probeLn net.Listener, probeHandler http.Handler,
) error {
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	// The probe port, when set, serves beside the health port; either
	// ending stops the sidecar (a dead probe port would restart the pod
	// for reasons nobody could see).
	probeErr := make(chan error, 1)
	if probeLn != nil {
		go func() {
			err := health.Serve(runCtx, probeLn, probeHandler, shutdownGrace)
			if err == nil && runCtx.Err() == nil {
				err = errors.New("probe server stopped")
			}
			probeErr <- err
			cancel()
		}()
	} else {
		probeErr <- nil
	}
	identityDone := make(chan struct{})
	go func() {
		defer close(identityDone)
		if identity != nil {
			_ = identity.Run(runCtx) // returns when runCtx ends
		}
	}()
	// Reports go beside delivery, never in its way: the syncer only
	// nudges the reporter, which reads the status when it sends.
	reportDone := make(chan struct{})
	go func() {
		defer close(reportDone)
		if reporter != nil {
			reporter.Run(runCtx)
		}
	}()
	err := health.ServeWhile(runCtx, ln, handler, shutdownGrace, syncer.Run)
	cancel()
	<-identityDone
	<-reportDone
	if perr := <-probeErr; perr != nil && ctx.Err() == nil {
		err = errors.Join(err, perr)
	}
	return err
}

// ready is the pod's readiness: a valid overlay on disk (and not expired
// by policy) and, with identity sync, an unexpired TLS identity.
func ready(syncer *overlaysync.Syncer, identity *tlsidentity.Reloader) (bool, string) {
	if ok, why := syncer.Ready(); !ok {
		return false, why
	}
	if identity != nil {
		return identity.Ready()
	}
	return true, ""
}

// status is the /status document: the overlay's fields, and the
// identity's when identity sync is on.
type status struct {
	overlaysync.Status `json:",inline"`
	Identity           *tlsidentity.Status `json:"identity,omitempty"`
}

func statusOf(syncer *overlaysync.Syncer, identity *tlsidentity.Reloader) status {
	st := status{Status: syncer.Status()}
	if identity != nil {
		id := identity.Status()
		st.Identity = &id
	}
	return st
}
