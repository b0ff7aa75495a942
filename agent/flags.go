package main

import (
	"flag"
	"io"
	"log/slog"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/gridsync/gridsync/controller/probe"

	"github.com/gridsync/gridsync/shared/envflag"
)

const envPrefix = "GRIDSYNC_AGENT_"

// config is the agent's command line.
type config struct {
	kubeconfig              string
	namespaces              []string
	healthAddr              string
	leaderElect             bool
	leaderElectionNamespace string
	leaderElectionID        string
	leaseDuration           time.Duration
	renewDeadline           time.Duration
	retryPeriod             time.Duration
	apiQPS                  float64
	apiBurst                int
	logLevel                slog.Level
	probeDestinations       probe.Destinations
	probeSecretSelector     labels.Selector
	resyncPeriod            time.Duration
	deleteOrphans           bool
}

// parseFlags parses args; the environment (GRIDSYNC_AGENT_<FLAG>, and
// POD_NAMESPACE for the election's namespace) gives defaults that the
// command line overrides.
func parseFlags(args []string, getenv func(string) string, output io.Writer) (*config, error) {
	c := &config{}
	fs := flag.NewFlagSet(binary, flag.ContinueOnError)
	fs.SetOutput(output)
	// Every flag but --kubeconfig reads GRIDSYNC_AGENT_<FLAG>: note names
	// the variable in the flag's usage and binds the two.
	var bindings []envflag.Binding
	note := func(name string) string {
		env := envPrefix + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
		bindings = append(bindings, envflag.Binding{Flag: name, Env: env})
		return envflag.Note(env)
	}
	electionNamespace := getenv("POD_NAMESPACE")
	if electionNamespace == "" {
		electionNamespace = "grid-system"
	}
	namespaces := fs.String("namespaces", "", "comma-separated namespaces where gateways run and credential Secrets live: ConfigMaps are published and Secrets read only there (empty: every namespace the RBAC allows)"+note("namespaces"))
	fs.DurationVar(&c.resyncPeriod, "resync-period", 300*time.Second, "reconcile everything this often: Secrets and ConfigMaps are not watched, so a rotated Secret or a hand edit is noticed within it"+note("resync-period"))
	fs.BoolVar(&c.deleteOrphans, "delete-orphaned-overlays", false, "delete the overlay ConfigMap of a removed gateway or deleted network (needs the delete verb) instead of publishing an empty overlay there"+note("delete-orphaned-overlays"))
	fs.StringVar(&c.kubeconfig, "kubeconfig", "", "kubeconfig file for out-of-cluster use (default: in-cluster, then $KUBECONFIG)")
	fs.StringVar(&c.healthAddr, "health-addr", ":8081", "address of /livez, /readyz, /status and /metrics"+note("health-addr"))
	fs.BoolVar(&c.leaderElect, "leader-elect", true, "run as one of several replicas, one active at a time"+note("leader-elect"))
	fs.StringVar(&c.leaderElectionNamespace, "leader-election-namespace", electionNamespace, "namespace of the election's Lease (default: $POD_NAMESPACE, else grid-system)"+note("leader-election-namespace"))
	fs.StringVar(&c.leaderElectionID, "leader-election-id", "gridsync-agent", "name of the election's Lease"+note("leader-election-id"))
	fs.DurationVar(&c.leaseDuration, "lease-duration", 15*time.Second, "how long a replica waits for a silent leader before taking over"+note("lease-duration"))
	fs.DurationVar(&c.renewDeadline, "renew-deadline", 10*time.Second, "how long the leader retries renewing before it steps down"+note("renew-deadline"))
	fs.DurationVar(&c.retryPeriod, "retry-period", 2*time.Second, "how often replicas try to acquire or renew the Lease"+note("retry-period"))
	fs.Float64Var(&c.apiQPS, "kube-api-qps", 50, "requests per second to the API server, sustained"+note("kube-api-qps"))
	fs.IntVar(&c.apiBurst, "kube-api-burst", 100, "requests to the API server in a burst"+note("kube-api-burst"))
	logLevel := fs.String("log-level", "info", "log level: debug, info, warn or error"+note("log-level"))
	probeAllow := fs.String("probe-allow-destinations", "", "comma-separated CIDRs and host suffixes that health probes may connect to (empty: any address but loopback, link-local and cloud metadata, which only a listed CIDR allows)"+note("probe-allow-destinations"))
	probeSelector := fs.String("probe-secret-selector", "", "label selector a credential Secret must match before its token is sent in a health probe (empty: off)"+note("probe-secret-selector"))

	if err := envflag.Parse(fs, bindings, args, getenv); err != nil {
		return nil, err
	}
	var err error
	if c.logLevel, err = envflag.LogLevel(fs, *logLevel); err != nil {
		return nil, err
	}
	for _, ns := range strings.Split(*namespaces, ",") {
		ns = strings.TrimSpace(ns)
		if ns == "" {
			continue
		}
		if errs := validation.IsDNS1123Label(ns); len(errs) > 0 {
			return nil, envflag.UsageError(fs, "--namespaces: %q is not a namespace name: %s", ns, strings.Join(errs, "; "))
		}
		c.namespaces = append(c.namespaces, ns)
	}
	if c.probeDestinations, err = probe.ParseDestinations(strings.Split(*probeAllow, ",")); err != nil {
		return nil, envflag.UsageError(fs, "--probe-allow-destinations: %v", err)
	}
	if *probeSelector != "" {
		if c.probeSecretSelector, err = labels.Parse(*probeSelector); err != nil {
			return nil, envflag.UsageError(fs, "--probe-secret-selector: %v", err)
		}
	}
	if c.resyncPeriod < 10*time.Second {
		return nil, envflag.UsageError(fs, "--resync-period must be at least 10s, got %s", c.resyncPeriod)
	}
	if c.apiQPS <= 0 || c.apiBurst <= 0 {
		return nil, envflag.UsageError(fs, "--kube-api-qps and --kube-api-burst must be positive")
	}
	if c.leaderElect {
		if errs := validation.IsDNS1123Label(c.leaderElectionNamespace); len(errs) > 0 {
			return nil, envflag.UsageError(fs, "--leader-election-namespace: %q is not a namespace name", c.leaderElectionNamespace)
		}
		if c.leaderElectionID == "" {
			return nil, envflag.UsageError(fs, "--leader-election-id is empty")
		}
		if c.retryPeriod <= 0 || c.retryPeriod >= c.renewDeadline || c.renewDeadline >= c.leaseDuration {
			return nil, envflag.UsageError(fs, "--retry-period < --renew-deadline < --lease-duration must hold (got %s, %s, %s)", c.retryPeriod, c.renewDeadline, c.leaseDuration)
		}
	}
	return c, nil
}
