// Package syncflags is the command line of gridsync-sidecar and
// gridsync-init. It accepts every flag and environment variable of the
// upstream overlay-sync sidecar with the same meaning and default, so that
// gridsync is a drop-in replacement, and adds its own. A flag given on the
// command line wins over its environment variable, which wins over the
// default. Every error names the flag.
package syncflags

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/gridsync/gridsync/shared/envelope"
	"github.com/gridsync/gridsync/shared/envflag"
	"github.com/gridsync/gridsync/shared/overlaysync"
	"github.com/gridsync/gridsync/shared/publish"
	"github.com/gridsync/gridsync/shared/tlsidentity"
)

// Mode selects the flags of one binary.
type Mode int

const (
	// Sidecar is gridsync-sidecar: a long-running watch with a health
	// server.
	Sidecar Mode = iota
	// Init is gridsync-init: publish the first valid overlay and exit.
	Init
)

// Config is the parsed command line.
type Config struct {
	Namespace         string
	ConfigMap         string
	DataKey           string
	Output            string
	ExpectedNetwork   string
	ExpectedGateway   string
	ExpectedNamespace string
	ExpectedLocalSite string
	MaxBytes          int
	// OverlayEncoding is the form of the overlay ConfigMap the sidecar
	// asks the agent for in its reports: auto, zstd or plain. It reads
	// both forms whatever it asks.
	OverlayEncoding  string
	AcceptLegacy     bool
	Kubeconfig       string
	LogLevel         slog.Level
	ExpireAfter      time.Duration
	WatchIdleTimeout time.Duration
	HealthAddr       string // sidecar only
	ProbeAddr        string // sidecar only
	Once             bool   // sidecar only
	Timeout          time.Duration
	// Fsync says when publications (the overlay and the identity) are
	// fsynced: auto, always or never.
	Fsync publish.SyncMode

	// The pod's mounted TLS identity (a Secret volume) and the folder in
	// the shared volume it is published to; all empty means off.
	IdentityCert     string
	IdentityKey      string
	IdentityCA       string
	IdentityDir      string
	IdentityInterval time.Duration

	// Delivery reports to the agent (sidecar only); off unless ReportTo
	// is set.
	ReportTo         string
	ReportTokenFile  string
	ReportCA         string
	ReportServerName string
	ReportInterval   time.Duration
	PodName          string
}

// EncodingAuto leaves the overlay's form to the agent: compressed when the
// overlay is large enough for it to pay and every pod reads it.
const EncodingAuto = envelope.EncodingAuto

// DefaultReportTokenFile is where the chart projects the report token.
const DefaultReportTokenFile = "/var/run/secrets/gridsync/report/token"

// IdentityEnabled reports whether TLS identity sync is configured.
func (c *Config) IdentityEnabled() bool {
	return c.IdentityCert != "" || c.IdentityKey != "" || c.IdentityDir != "" || c.IdentityCA != ""
}

// Defaults of the upstream sidecar.
const (
	DefaultNamespace  = "grid-system"
	DefaultOutput     = "/run/praxis-routing/routing-overlay.json"
	DefaultHealthAddr = "0.0.0.0:9091"
)

// MinExpireAfter is the shortest --expire-after that cannot withdraw
// readiness on a healthy but quiet source: with nothing changing, the API
// server confirms the watch with a bookmark about once a minute (measured
// against kube-apiserver 1.37).
const MinExpireAfter = 2 * time.Minute

// envPrefix is the upstream sidecar's environment variable prefix.
const envPrefix = "OVERLAY_SYNC_"

