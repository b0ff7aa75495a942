package main

import (
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"
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
}

// parseFlags parses args; the environment (GRIDSYNC_AGENT_<FLAG>, and
// POD_NAMESPACE for the election's namespace) gives defaults that the
// command line overrides.
func parseFlags(args []string, getenv func(string) string, output io.Writer) (*config, error) {
	c := &config{}
	fs := flag.NewFlagSet(binary, flag.ContinueOnError)
	fs.SetOutput(output)
	var envs []struct{ flag, env string }
	bind := func(name string) {
		envs = append(envs, struct{ flag, env string }{name, envPrefix + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))})
	}
	note := func(name string) string {
		return " [$" + envPrefix + strings.ToUpper(strings.ReplaceAll(name, "-", "_")) + "]"
	}
	electionNamespace := getenv("POD_NAMESPACE")
	if electionNamespace == "" {
		electionNamespace = "grid-system"
	}
	namespaces := fs.String("namespaces", "", "comma-separated namespaces where gateways run: ConfigMaps are published and credential Secrets read only there (empty: every namespace)"+note("namespaces"))
	bind("namespaces")
	fs.StringVar(&c.kubeconfig, "kubeconfig", "", "kubeconfig file for out-of-cluster use (default: in-cluster, then $KUBECONFIG)")
	fs.StringVar(&c.healthAddr, "health-addr", ":8081", "address of /livez, /readyz, /status and /metrics"+note("health-addr"))
	bind("health-addr")
	fs.BoolVar(&c.leaderElect, "leader-elect", true, "run as one of several replicas, one active at a time"+note("leader-elect"))
	bind("leader-elect")
	fs.StringVar(&c.leaderElectionNamespace, "leader-election-namespace", electionNamespace, "namespace of the election's Lease (default: $POD_NAMESPACE, else grid-system)"+note("leader-election-namespace"))
	bind("leader-election-namespace")
	fs.StringVar(&c.leaderElectionID, "leader-election-id", "gridsync-agent", "name of the election's Lease"+note("leader-election-id"))
	bind("leader-election-id")
	fs.DurationVar(&c.leaseDuration, "lease-duration", 15*time.Second, "how long a replica waits for a silent leader before taking over"+note("lease-duration"))
	bind("lease-duration")
	fs.DurationVar(&c.renewDeadline, "renew-deadline", 10*time.Second, "how long the leader retries renewing before it steps down"+note("renew-deadline"))
	bind("renew-deadline")
	fs.DurationVar(&c.retryPeriod, "retry-period", 2*time.Second, "how often replicas try to acquire or renew the Lease"+note("retry-period"))
	bind("retry-period")
	fs.Float64Var(&c.apiQPS, "kube-api-qps", 50, "requests per second to the API server, sustained"+note("kube-api-qps"))
	bind("kube-api-qps")
	fs.IntVar(&c.apiBurst, "kube-api-burst", 100, "requests to the API server in a burst"+note("kube-api-burst"))
	bind("kube-api-burst")
	logLevel := fs.String("log-level", "info", "log level: debug, info, warn or error"+note("log-level"))
	bind("log-level")

	for _, b := range envs {
		if v := getenv(b.env); v != "" {
			if err := fs.Set(b.flag, v); err != nil {
				return nil, usageError(fs, "invalid %s=%q for --%s: %v", b.env, v, b.flag, err)
			}
		}
	}
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, usageError(fs, "unexpected argument %q", fs.Arg(0))
	}
	if err := c.logLevel.UnmarshalText([]byte(*logLevel)); err != nil {
		return nil, usageError(fs, "--log-level: %q is not debug, info, warn or error", *logLevel)
	}
	for _, ns := range strings.Split(*namespaces, ",") {
		ns = strings.TrimSpace(ns)
		if ns == "" {
			continue
		}
		if errs := validation.IsDNS1123Label(ns); len(errs) > 0 {
			return nil, usageError(fs, "--namespaces: %q is not a namespace name: %s", ns, strings.Join(errs, "; "))
		}
		c.namespaces = append(c.namespaces, ns)
	}
	if c.apiQPS <= 0 || c.apiBurst <= 0 {
		return nil, usageError(fs, "--kube-api-qps and --kube-api-burst must be positive")
	}
	if c.leaderElect {
		if errs := validation.IsDNS1123Label(c.leaderElectionNamespace); len(errs) > 0 {
			return nil, usageError(fs, "--leader-election-namespace: %q is not a namespace name", c.leaderElectionNamespace)
		}
		if c.leaderElectionID == "" {
			return nil, usageError(fs, "--leader-election-id is empty")
		}
		if c.retryPeriod <= 0 || c.retryPeriod >= c.renewDeadline || c.renewDeadline >= c.leaseDuration {
			return nil, usageError(fs, "--retry-period < --renew-deadline < --lease-duration must hold (got %s, %s, %s)", c.retryPeriod, c.renewDeadline, c.leaseDuration)
		}
	}
	return c, nil
}

func usageError(fs *flag.FlagSet, format string, args ...any) error {
	err := fmt.Errorf(format, args...)
	fmt.Fprintf(fs.Output(), "%s: %v\n", fs.Name(), err)
	return err
}
