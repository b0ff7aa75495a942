// Command gridsync-init is the init container of a Praxis gateway pod: it
// publishes the first valid overlay into the shared volume and exits 0, so
// that the gateway never starts without routes. It retries quickly while
// the ConfigMap is missing or invalid or the API server is unreachable,
// and says why it waits. A valid overlay already on disk (a restarted pod
// keeps its emptyDir) ends it at once; keeping it fresh is the sidecar's
// job.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/gridsync/gridsync/shared/kubeconfig"
	"github.com/gridsync/gridsync/shared/overlaysync"
	"github.com/gridsync/gridsync/shared/runtimecfg"
	"github.com/gridsync/gridsync/shared/syncflags"
	"github.com/gridsync/gridsync/shared/tlsidentity"
)

const binary = "gridsync-init"

// version is stamped by the build (make build).
var version = "dev"

// Retries are faster than the sidecar's: a pod is waiting.
const (
	backoffMin   = 250 * time.Millisecond
	backoffMax   = 5 * time.Second
	waitLogEvery = 5 * time.Second
	// identityRetry: a Secret projection changes on the kubelet's sync
	// period, so a second between reads is quick enough.
	identityRetry = time.Second
)

const (
	exitOK      = 0
	exitFailure = 1
	exitUsage   = 2
)

func main() {
	os.Exit(run(os.Args[1:], os.Stderr))
}

func run(args []string, stderr io.Writer) int {
	cfg, err := syncflags.Parse(syncflags.Init, binary, args, os.Getenv, stderr)
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
	// As the sidecar does: a first line that says what runs, and marks when
	// the gate started (the time to the first overlay is read from it).
	log.Info("started", "version", version, "gomaxprocs", procs, "memory_limit_bytes", memoryLimit)
	fail := func(event string, err error) int {
		log.Error(event, "error", err)
		fmt.Fprintf(stderr, "%s: %v\n", binary, err)
		return exitFailure
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if cfg.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, cfg.Timeout)
		defer cancel()
	}

	restConfig, err := kubeconfig.Load(cfg.Kubeconfig, binary+"/"+version)
	if err != nil {
		return fail("kubeconfig_failed", err)
	}
	if cfg.IdentityEnabled() {
		if err := waitForIdentity(ctx, cfg, log); err != nil {
			return fail("identity_timeout", err)
		}
	}

	opts := cfg.SyncOptions()
	opts.Once = true
	opts.Logger = log
	opts.BackoffMin, opts.BackoffMax = backoffMin, backoffMax
	syncer, err := overlaysync.New(restConfig, opts)
	if err != nil {
		return fail("start_failed", err)
	}
	if syncer.Started() {
		log.Info("overlay_already_on_disk", "revision", syncer.Status().WrittenRevision)
		return exitOK
	}

	done := make(chan error, 1)
	go func() { done <- syncer.Run(ctx) }()
	tick := time.NewTicker(waitLogEvery)
	defer tick.Stop()
	for {
		select {
		case err := <-done:
			if err != nil {
				return fail("sync_failed", err)
			}
			if syncer.Started() {
				log.Info("overlay_ready", "revision", syncer.Status().WrittenRevision)
				return exitOK
			}
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return fail("timeout", fmt.Errorf("no valid overlay in ConfigMap %s/%s within --timeout %s (%s)",
					cfg.Namespace, cfg.ConfigMap, cfg.Timeout, waitingFor(syncer.Status())))
			}
			return fail("interrupted", errors.New("stopped before a valid overlay was on disk"))
		case <-tick.C:
			log.Info("waiting_for_overlay", "why", waitingFor(syncer.Status()))
		}
	}
}

// waitingFor says in a few words why no overlay is on disk yet.
func waitingFor(st overlaysync.Status) string {
	switch st.DegradedReason {
	case "":
		return "no answer from the API server yet"
	case overlaysync.ReasonNotFound, overlaysync.ReasonDeleted:
		return "the ConfigMap does not exist"
	case overlaysync.ReasonAPIUnreachable:
		return "the API server is unreachable"
	case overlaysync.ReasonSourceUnconfirmed:
		return "the API server does not answer in time"
	case overlaysync.ReasonAPIForbidden:
		return "the API server refuses this ServiceAccount (check the Role and RoleBinding)"
	default:
		return "the ConfigMap's envelope is rejected: " + st.DegradedReason
	}
}

// waitForIdentity publishes the first valid TLS identity into the shared
// volume, retrying every second and saying why it waits.
func waitForIdentity(ctx context.Context, cfg *syncflags.Config, log *slog.Logger) error {
	opts := cfg.IdentityOptions()
	opts.Logger = log
	publishTo, err := cfg.IdentityPublisher(log)
	if err != nil {
		return err
	}
	opts.OnChange = publishTo
	var lastErr string
	lastLog := time.Time{}
	for {
		r, err := tlsidentity.New(opts)
		if err == nil {
			log.Info("identity_ready", "fingerprint", r.Current().Fingerprint, "not_after", r.Current().NotAfter)
			return nil
		}
		if err.Error() != lastErr || time.Since(lastLog) >= waitLogEvery {
			log.Info("waiting_for_identity", "why", err.Error())
			lastErr, lastLog = err.Error(), time.Now()
		}
		select {
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return fmt.Errorf("no valid TLS identity within --timeout %s: %s", cfg.Timeout, lastErr)
			}
			return fmt.Errorf("stopped before a valid TLS identity was published: %s", lastErr)
		case <-time.After(identityRetry):
		}
	}
}
