package main

import (
	"log/slog"
	"net/url"

	"github.com/prometheus/client_golang/prometheus"

	deliveryreport "github.com/gridsync/gridsync/delivery/report"
	"github.com/gridsync/gridsync/shared/envelope"
	"github.com/gridsync/gridsync/shared/overlaysync"
	"github.com/gridsync/gridsync/shared/syncflags"
)

// newReporter builds the delivery reporter when --report-to is set; the
// syncer is read at each report through the function it gets later.
func newReporter(cfg *syncflags.Config, syncer func() *overlaysync.Syncer, log *slog.Logger, reg prometheus.Registerer) (*deliveryreport.Reporter, error) {
	if cfg.ReportTo == "" {
		return nil, nil
	}
	serverName := cfg.ReportServerName
	if serverName == "" {
		if u, err := url.Parse(cfg.ReportTo); err == nil {
			serverName = u.Hostname()
		}
	}
	return deliveryreport.NewReporter(deliveryreport.ReporterOptions{
		URL: cfg.ReportTo, TokenFile: cfg.ReportTokenFile, CAFile: cfg.ReportCA, ServerName: serverName,
		Interval: cfg.ReportInterval, Logger: log, Registerer: reg,
		Snapshot: func() deliveryreport.Report { return reportOf(cfg, syncer().Status()) },
	})
}

// reportOf is what the sidecar reports of st: its delivery, and what the
// agent needs to choose the overlay's form for this pod's gateway. The
// agent compresses the envelope's key only: a sidecar told to read another
// key (the bare overlay, say) would find no compressed form of it.
func reportOf(cfg *syncflags.Config, st overlaysync.Status) deliveryreport.Report {
	rep := deliveryreport.Of(cfg.ExpectedNamespace, cfg.ExpectedGateway, cfg.PodName, st)
	rep.Reads = []string{deliveryreport.FormPlain}
	if cfg.DataKey == envelope.DataKeyEnvelope {
		rep.Reads = append(rep.Reads, deliveryreport.FormZstd)
	}
	rep.Encoding, rep.MaxBytes = cfg.OverlayEncoding, cfg.MaxBytes
	return rep
}
