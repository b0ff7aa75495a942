package main

import (
	"flag"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/gridsync/gridsync/controller"
	"github.com/gridsync/gridsync/controller/probe"
	"github.com/gridsync/gridsync/controller/rbac"
	rollout "github.com/gridsync/gridsync/delivery/fold"
	reports "github.com/gridsync/gridsync/delivery/handler"
	"github.com/gridsync/gridsync/gossip/sites"
	"github.com/gridsync/gridsync/gossip/swimkeys"
	"github.com/gridsync/gridsync/trust/enrol"

	"github.com/gridsync/gridsync/shared/envelope"
	"github.com/gridsync/gridsync/shared/envflag"
	"github.com/gridsync/gridsync/shared/tlsidentity"
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
	scraperAccount          types.NamespacedName
	resyncPeriod            time.Duration
	deleteOrphans           bool
	maxOverlayBytes         int
	compressOverlaysAbove   int
	swim                    swimConfig
	gateway                 gatewayConfig
	trust                   trustConfig
	signals                 signalsConfig
	metricsTLS              metricsTLSConfig
}

// metricsTLSConfig serves /metrics over HTTPS on a port of its own, from a
// mounted Secret's tls.crt and tls.key (the site identity or another),
// reloaded when it rotates; with clientAuth a scraper must present a
// certificate that verifies to the same Secret's ca.crt.
type metricsTLSConfig struct {
	dir, addr  string
	clientAuth bool
}

func (c metricsTLSConfig) enabled() bool { return c.dir != "" }

// signalsConfig is the signals listener: its address (TCP and UDP, one
// port), the site identity it serves with, its caps, and the delivery
// reports it takes.
type signalsConfig struct {
	addr                      string
	certFile, keyFile, caFile string
	// identityInterval is how often the listener reads its mounted
	// identity again (a renewal, the CAs of a rotation).
	identityInterval        time.Duration
	spiffe                  bool
	maxConnections          int
	reservedForGateway      int
	perSite                 int
	handshakeRate           float64
	handshakeBurst          int
	maxConnectionAge        time.Duration
	writeTimeout            time.Duration
	reportAudience          string
	reportSilentAfter       time.Duration
	reportMaxPodsPerGateway int
	enrollmentTokenSecret   string
	reportReviewRate        float64
	reportReviewBurst       int
	interval                time.Duration
	peerPort                int
	// serviceName is the signals Service (without selector) whose
	// EndpointSlice the leader writes (with the pod's address).
	serviceName, podIP string
}

func (c signalsConfig) enabled() bool { return c.addr != "" }

// trustConfig is site trust: the issued site certificate's lifetime and
// the probes of remote sites' gateways.
type trustConfig struct {
	certLifetime, probeInterval, probeTimeout time.Duration
}

// swimConfig is the SWIM membership's part of the command line; the
// environment variables are the Grid reference's.
type swimConfig struct {
	bindAddr, advertiseAddr, site string
	seeds                         []string
	key                           []byte
	requireKey                    bool
	probeInterval, probeTimeout   time.Duration
	suspectPeriods                int
	pushPullInterval              time.Duration
	staleTTL, tombstoneTTL        time.Duration
	keyPollInterval               time.Duration
	// recordKeySecret names the Secret, in the agent's namespace, of the
	// site's key for the records of networks without a grid CA.
	recordKeySecret string
	// serviceName is the SWIM Service whose EndpointSlice the leader
	// writes (with podIP, from POD_IP).
	serviceName, podIP string
}

func (c swimConfig) enabled() bool { return c.bindAddr != "" }

// gatewayConfig is how the site's data-plane gateway address is found:
// given, or read from a LoadBalancer Service.
type gatewayConfig struct {
	address          string
	serviceName      string
	serviceNamespace string
	port             int
	portName         string
	discovery        bool
	interval         time.Duration
	// refused is why the explicit address is not advertised ("" when it is).
	refused string
}

