// Command gridsync-agent is the cluster-side agent of gridsync. It runs the
// controller that turns GridNetworks and InferenceProviders into overlay
// ConfigMaps, one replica active at a time, and serves /livez, /readyz,
// /status and /metrics on one address (/metrics over HTTPS on a port of its
// own with --metrics-tls). `gridsync-agent probe URL` asks an endpoint and
// exits 0 on a 2xx answer, for the chart's helm test (the image has no
// shell).
package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/gridsync/gridsync/controller"
	rollout "github.com/gridsync/gridsync/delivery/fold"
	membership "github.com/gridsync/gridsync/gossip"
	gateway "github.com/gridsync/gridsync/gossip/gatewayaddr"
	swimservice "github.com/gridsync/gridsync/gossip/service"
	"github.com/gridsync/gridsync/shared/health"
	"github.com/gridsync/gridsync/shared/kubeconfig"
	"github.com/gridsync/gridsync/shared/runtimecfg"
	"github.com/gridsync/gridsync/signals"
	signalsapi "github.com/gridsync/gridsync/signals/httpapi"
	"github.com/gridsync/gridsync/trust/bundle"
	"github.com/gridsync/gridsync/trust/enrol"
)

const binary = "gridsync-agent"

// version is stamped by the build (make build).
var version = "dev"

const shutdownGrace = 2 * time.Second

func main() {
	if len(os.Args) > 1 && os.Args[1] == renderCommand {
		os.Exit(renderPraxisConfig(os.Args[2:], os.Stdout, os.Stderr))
	}
	if len(os.Args) > 1 && os.Args[1] == enrollTokenCommand {
		os.Exit(enrollToken(os.Args[2:], os.Stdout, os.Stderr))
	}
	if len(os.Args) > 1 && os.Args[1] == rotateCACommand {
		os.Exit(rotateCA(os.Args[2:], os.Stdout, os.Stderr))
	}
	if len(os.Args) > 1 && os.Args[1] == evictCommand {
		os.Exit(evictSite(os.Args[2:], os.Stdout, os.Stderr))
	}
	if len(os.Args) > 1 && os.Args[1] == releaseNameCommand {
		os.Exit(releaseName(os.Args[2:], os.Stdout, os.Stderr))
	}
	if len(os.Args) > 1 && os.Args[1] == registeredSitesCommand {
		os.Exit(registeredSites(os.Args[2:], os.Stdout, os.Stderr))
	}
	if len(os.Args) > 1 && os.Args[1] == resetSiteKeyCommand {
		os.Exit(resetSiteKey(os.Args[2:], os.Stdout, os.Stderr))
	}
	if len(os.Args) > 1 && os.Args[1] == infraCertCommand {
		os.Exit(issueInfraCert(os.Args[2:], os.Stdout, os.Stderr))
	}
	if len(os.Args) > 1 && os.Args[1] == drainCommand {
		os.Exit(drainProvider(os.Args[2:], os.Stdout, os.Stderr))
	}
	if len(os.Args) > 1 && os.Args[1] == "probe" {
		// The chart's helm test asks /readyz with it: the image has no
		// shell or curl.
		os.Exit(health.Probe(binary, os.Args[2:], os.Stdout, os.Stderr))
	}
	if len(os.Args) > 1 && os.Args[1] == convertCommand {
		os.Exit(convertManifests(os.Args[2:], os.Stdin, os.Stdout, os.Stderr))
	}
	os.Exit(run(os.Args[1:], os.Getenv, os.Stderr))
}