// Parse parses args (without the program name). getenv reads the
// environment (os.Getenv). Usage and errors go to output. It returns
// flag.ErrHelp when help was asked for.
func Parse(mode Mode, program string, args []string, getenv func(string) string, output io.Writer) (*Config, error) {
	c := &Config{}
	fs := flag.NewFlagSet(program, flag.ContinueOnError)
	fs.SetOutput(output)
	var bindings []envflag.Binding
	bind := func(name, env string) {
		bindings = append(bindings, envflag.Binding{Flag: name, Env: env})
	}
	str := func(p *string, name, env, def, usage string) {
		fs.StringVar(p, name, def, usage+envflag.Note(env))
		bind(name, env)
	}
	str(&c.Namespace, "namespace", envPrefix+"NAMESPACE", DefaultNamespace, "namespace of the overlay ConfigMap")
	str(&c.ConfigMap, "config-map", envPrefix+"CONFIGMAP", "", "name of the overlay ConfigMap (required)")
	str(&c.DataKey, "data-key", envPrefix+"DATA_KEY", envelope.DataKeyEnvelope, "ConfigMap data key holding the envelope")
	str(&c.Output, "output", envPrefix+"OUTPUT", DefaultOutput, "file to publish atomically (in the volume shared with the gateway)")
	str(&c.ExpectedNetwork, "expected-network", envPrefix+"EXPECTED_NETWORK", "", "Grid network this gateway serves (required)")
	str(&c.ExpectedGateway, "expected-gateway", envPrefix+"EXPECTED_GATEWAY", "", "gateway name (required)")
	str(&c.ExpectedLocalSite, "expected-local-site", envPrefix+"EXPECTED_LOCAL_SITE", "", "site of this gateway (required)")
	str(&c.ExpectedNamespace, "expected-namespace", envPrefix+"EXPECTED_NAMESPACE", "", "namespace in the envelope's scope (default: --namespace)")
	fs.IntVar(&c.MaxBytes, "max-bytes", envelope.DefaultMaxBytes, "largest envelope accepted, in bytes"+envflag.Note(envPrefix+"MAX_BYTES"))
	bind("max-bytes", envPrefix+"MAX_BYTES")
	str(&c.OverlayEncoding, "overlay-encoding", envPrefix+"OVERLAY_ENCODING", EncodingAuto,
		"form of the overlay ConfigMap to ask the agent for in delivery reports: auto (compressed when large and every pod reads it), zstd (always compressed) or plain (never); both forms are read either way")
	fs.BoolVar(&c.AcceptLegacy, "accept-legacy", false, "deliver a bare overlay without an envelope"+envflag.Note(envPrefix+"ACCEPT_LEGACY"))
	bind("accept-legacy", envPrefix+"ACCEPT_LEGACY")
	fs.StringVar(&c.Kubeconfig, "kubeconfig", "", "kubeconfig file for out-of-cluster use (default: in-cluster, then $KUBECONFIG)")
	fsync := fs.String("fsync", string(publish.SyncAuto), "fsync the published files: auto (not inside an emptyDir or on tmpfs, where the atomic rename is all a reader needs), always or never"+envflag.Note(envPrefix+"FSYNC"))
	bind("fsync", envPrefix+"FSYNC")
	logLevel := fs.String("log-level", "info", "log level: debug, info, warn or error"+envflag.Note(envPrefix+"LOG_LEVEL"))
	bind("log-level", envPrefix+"LOG_LEVEL")
	fs.DurationVar(&c.WatchIdleTimeout, "watch-idle-timeout", 3*time.Minute, "restart a watch that delivered nothing, not even a bookmark, for this long"+envflag.Note(envPrefix+"WATCH_IDLE_TIMEOUT"))
	bind("watch-idle-timeout", envPrefix+"WATCH_IDLE_TIMEOUT")
	str(&c.IdentityCert, "identity-cert", envPrefix+"IDENTITY_CERT", "", "TLS certificate (leaf and chain) of the pod, in its mounted Secret")
	str(&c.IdentityKey, "identity-key", envPrefix+"IDENTITY_KEY", "", "TLS private key of the pod, in its mounted Secret")
	str(&c.IdentityCA, "identity-ca", envPrefix+"IDENTITY_CA", "", "CA bundle the certificate must verify to (optional)")
	str(&c.IdentityDir, "identity-dir", envPrefix+"IDENTITY_DIR", "", "folder in the shared volume that receives tls.crt, tls.key and ca.crt as one generation")
	fs.DurationVar(&c.IdentityInterval, "identity-interval", 30*time.Second, "how often the mounted identity is read"+envflag.Note(envPrefix+"IDENTITY_INTERVAL"))
	bind("identity-interval", envPrefix+"IDENTITY_INTERVAL")
	switch mode {
	case Sidecar:
		str(&c.HealthAddr, "health-addr", envPrefix+"HEALTH_ADDR", DefaultHealthAddr, "address of /livez, /readyz, /startupz, /status and /metrics")
		str(&c.ProbeAddr, "probe-addr", envPrefix+"PROBE_ADDR", "", "address of /livez, /readyz and /startupz alone, for the kubelet's probes: no scrape or idle client on the health port can starve them (off when empty)")
		fs.BoolVar(&c.Once, "once", false, "publish one valid overlay, then exit (no health port)"+envflag.Note(envPrefix+"ONCE"))
		bind("once", envPrefix+"ONCE")
		str(&c.ReportTo, "report-to", envPrefix+"REPORT_TO", "", "https:// address of the agent's signals listener to report deliveries to (off when empty)")
		str(&c.ReportTokenFile, "report-token-file", envPrefix+"REPORT_TOKEN_FILE", DefaultReportTokenFile, "projected ServiceAccount token the reports authenticate with")
		str(&c.ReportCA, "report-ca", envPrefix+"REPORT_CA", "", "CA bundle verifying the agent (default: --identity-ca, else the system's)")
		str(&c.ReportServerName, "report-server-name", envPrefix+"REPORT_SERVER_NAME", "", "name the agent's certificate carries (default: the host of --report-to)")
		fs.DurationVar(&c.ReportInterval, "report-interval", 30*time.Second, "report an unchanged state this often"+envflag.Note(envPrefix+"REPORT_INTERVAL"))
		bind("report-interval", envPrefix+"REPORT_INTERVAL")
		str(&c.PodName, "pod-name", "POD_NAME", "", "this pod's name, for the reports (default: $HOSTNAME)")
		fs.DurationVar(&c.ExpireAfter, "expire-after", 0, "withdraw readiness when the ConfigMap has not been confirmed by the API for this long (0: never)"+envflag.Note(envPrefix+"EXPIRE_AFTER"))
		bind("expire-after", envPrefix+"EXPIRE_AFTER")
	case Init:
		fs.DurationVar(&c.Timeout, "timeout", 0, "give up and exit non-zero after this long (0: wait for ever)"+envflag.Note(envPrefix+"TIMEOUT"))
		bind("timeout", envPrefix+"TIMEOUT")
	}

	if err := envflag.Parse(fs, bindings, args, getenv); err != nil {
		return nil, err
	}
	var err error
	if c.LogLevel, err = envflag.LogLevel(fs, *logLevel); err != nil {
		return nil, err
	}
	// RUST_LOG, the upstream sidecar's level, counts when neither the flag
	// nor its variable says otherwise.
	if level, ok := rustLogLevel(getenv("RUST_LOG")); ok && !isSet(fs, "log-level") {
		c.LogLevel = level
	}
	var fsyncErr error
	c.Fsync, fsyncErr = publish.ParseSyncMode(*fsync)
	if c.ExpectedNamespace == "" {
		c.ExpectedNamespace = c.Namespace
	}
	if c.PodName == "" {
		c.PodName = getenv("HOSTNAME")
	}
	if c.ReportCA == "" {
		c.ReportCA = c.IdentityCA
	}
	if err := errors.Join(c.validate(bindings), wrapFsync(fsyncErr)); err != nil {
		return nil, envflag.UsageError(fs, "%v", err)
	}
	return c, nil
}

