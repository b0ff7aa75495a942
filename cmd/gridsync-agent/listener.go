package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	rollout "github.com/gridsync/gridsync/delivery/fold"
	reports "github.com/gridsync/gridsync/delivery/handler"
	deliveryreport "github.com/gridsync/gridsync/delivery/report"
	siglisten "github.com/gridsync/gridsync/listener"
	"github.com/gridsync/gridsync/shared/tlsidentity"
	signalsapi "github.com/gridsync/gridsync/signals/httpapi"
	"github.com/gridsync/gridsync/trust/bundle"
	"github.com/gridsync/gridsync/trust/enrol"
)

// signalsListener runs the signals listener while this replica leads (a
// manager runnable): the delivery reports and the signals it serves are
// the leader's.
type signalsListener struct {
	cfg        signalsConfig
	site       string
	rest       *rest.Config
	aggregator *rollout.Aggregator
	api        *signalsapi.API
	issuer     http.Handler // enrolment and renewal of the sites this site issues for
	evictions  *bundle.Book // the networks' trust bundles: evicted sites are refused
	log        *slog.Logger
	reg        prometheus.Registerer
}

func (s *signalsListener) Start(ctx context.Context) error {
	identity, err := s.waitIdentity(ctx)
	if err != nil || identity == nil {
		return err // nil: stopped while waiting
	}
	clientset, err := kubernetes.NewForConfig(s.rest)
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	s.api.Register(mux)
	mux.Handle(enrol.EnrollPath, s.issuer)
	mux.Handle(enrol.RenewPath, s.issuer)
	// The networks' trust bundles, for a site that runs no SWIM: named
	// sites and the co-located gateway only (anonymous callers are closed
	// on this path by the listener anyway).
	mux.Handle(bundle.Path, bundle.Handler(s.evictions, func(r *http.Request) bool {
		c, ok := siglisten.CallerFrom(r.Context())
		return ok && (c.Kind == siglisten.Site || c.Kind == siglisten.Gateway)
	}))
	mux.Handle(deliveryreport.Path, reports.NewHandler(
		&reports.Reviewer{Client: clientset, Audience: s.cfg.reportAudience, Budget: s.reviewBudget()}, s.aggregator, s.log, s.reg))
	handshakes := siglisten.DefaultHandshakeLimits()
	handshakes.PerAddress = siglisten.Bucket{Rate: s.cfg.handshakeRate, Burst: s.cfg.handshakeBurst}
	handshakes.PerPrefix64 = siglisten.Bucket{Rate: 2.5 * s.cfg.handshakeRate, Burst: int(2.5 * float64(s.cfg.handshakeBurst))}
	handshakes.PerPrefix48 = siglisten.Bucket{Rate: 5 * s.cfg.handshakeRate, Burst: 5 * s.cfg.handshakeBurst}
	conns := siglisten.DefaultConnectionCaps()
	conns.Max, conns.ReservedForGateway, conns.PerSite = s.cfg.maxConnections, s.cfg.reservedForGateway, s.cfg.perSite
	l, err := siglisten.New(mux, siglisten.Options{
		Identity: identity, Naming: siglisten.Naming{LocalSite: s.site, SPIFFE: s.cfg.spiffe, Evictions: s.evictions},
		Handshakes: &handshakes, Connections: &conns, AnonymousPaths: []string{deliveryreport.Path, enrol.EnrollPath},
		WriteTimeout: s.cfg.writeTimeout, MaxAge: s.cfg.maxConnectionAge, Registerer: s.reg, Logger: s.log,
	})
	if err != nil {
		return err
	}
	lc := net.ListenConfig{}
	tcp, err := lc.Listen(ctx, "tcp", s.cfg.addr)
	if err != nil {
		return fmt.Errorf("signals listener: %w", err)
	}
	// The same port number for QUIC, also when the address asked for any.
	port := tcp.Addr().(*net.TCPAddr).Port
	host, _, _ := net.SplitHostPort(s.cfg.addr)
	udp, err := lc.ListenPacket(ctx, "udp", net.JoinHostPort(host, fmt.Sprint(port)))
	if err != nil {
		_ = tcp.Close()
		return fmt.Errorf("signals listener (udp): %w", err)
	}
	defer func() { _ = udp.Close() }()
	stop := make(chan struct{})
	defer close(stop)
	go s.aggregator.Watch(stop)
	go func() { _ = identity.Run(ctx) }()
	s.log.Info("signals_listening", "addr", tcp.Addr().String(), "transports", "tcp,quic")
	return l.Serve(ctx, tcp, udp)
}

// reviewBudget is the TokenReview budget of report tokens: the agent's
// from the flags, a source's the default.
func (s *signalsListener) reviewBudget() reports.ReviewBudget {
	b := reports.DefaultReviewBudget()
	b.TotalRate, b.TotalBurst = s.cfg.reportReviewRate, s.cfg.reportReviewBurst
	return b
}

// waitIdentity loads the site identity, waiting while it is not there
// yet: the agent issues the site certificate itself.
func (s *signalsListener) waitIdentity(ctx context.Context) (*tlsidentity.Reloader, error) {
	return waitIdentity(ctx, tlsidentity.Options{CertFile: s.cfg.certFile, KeyFile: s.cfg.keyFile, CAFile: s.cfg.caFile,
		Interval: s.cfg.identityInterval, RequireServerAuth: true, Logger: s.log, Registerer: identityRegisterer(s.reg, "signals")}, s.log, "signals_identity_waiting")
}