func run(args []string, getenv func(string) string, stderr io.Writer) int {
	cfg, err := parseFlags(args, getenv, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		return 2
	}
	log := slog.New(slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: cfg.logLevel})).With("binary", binary)
	// controller-runtime and client-go log through the same JSON handler.
	logger := logr.FromSlogHandler(log.Handler())
	ctrl.SetLogger(logger)
	klog.SetLogger(logger)
	if cfg.gateway.refused != "" {
		log.Warn("gateway_address_refused", "error", cfg.gateway.refused, "why", "the other sites would not read it one way: no gateway address is advertised, and discovery does not run")
	}
	memoryLimit := runtimecfg.MemoryLimitFromContainer(getenv, 0)
	fail := func(event string, err error) int {
		log.Error(event, "error", err)
		fmt.Fprintf(stderr, "%s: %v\n", binary, err)
		return 1
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	ln, err := health.Listen(ctx, cfg.healthAddr)
	if err != nil {
		return fail("health_bind_failed", err)
	}
	var metricsLn net.Listener
	if cfg.metricsTLS.enabled() {
		if metricsLn, err = listenMetricsTLS(ctx, cfg.metricsTLS); err != nil {
			return fail("metrics_bind_failed", err)
		}
	}
	restConfig, err := kubeconfig.Load(cfg.kubeconfig, binary+"/"+version)
	if err != nil {
		return fail("kubeconfig_failed", err)
	}
	// client-go's default of 5 requests per second would take ten seconds
	// to publish fifty gateways' overlays.
	restConfig.QPS, restConfig.Burst = float32(cfg.apiQPS), cfg.apiBurst
	// controller-runtime registers its metrics, and the Go and process
	// collectors, in its own registry at start-up; the agent's join it, so
	// that each series is exported once.
	reg := ctrlmetrics.Registry
	health.RegisterBuildInfo(reg, binary, version)
	// The networks' trust bundles: the sites their issuers evicted. The
	// membership runtime, the listener and the controller share them, so
	// that an eviction is applied by all three the moment it arrives.
	trustBundles := bundle.NewBook()
	var swim *membership.Runtime
	if cfg.swim.enabled() {
		swim, err = membership.New(ctx, membership.Config{
			Site: cfg.swim.site, BindAddr: cfg.swim.bindAddr, AdvertiseAddr: cfg.swim.advertiseAddr,
			Seeds: cfg.swim.seeds, EnvKey: cfg.swim.key, RequireKey: cfg.swim.requireKey,
			ProbeInterval: cfg.swim.probeInterval, ProbeTimeout: cfg.swim.probeTimeout, SuspectPeriods: cfg.swim.suspectPeriods,
			PushPullInterval: cfg.swim.pushPullInterval, StaleTTL: cfg.swim.staleTTL, TombstoneTTL: cfg.swim.tombstoneTTL,
			CheckPeer: cfg.probeDestinations.CheckPeer, Trust: trustBundles, Logger: log, Registerer: reg,
		})
		if err != nil {
			return fail("swim_config_failed", err)
		}
	}
	var member controller.Membership
	if swim != nil {
		member = swim
	}
	var deliveries controller.DeliveryTracker
	var aggregator *rollout.Aggregator
	var store *signals.Store
	var directory *controller.Directory
	if cfg.signals.enabled() {
		aggregator = rollout.New(rollout.Options{SilentAfter: cfg.signals.reportSilentAfter,
			MaxPodsPerGateway: cfg.signals.reportMaxPodsPerGateway, Registerer: reg})
		deliveries = aggregator
		store = signals.NewStore(nil)
		directory = &controller.Directory{}
		reg.MustRegister(signals.Collector{Store: store})
	}
	mgr, err := controller.NewManager(restConfig, controller.ManagerOptions{
		Options: controller.Options{
			Namespaces:             cfg.namespaces,
			ProducerVersion:        version,
			Registerer:             reg,
			Logger:                 log,
			ProbeDestinations:      cfg.probeDestinations,
			ProbeSecretSelector:    cfg.probeSecretSelector,
			ScraperServiceAccount:  cfg.scraperAccount,
			ResyncPeriod:           cfg.resyncPeriod,
			DeleteOrphanedOverlays: cfg.deleteOrphans,
			MaxOverlayBytes:        cfg.maxOverlayBytes,
			CompressOverlaysAbove:  cfg.compressOverlaysAbove,
			// Events of the cluster-scoped Grid objects land where the
			// Lease lives: the agent's own namespace.
			EventNamespace:      cfg.leaderElectionNamespace,
			Membership:          member,
			Deliveries:          deliveries,
			Signals:             store,
			SignalsPeerPort:     cmp.Or(cfg.signals.peerPort, signalsPort(cfg.signals.addr)),
			SignalsInterval:     cfg.signals.interval,
			SignalsAddress:      signalsServiceAddress(cfg),
			Directory:           directory,
			SwimKeyPollInterval: cfg.swim.keyPollInterval,
			SiteName:            cfg.swim.site,
			RecordKeySecret:     types.NamespacedName{Namespace: cfg.leaderElectionNamespace, Name: cfg.swim.recordKeySecret},
			TrustBundles:        trustBundles,
			SiteCertLifetime:    cfg.trust.certLifetime,
			SiteProbeInterval:   cfg.trust.probeInterval,
			SiteProbeTimeout:    cfg.trust.probeTimeout,
		},
		LeaderElection:          cfg.leaderElect,
		LeaderElectionNamespace: cfg.leaderElectionNamespace,
		LeaderElectionID:        cfg.leaderElectionID,
		LeaseDuration:           cfg.leaseDuration,
		RenewDeadline:           cfg.renewDeadline,
		RetryPeriod:             cfg.retryPeriod,
	})
	if err != nil {
		return fail("start_failed", err)
	}

	if swim != nil {
		// The runtime joins only while this replica leads.
		if err := mgr.Add(swim); err != nil {
			return fail("start_failed", err)
		}
		if cfg.swim.serviceName != "" {
			bind, _ := netip.ParseAddrPort(cfg.swim.bindAddr)
			if err := mgr.Add(&swimservice.Publisher{
				Client: mgr.GetClient(), Namespace: cfg.leaderElectionNamespace, Service: cfg.swim.serviceName,
				PodIP: cfg.swim.podIP, Port: int32(bind.Port()), Manager: binary, Logger: log,
			}); err != nil {
				return fail("start_failed", err)
			}
		}
		explicit, discover := cfg.gateway.source()
		switch {
		case explicit != "":
			swim.SetGatewayAddress(explicit)
		case discover:
			if err := mgr.Add(&gateway.Discovery{
				Reader:  mgr.GetAPIReader(),
				Service: types.NamespacedName{Namespace: cfg.gateway.serviceNamespace, Name: cfg.gateway.serviceName},
				Port:    cfg.gateway.port, PortName: cfg.gateway.portName, Interval: cfg.gateway.interval, Logger: log, Set: swim.SetGatewayAddress,
			}); err != nil {
				return fail("start_failed", err)
			}
		}
	}

	if aggregator != nil && cfg.signals.serviceName != "" {
		if err := mgr.Add(&swimservice.Publisher{
			Client: mgr.GetClient(), Namespace: cfg.leaderElectionNamespace, Service: cfg.signals.serviceName,
			PodIP: cfg.signals.podIP, Port: int32(signalsPort(cfg.signals.addr)), PortPrefix: "signals", Manager: binary, Logger: log,
		}); err != nil {
			return fail("start_failed", err)
		}
	}
	if aggregator != nil {
		api := &signalsapi.API{Site: cfg.swim.site, Store: store, Directory: directory, Logger: log}
		// Enrolment and renewal of the sites whose certificates this site
		// issues: the tokens' Secret read and updated by name, directly.
		tokensClient, err := client.New(restConfig, client.Options{})
		if err != nil {
			return fail("start_failed", err)
		}
		issuer, err := enrol.NewServer(controller.EnrolmentAuthority(mgr.GetAPIReader(), trustBundles),
			&enrol.Tokens{API: tokensClient, Namespace: cfg.leaderElectionNamespace, Name: cfg.signals.enrollmentTokenSecret},
			cfg.trust.certLifetime, log, reg) // 0: by the network, as the authority says
		if err != nil {
			return fail("start_failed", err)
		}
		if err := mgr.Add(&signalsListener{cfg: cfg.signals, site: cfg.swim.site, rest: restConfig, aggregator: aggregator, api: api, issuer: issuer, evictions: trustBundles, log: log, reg: reg}); err != nil {
			return fail("start_failed", err)
		}
	}

	var synced, leading atomic.Bool
	go awaitCacheSync(ctx, mgr.GetCache().WaitForCacheSync, listOneGridNetwork(mgr.GetAPIReader()), cacheSyncReport, log, func() { synced.Store(true) })
	go func() {
		select {
		case <-mgr.Elected():
			leading.Store(true)
			log.Info("leading", "lease", cfg.leaderElectionNamespace+"/"+cfg.leaderElectionID)
		case <-ctx.Done():
		}
	}()
	// With --metrics-tls, /metrics is served over HTTPS alone: the health
	// port keeps the probes, which the kubelet sends in plaintext.
	var plainMetrics prometheus.Gatherer = reg
	if metricsLn != nil {
		plainMetrics = nil
		if err := mgr.Add(&metricsListener{cfg: cfg.metricsTLS, ln: metricsLn, gatherer: reg, log: log, reg: reg}); err != nil {
			return fail("metrics_listener_failed", err)
		}
	}
	handler := health.Handler(health.Checks{
		// A passive replica is ready: it is healthy and waits its turn.
		Ready: func() (bool, string) {
			if !synced.Load() {
				return false, "cache not synced"
			}
			return true, ""
		},
		Started: synced.Load,
		Status: func() any {
			st := map[string]any{"version": version, "leader": leading.Load(), "cache_synced": synced.Load(), "namespaces": cfg.namespaces}
			if swim != nil {
				st["swim"] = swim.Status()
			} else {
				st["swim"] = membership.Status{Members: []membership.MemberStatus{}}
			}
			return st
		},
	}, plainMetrics)

	log.Info("started", "version", version, "health_addr", ln.Addr().String(), "namespaces", cfg.namespaces, "leader_elect", cfg.leaderElect, "memory_limit_bytes", memoryLimit,
		"swim_bind_addr", cfg.swim.bindAddr, "site", cfg.swim.site)
	if err := health.ServeWhile(ctx, ln, handler, shutdownGrace, runUntilStopped(mgr.Start, managerStopGrace, func() (bool, bool) { return synced.Load(), leading.Load() }, log)); err != nil {
		return fail("stopped_with_error", err)
	}
	log.Info("shutdown", "signal", "received")
	return 0
}

// signalsPort is the port of the signals address (0 when it has none).
func signalsPort(addr string) int {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return 0
	}
	p, _ := strconv.Atoi(port)
	return p
}

// signalsServiceAddress is where this site's gateways reach the leader's
// signals listener: its Service, in the agent's namespace, on the
// listener's port; empty without one.
func signalsServiceAddress(cfg *config) string {
	port := signalsPort(cfg.signals.addr)
	if cfg.signals.serviceName == "" || port == 0 {
		return ""
	}
	return net.JoinHostPort(cfg.signals.serviceName+"."+cfg.leaderElectionNamespace+".svc", strconv.Itoa(port))
}
