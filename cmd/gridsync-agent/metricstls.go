package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gridsync/gridsync/shared/health"
	"github.com/gridsync/gridsync/shared/tlsidentity"
	"github.com/gridsync/gridsync/shared/tlsserver"
)

// metricsListener serves /metrics over HTTPS on every replica (a manager
// runnable that needs no leadership: Prometheus scrapes the standbys too).
// Its port is bound at start, so that a taken port stops the agent there,
// and served once the identity is there: the site identity is issued by
// the agent itself, and the kubelet projects the Secret a while after.
// Until then the port accepts nothing, and /metrics is served nowhere in
// plaintext: a scrape fails rather than falls back.
type metricsListener struct {
	cfg      metricsTLSConfig
	ln       net.Listener
	gatherer prometheus.Gatherer
	log      *slog.Logger
	// reg receives the identity's reload and expiry metrics.
	reg prometheus.Registerer
}

func listenMetricsTLS(ctx context.Context, cfg metricsTLSConfig) (net.Listener, error) {
	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", cfg.addr)
	if err != nil {
		return nil, fmt.Errorf("bind metrics address %s: %w", cfg.addr, err)
	}
	return ln, nil
}

// NeedLeaderElection: every replica's metrics are served.
func (m *metricsListener) NeedLeaderElection() bool { return false }

func (m *metricsListener) Start(ctx context.Context) error {
	defer func() { _ = m.ln.Close() }()
	opts := tlsidentity.Options{
		CertFile: filepath.Join(m.cfg.dir, "tls.crt"), KeyFile: filepath.Join(m.cfg.dir, "tls.key"),
		RequireServerAuth: true, Logger: m.log, Registerer: identityRegisterer(m.reg, "metrics"),
	}
	if m.cfg.clientAuth {
		opts.CAFile = filepath.Join(m.cfg.dir, "ca.crt")
	}
	identity, err := waitIdentity(ctx, opts, m.log, "metrics_identity_waiting")
	if err != nil || identity == nil {
		return err // nil: stopped while waiting
	}
	go func() { _ = identity.Run(ctx) }()
	cfg, err := tlsserver.Config(tlsserver.Options{Identity: identity, MutualTLS: m.cfg.clientAuth})
	if err != nil {
		return err
	}
	m.log.Info("metrics_listening", "addr", m.ln.Addr().String(), "client_auth", m.cfg.clientAuth)
	// The health server's bounds (connections, header bytes, read and
	// write deadlines, renders in flight) hold here too: the handshake
	// runs within its read deadline.
	return health.Serve(ctx, tls.NewListener(m.ln, cfg), health.MetricsHandler(m.gatherer), shutdownGrace)
}

// identityRegisterer labels a listener's TLS identity series
// (gridsync_identity_*) with listener: the agent may serve two identities,
// the signals listener's and the metrics port's, each reloaded on its own.
func identityRegisterer(reg prometheus.Registerer, listener string) prometheus.Registerer {
	if reg == nil {
		return nil
	}
	return prometheus.WrapRegistererWith(prometheus.Labels{"listener": listener}, reg)
}

// identityWait is how often a TLS identity not there yet is looked for.
const identityWait = 5 * time.Second

// waitIdentity loads a TLS identity, waiting while it is not there yet,
// and logs event once meanwhile. It returns nil, nil when ctx ends first.
// A listener never serves without a valid identity.
func waitIdentity(ctx context.Context, opts tlsidentity.Options, log *slog.Logger, event string) (*tlsidentity.Reloader, error) {
	logged := false
	for {
		id, err := tlsidentity.New(opts)
		if err == nil {
			return id, nil
		}
		if !logged {
			log.Warn(event, "error", err)
			logged = true
		}
		select {
		case <-ctx.Done():
			return nil, nil
		case <-time.After(identityWait):
		}
	}
}