// source is where this site's advertised gateway address comes from, as
// the reference has it: an explicit address wins and is advertised
// whatever discovery says; otherwise the Service is looked up only with
// discovery on (GRID_GATEWAY_DISCOVERY_ENABLED, true by default) and a
// Service named. Neither: a consumer-only site advertises none.
func (g gatewayConfig) source() (explicit string, discover bool) {
	if g.address != "" {
		if g.refused != "" {
			return "", false // the explicit address still wins over discovery
		}
		return g.address, false
	}
	return "", g.discovery && g.serviceName != ""
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
	fs.IntVar(&c.maxOverlayBytes, "max-overlay-bytes", envelope.DefaultMaxBytes, "largest overlay envelope published to a gateway, in bytes (the smallest --max-bytes its sidecars report, when smaller, wins); the plain form also fits a ConfigMap's 1 MiB only up to about half of it, the compressed form far beyond"+note("max-overlay-bytes"))
	fs.IntVar(&c.compressOverlaysAbove, "compress-overlays-above", controller.DefaultCompressOverlaysAbove, "envelope size, in bytes, from which a network of overlayEncoding Auto publishes the compressed form to a gateway whose pods all read it"+note("compress-overlays-above"))
	fs.StringVar(&c.kubeconfig, "kubeconfig", "", "kubeconfig file for out-of-cluster use (default: in-cluster, then $KUBECONFIG)")
	fs.StringVar(&c.healthAddr, "health-addr", ":8081", "address of /livez, /readyz, /status and (without --metrics-tls) /metrics"+note("health-addr"))
	fs.StringVar(&c.metricsTLS.dir, "metrics-tls", "", "a folder holding tls.crt and tls.key (a mounted Secret: the site identity or another): /metrics is then served over HTTPS on --metrics-addr only, with that identity, reloaded when it rotates (empty: plain HTTP on --health-addr)"+note("metrics-tls"))
	fs.StringVar(&c.metricsTLS.addr, "metrics-addr", ":8443", "address of /metrics over HTTPS, with --metrics-tls"+note("metrics-addr"))
	fs.BoolVar(&c.metricsTLS.clientAuth, "metrics-client-auth", false, "with --metrics-tls, serve /metrics only to a client certificate that verifies to the folder's ca.crt"+note("metrics-client-auth"))
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
	scraper := fs.String("scraper-service-account", "", "the ServiceAccount (name in the agent's namespace, or namespace/name) whose short-lived tokens are sent to providers whose metricsConfig.auth or healthCheck.auth asks for one (empty: such providers are not scraped or probed)"+note("scraper-service-account"))
	probeSelector := fs.String("probe-secret-selector", "", "label selector a credential Secret must match before its token is sent in a health probe (empty: off)"+note("probe-secret-selector"))

	// SWIM and the gateway address read the Grid reference's variables.
	ref := envflag.Note
	bind := func(flagName, env string) { bindings = append(bindings, envflag.Binding{Flag: flagName, Env: env}) }
	fs.StringVar(&c.swim.bindAddr, "swim-bind-addr", "", "IP:port SWIM listens on, UDP and TCP (empty: no SWIM, every network stays Pending)"+ref("GRID_SWIM_BIND_ADDR"))
	bind("swim-bind-addr", "GRID_SWIM_BIND_ADDR")
	fs.StringVar(&c.swim.advertiseAddr, "swim-advertise-addr", "", "address peers reach this site's SWIM at: IP:port, [IPv6]:port or hostname:port (default: the bind address)"+ref("GRID_SWIM_ADVERTISE_ADDR"))
	bind("swim-advertise-addr", "GRID_SWIM_ADVERTISE_ADDR")
	fs.StringVar(&c.swim.site, "site-name", "", "this site's name, a lowercase DNS label: its SWIM member name and the subject of the site certificate the agent issues (required with --swim-bind-addr)"+ref("GRID_SWIM_SITE_NAME"))
	bind("site-name", "GRID_SWIM_SITE_NAME")
	seeds := fs.String("swim-seeds", "", "comma-separated SWIM addresses joined at start, in addition to every network's spec.seeds"+ref("GRID_SWIM_SEEDS"))
	bind("swim-seeds", "GRID_SWIM_SEEDS")
	fs.BoolVar(&c.swim.requireKey, "swim-require-key", true, "hold SWIM (nothing sent or received) until a key is loaded or a network declares none"+ref("GRID_SWIM_REQUIRE_KEY"))
	bind("swim-require-key", "GRID_SWIM_REQUIRE_KEY")
	fs.DurationVar(&c.swim.probeInterval, "swim-probe-interval", 5*time.Second, "SWIM probe period"+note("swim-probe-interval"))
	fs.DurationVar(&c.swim.probeTimeout, "swim-probe-timeout", 3*time.Second, "time for a direct probe answer before indirect probes"+note("swim-probe-timeout"))
	fs.IntVar(&c.swim.suspectPeriods, "swim-suspect-periods", 3, "probe periods a suspect site is kept before it is dead"+note("swim-suspect-periods"))
	// A minute, memberlist's WAN default: each push/pull carries both
	// sites' member lists and record digests (about 45 KB at 50 sites),
	// which at 30 s was a third of an idle site's traffic; changes go
	// straight to every member and a healed cut is found by the dials of
	// dead sites, so nothing waits for it.
	fs.DurationVar(&c.swim.pushPullInterval, "swim-push-pull-interval", time.Minute, "how often record versions are compared with a random site"+note("swim-push-pull-interval"))
	fs.DurationVar(&c.swim.staleTTL, "swim-stale-ttl", 10*time.Minute, "how long the records of a site that is not alive are kept, marked stale"+note("swim-stale-ttl"))
	fs.DurationVar(&c.swim.tombstoneTTL, "swim-tombstone-ttl", 10*time.Minute, "how long a withdrawn record is remembered"+note("swim-tombstone-ttl"))
	fs.StringVar(&c.swim.serviceName, "swim-service-name", "", "SWIM Service (without selector) whose EndpointSlice the leader points at itself, from $POD_IP (empty: none)"+note("swim-service-name"))
	fs.DurationVar(&c.swim.keyPollInterval, "swim-key-poll-interval", 10*time.Second, "how often the networks' SWIM key and trust Secrets are read (a key rotation step, a replaced CA or site certificate is followed within it)"+note("swim-key-poll-interval"))
	fs.StringVar(&c.swim.recordKeySecret, "record-key-secret", rbac.DefaultRecordKeySecret, "the Secret in the agent's namespace holding this site's key for the records of networks without a grid CA (created when missing; keep it: another key is refused by every site that holds this one)"+note("record-key-secret"))
	fs.DurationVar(&c.trust.certLifetime, "site-cert-lifetime", 0, "lifetime of the site certificates the agent issues from the grid CA, its own and enrolled sites' (renewed at two thirds); 0: 24h, or 2160h in a network whose sites pin each other's certificates (peerTrust.mode pinned)")
	fs.DurationVar(&c.trust.probeInterval, "site-probe-interval", 30*time.Second, "how often each GridSite's gateway is probed over mutual TLS (and at once when its inputs change)")
	fs.DurationVar(&c.trust.probeTimeout, "site-probe-timeout", 5*time.Second, "bound of one probe of a GridSite's gateway")
	fs.StringVar(&c.gateway.address, "gateway-address", "", "this site's data-plane gateway address, advertised to the other sites (skips discovery)"+ref("GRID_GATEWAY_ADDRESS"))
	bind("gateway-address", "GRID_GATEWAY_ADDRESS")
	fs.StringVar(&c.gateway.serviceName, "gateway-service-name", "", "LoadBalancer Service whose first ingress is the gateway address"+ref("GRID_GATEWAY_SERVICE_NAME"))
	bind("gateway-service-name", "GRID_GATEWAY_SERVICE_NAME")
	fs.StringVar(&c.gateway.serviceNamespace, "gateway-service-namespace", electionNamespace, "namespace of that Service (default: $POD_NAMESPACE)"+ref("GRID_GATEWAY_SERVICE_NAMESPACE"))
	bind("gateway-service-namespace", "GRID_GATEWAY_SERVICE_NAMESPACE")
	fs.IntVar(&c.gateway.port, "gateway-port", 0, "advertised gateway port (default: the Service's first port, else 8080)"+ref("GRID_GATEWAY_PORT"))
	bind("gateway-port", "GRID_GATEWAY_PORT")
	fs.StringVar(&c.gateway.portName, "gateway-port-name", "", "advertise the Service port of this name (a production endpoint's named port) instead of its first; a Service without it advertises none"+note("gateway-port-name"))
	fs.BoolVar(&c.gateway.discovery, "gateway-discovery", true, "discover the gateway address from the Service; false on a consumer-only site"+ref("GRID_GATEWAY_DISCOVERY_ENABLED"))
	bind("gateway-discovery", "GRID_GATEWAY_DISCOVERY_ENABLED")
	fs.DurationVar(&c.gateway.interval, "gateway-discovery-interval", 5*time.Second, "how often the Service is read"+ref("GRID_GATEWAY_DISCOVERY_INTERVAL_MS")+" (milliseconds there)")

	fs.StringVar(&c.signals.addr, "signals-addr", "", "address of the signals listener, HTTPS over TCP and HTTP/3 over UDP on one port, e.g. :9443 (empty: off)"+note("signals-addr"))
	fs.StringVar(&c.signals.certFile, "signals-cert", "", "the site certificate (leaf then chain) the listener serves with, in its mounted Secret"+note("signals-cert"))
	fs.StringVar(&c.signals.keyFile, "signals-key", "", "its private key"+note("signals-key"))
	fs.StringVar(&c.signals.caFile, "signals-ca", "", "the grid CA bundle client certificates are verified against"+note("signals-ca"))
	fs.DurationVar(&c.signals.identityInterval, "signals-identity-interval", tlsidentity.DefaultInterval, "how often the listener reads its identity (--signals-cert, --signals-key, --signals-ca) again: a renewal, or the CAs of a grid CA rotation, is served from the next read"+note("signals-identity-interval"))
	naming := fs.String("signals-peer-naming", "organization", "how a peer's certificate names its site: organization, or spiffe (its SPIFFE ID)"+note("signals-peer-naming"))
	fs.IntVar(&c.signals.maxConnections, "signals-max-connections", 256, "connections of the gateway and the peers together"+note("signals-max-connections"))
	fs.IntVar(&c.signals.reservedForGateway, "signals-gateway-reserved", 8, "of those, the connections peers never take: kept for the co-located gateway"+note("signals-gateway-reserved"))
	fs.IntVar(&c.signals.perSite, "signals-per-site-connections", 16, "connections of one peer site; past it, 503"+note("signals-per-site-connections"))
	fs.Float64Var(&c.signals.handshakeRate, "signals-handshake-rate", 20, "handshakes per second per source address (a /64 may make 2.5 times, a /48 5 times as many)"+note("signals-handshake-rate"))
	fs.IntVar(&c.signals.handshakeBurst, "signals-handshake-burst", 40, "handshakes per source address in a burst"+note("signals-handshake-burst"))
	fs.DurationVar(&c.signals.maxConnectionAge, "signals-max-connection-age", 5*time.Minute, "close a connection that has lived this long"+note("signals-max-connection-age"))
	fs.DurationVar(&c.signals.writeTimeout, "signals-write-timeout", 10*time.Second, "close a connection whose response write stalls this long"+note("signals-write-timeout"))
	fs.DurationVar(&c.signals.interval, "signals-interval", 5*time.Second, "how often providers' signals are collected and peers' polled"+note("signals-interval"))
	fs.IntVar(&c.signals.peerPort, "signals-peer-port", 0, "the port peers serve their signals on, at their SWIM host (default: this listener's port)"+note("signals-peer-port"))
	fs.StringVar(&c.signals.serviceName, "signals-service-name", "", "signals Service (without selector) whose EndpointSlice the leader points at itself, from $POD_IP (empty: none)"+note("signals-service-name"))
	fs.StringVar(&c.signals.reportAudience, "report-audience", "gridsync-agent", "audience of the sidecars' report tokens, checked by TokenReview"+note("report-audience"))
	fs.DurationVar(&c.signals.reportSilentAfter, "report-silent-after", 90*time.Second, "a gateway pod whose sidecar has not reported for this long lags as Silent"+note("report-silent-after"))
	fs.StringVar(&c.signals.enrollmentTokenSecret, "enrollment-token-secret", enrol.DefaultTokenSecret, "the Secret in the agent's namespace holding the enrolment tokens (hashed) of the sites this site issues certificates for"+note("enrollment-token-secret"))
	fs.IntVar(&c.signals.reportMaxPodsPerGateway, "report-max-pods-per-gateway", rollout.DefaultMaxPodsPerGateway, "pods of one gateway whose reports are held: one gateway's reporters never crowd out another's"+note("report-max-pods-per-gateway"))
	fs.Float64Var(&c.signals.reportReviewRate, "report-review-rate", reports.DefaultReviewBudget().TotalRate, "TokenReviews per second for report tokens, all callers together (below --kube-api-qps)"+note("report-review-rate"))
	fs.IntVar(&c.signals.reportReviewBurst, "report-review-burst", reports.DefaultReviewBudget().TotalBurst, "TokenReviews for report tokens in a burst (a restart of many pods)"+note("report-review-burst"))

	if err := envflag.Parse(fs, bindings, args, getenv); err != nil {
		return nil, err
	}
	switch *naming {
	case "organization":
	case "spiffe":
		c.signals.spiffe = true
	default:
		return nil, envflag.UsageError(fs, "--signals-peer-naming must be organization or spiffe, got %q", *naming)
	}
	if c.metricsTLS.clientAuth && !c.metricsTLS.enabled() {
		return nil, envflag.UsageError(fs, "--metrics-client-auth needs --metrics-tls: client certificates are asked for only over TLS")
	}
	if c.signals.enabled() {
		if c.signals.certFile == "" || c.signals.keyFile == "" || c.signals.caFile == "" {
			return nil, envflag.UsageError(fs, "--signals-addr needs --signals-cert, --signals-key and --signals-ca: the listener serves only with the site identity and verifies callers against the grid CA")
		}
		if c.signals.identityInterval <= 0 {
			return nil, envflag.UsageError(fs, "--signals-identity-interval must be positive")
		}
		if c.signals.podIP = getenv("POD_IP"); c.signals.serviceName != "" && c.signals.podIP == "" {
			return nil, envflag.UsageError(fs, "--signals-service-name needs the pod's address in $POD_IP")
		}
		if c.swim.site == "" {
			return nil, envflag.UsageError(fs, "--signals-addr needs --site-name: a reissued leaf of this site is told from the gateway by it")
		}
		if c.signals.maxConnections <= c.signals.reservedForGateway || c.signals.reservedForGateway < 0 || c.signals.perSite < 1 ||
			c.signals.handshakeRate <= 0 || c.signals.handshakeBurst < 1 || c.signals.maxConnectionAge < time.Second ||
			c.signals.writeTimeout < 100*time.Millisecond || c.signals.reportSilentAfter < 3*time.Second ||
			c.signals.interval < 100*time.Millisecond || c.signals.peerPort < 0 || c.signals.peerPort > 65535 ||
			c.signals.reportMaxPodsPerGateway < 1 || c.signals.reportReviewRate <= 0 || c.signals.reportReviewBurst < 1 {
			return nil, envflag.UsageError(fs, "signals caps: --signals-max-connections must exceed --signals-gateway-reserved, the per-site cap, rate and burst be positive, the age at least 1s, the write timeout at least 100ms, --report-silent-after at least 3s, --signals-interval at least 100ms, --signals-peer-port a port, the report caps positive")
		}
	}
	if ms := getenv("GRID_GATEWAY_DISCOVERY_INTERVAL_MS"); ms != "" && !flagSet(fs, "gateway-discovery-interval") {
		n, err := strconv.Atoi(ms)
		if err != nil || n <= 0 {
			return nil, envflag.UsageError(fs, "GRID_GATEWAY_DISCOVERY_INTERVAL_MS=%q is not a positive number of milliseconds", ms)
		}
		c.gateway.interval = time.Duration(n) * time.Millisecond
	}
	if hexKey := getenv("GRID_SWIM_ENCRYPT_KEY"); hexKey != "" {
		k, err := swimkeys.ParseHex(hexKey)
		if err != nil {
			// The value is never echoed.
			return nil, envflag.UsageError(fs, "GRID_SWIM_ENCRYPT_KEY: %v", err)
		}
		c.swim.key = k
	}
	for _, s := range strings.Split(*seeds, ",") {
		if s = strings.TrimSpace(s); s != "" {
			c.swim.seeds = append(c.swim.seeds, s)
		}
	}
	if c.swim.site != "" {
		if errs := validation.IsDNS1123Label(c.swim.site); len(errs) > 0 {
			return nil, envflag.UsageError(fs, "--site-name: %q is not a lowercase DNS label: %s", c.swim.site, strings.Join(errs, "; "))
		}
	}
	if errs := validation.IsDNS1123Subdomain(c.swim.recordKeySecret); len(errs) > 0 {
		return nil, envflag.UsageError(fs, "--record-key-secret: %q is not a Secret name: %s", c.swim.recordKeySecret, strings.Join(errs, "; "))
	}
	if c.trust.certLifetime != 0 && c.trust.certLifetime < time.Second || c.trust.probeInterval < 100*time.Millisecond || c.trust.probeTimeout <= 0 || c.trust.probeTimeout > c.trust.probeInterval {
		return nil, envflag.UsageError(fs, "--site-cert-lifetime must be 0 (by the network) or at least 1s, --site-probe-interval at least 100ms, --site-probe-timeout positive and no longer than the interval")
	}
	if c.swim.enabled() {
		if c.swim.site == "" {
			return nil, envflag.UsageError(fs, "--site-name (GRID_SWIM_SITE_NAME) is required with --swim-bind-addr: every replica of the site must carry the same name")
		}
		if c.swim.probeInterval <= 0 || c.swim.probeTimeout <= 0 || c.swim.probeTimeout >= c.swim.probeInterval || c.swim.suspectPeriods < 1 {
			return nil, envflag.UsageError(fs, "--swim-probe-timeout must be positive and shorter than --swim-probe-interval, --swim-suspect-periods at least 1")
		}
		if c.swim.podIP = getenv("POD_IP"); c.swim.serviceName != "" && c.swim.podIP == "" {
			return nil, envflag.UsageError(fs, "--swim-service-name needs the pod's address in $POD_IP")
		}
		if c.swim.keyPollInterval < time.Second || c.swim.pushPullInterval < time.Second || c.swim.staleTTL <= 0 || c.swim.tombstoneTTL <= 0 {
			return nil, envflag.UsageError(fs, "--swim-key-poll-interval and --swim-push-pull-interval must be at least 1s, the TTLs positive")
		}
	} else if len(c.swim.key) > 0 || len(c.swim.seeds) > 0 {
		return nil, envflag.UsageError(fs, "GRID_SWIM_ENCRYPT_KEY and GRID_SWIM_SEEDS need --swim-bind-addr (GRID_SWIM_BIND_ADDR)")
	}
	if c.gateway.port != 0 && c.gateway.portName != "" {
		return nil, envflag.UsageError(fs, "--gateway-port and --gateway-port-name both name the advertised port: set one")
	}
	if c.gateway.port < 0 || c.gateway.port > 65535 || c.gateway.interval <= 0 {
		return nil, envflag.UsageError(fs, "--gateway-port must be 0 to 65535 and --gateway-discovery-interval positive")
	}
	if c.gateway.address != "" {
		// The other sites take only an address that reads one way. The
		// reference accepts any non-empty string, so one they would refuse
		// does not stop the agent: it is not advertised (as discovery
		// declines to advertise such an address), and the reason is logged
		// at start, where it can be fixed.
		if _, err := sites.ParseGatewayAddress(c.gateway.address); err != nil {
			c.gateway.refused = "--gateway-address (GRID_GATEWAY_ADDRESS): " + err.Error()
		}
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
	if *scraper != "" {
		ns, name, found := strings.Cut(*scraper, "/")
		if !found {
			ns, name = electionNamespace, *scraper
		}
		if len(validation.IsDNS1123Label(ns)) > 0 || len(validation.IsDNS1123Subdomain(name)) > 0 {
			return nil, envflag.UsageError(fs, "--scraper-service-account: %q is not name or namespace/name", *scraper)
		}
		c.scraperAccount = types.NamespacedName{Namespace: ns, Name: name}
	}
	if *probeSelector != "" {
		if c.probeSecretSelector, err = labels.Parse(*probeSelector); err != nil {
			return nil, envflag.UsageError(fs, "--probe-secret-selector: %v", err)
		}
	}
	if c.resyncPeriod < 10*time.Second {
		return nil, envflag.UsageError(fs, "--resync-period must be at least 10s, got %s", c.resyncPeriod)
	}
	if c.maxOverlayBytes <= 0 || c.maxOverlayBytes > envelope.MaxBytesCeiling || c.compressOverlaysAbove <= 0 {
		return nil, envflag.UsageError(fs, "--max-overlay-bytes must be between 1 and %d and --compress-overlays-above positive", envelope.MaxBytesCeiling)
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

// flagSet reports whether a flag was given on the command line or by its
// bound variable.
func flagSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}