func (c *Config) validate(bindings []envflag.Binding) error {
	envOf := map[string]string{}
	for _, b := range bindings {
		envOf[b.Flag] = b.Env
	}
	var errs []error
	required := func(value, name string) {
		if strings.TrimSpace(value) == "" {
			errs = append(errs, fmt.Errorf("--%s is required (or set %s)", name, envOf[name]))
		}
	}
	required(c.ConfigMap, "config-map")
	required(c.Namespace, "namespace")
	required(c.DataKey, "data-key")
	required(c.Output, "output")
	required(c.ExpectedNetwork, "expected-network")
	required(c.ExpectedGateway, "expected-gateway")
	required(c.ExpectedLocalSite, "expected-local-site")
	if c.MaxBytes <= 0 || c.MaxBytes > envelope.MaxBytesCeiling {
		errs = append(errs, fmt.Errorf("--max-bytes must be between 1 and %d, got %d", envelope.MaxBytesCeiling, c.MaxBytes))
	}
	switch c.OverlayEncoding {
	case EncodingAuto, envelope.EncodingZstd, envelope.EncodingPlain:
	default:
		errs = append(errs, fmt.Errorf("--overlay-encoding must be auto, zstd or plain, got %q", c.OverlayEncoding))
	}
	if c.ExpireAfter < 0 || (c.ExpireAfter > 0 && c.ExpireAfter < MinExpireAfter) {
		errs = append(errs, fmt.Errorf("--expire-after must be 0 (off) or at least %s, got %s: a quiet ConfigMap is confirmed only by the API server's bookmarks, about once a minute", MinExpireAfter, c.ExpireAfter))
	}
	if c.WatchIdleTimeout <= 0 {
		errs = append(errs, fmt.Errorf("--watch-idle-timeout must be positive, got %s", c.WatchIdleTimeout))
	}
	if c.ReportTo != "" {
		if u, err := url.Parse(c.ReportTo); err != nil || u.Scheme != "https" || u.Host == "" || (u.Path != "" && u.Path != "/") {
			errs = append(errs, fmt.Errorf("--report-to must be an https://host:port address, got %q", c.ReportTo))
		}
		required(c.PodName, "pod-name")
		if c.ReportInterval < time.Second {
			errs = append(errs, fmt.Errorf("--report-interval must be at least 1s, got %s", c.ReportInterval))
		}
	}
	if c.IdentityEnabled() {
		required(c.IdentityCert, "identity-cert")
		required(c.IdentityKey, "identity-key")
		required(c.IdentityDir, "identity-dir")
		if c.IdentityInterval <= 0 {
			errs = append(errs, fmt.Errorf("--identity-interval must be positive, got %s", c.IdentityInterval))
		}
	}
	if c.Timeout < 0 {
		errs = append(errs, fmt.Errorf("--timeout must not be negative, got %s", c.Timeout))
	}
	return errors.Join(errs...)
}

// SyncOptions turns the command line into overlaysync options; the caller
// adds the logger, the metrics registry and the mode (Once).
func (c *Config) SyncOptions() overlaysync.Options {
	return overlaysync.Options{
		Namespace: c.Namespace,
		ConfigMap: c.ConfigMap,
		DataKey:   c.DataKey,
		Output:    c.Output,
		Expect: envelope.Scope{
			Network:   c.ExpectedNetwork,
			Gateway:   c.ExpectedGateway,
			Namespace: c.ExpectedNamespace,
			LocalSite: c.ExpectedLocalSite,
		},
		MaxBytes:         c.MaxBytes,
		AcceptLegacy:     c.AcceptLegacy,
		ExpireAfter:      c.ExpireAfter,
		WatchIdleTimeout: c.WatchIdleTimeout,
		Once:             c.Once,
		Fsync:            c.Fsync,
	}
}

// IdentityOptions turns the identity flags into reloader options; the
// caller adds the logger, the registry and the publication hook. The
// gateway serves TLS with it, so server-auth usage is required.
func (c *Config) IdentityOptions() tlsidentity.Options {
	return tlsidentity.Options{
		CertFile:          c.IdentityCert,
		KeyFile:           c.IdentityKey,
		CAFile:            c.IdentityCA,
		Interval:          c.IdentityInterval,
		RequireServerAuth: true,
	}
}

// NewLogger returns the JSON logger of a binary at the configured level.
func (c *Config) NewLogger(w io.Writer, binary string) *slog.Logger {
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: c.LogLevel})).With("binary", binary)
}

// isSet reports whether a flag was given, on the command line or by its
// environment variable.
func isSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// rustLogLevel reads a level from a RUST_LOG value: a bare level
// ("debug"), or the default of a directive list ("warn,overlay_sync=debug":
// warn; a target's own level counts when it names the sidecar). trace is
// debug, off is error.
func rustLogLevel(value string) (slog.Level, bool) {
	var level slog.Level
	found := false
	for _, directive := range strings.Split(value, ",") {
		directive = strings.TrimSpace(directive)
		target, name, scoped := strings.Cut(directive, "=")
		if !scoped {
			name, target = directive, ""
		}
		if scoped && !strings.Contains(target, "overlay_sync") {
			continue
		}
		l, ok := rustLevels[strings.ToLower(strings.TrimSpace(name))]
		if !ok {
			continue
		}
		if scoped || !found {
			level, found = l, true
		}
		if scoped {
			return level, true // the sidecar's own directive wins
		}
	}
	return level, found
}

var rustLevels = map[string]slog.Level{
	"trace": slog.LevelDebug,
	"debug": slog.LevelDebug,
	"info":  slog.LevelInfo,
	"warn":  slog.LevelWarn,
	"error": slog.LevelError,
	"off":   slog.LevelError,
}

func wrapFsync(err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("--fsync: %w", err)
}

// IdentityPublisher publishes each identity into IdentityDir, fsynced as
// the overlay is: by --fsync and the folder's medium, decided once here
// and logged. The folder is created first, as publication would.
func (c *Config) IdentityPublisher(log *slog.Logger) (func(*tlsidentity.Identity) error, error) {
	if err := os.MkdirAll(c.IdentityDir, 0o755); err != nil {
		return nil, fmt.Errorf("identity folder: %w", err)
	}
	d, err := publish.Decide(c.Fsync, c.IdentityDir)
	if err != nil {
		return nil, err
	}
	log.Info("identity_durability", "dir", c.IdentityDir, "medium", d.Medium, "fsync_mode", string(d.Mode), "fsync", d.Sync)
	return tlsidentity.PublishSynced(c.IdentityDir, d.Sync), nil
}
