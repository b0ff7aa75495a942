package listener

import "github.com/prometheus/client_golang/prometheus"

type metrics struct {
	handshakes   *prometheus.CounterVec // transport, outcome
	connections  *prometheus.CounterVec // transport, caller, outcome
	open         *prometheus.GaugeVec   // transport, caller
	closes       *prometheus.CounterVec // transport, reason
	resets       prometheus.Counter
	acceptErrors prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		handshakes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gridsync_signals_handshakes_total",
			Help: "Connection attempts on the signals listener before the caller is known, by transport (tcp, quic) and outcome (completed, limited_address, limited_prefix64, limited_prefix48, limited_table_full, inflight_total, inflight_address, inflight_prefix, failed; QUIC counts no failures).",
		}, []string{"transport", "outcome"}),
		connections: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gridsync_signals_connections_total",
			Help: "Completed handshakes on the signals listener, by transport, caller kind (gateway, site, anonymous) and outcome (admitted, over_site_cap, over_peer_cap, over_total_cap, closed_unnamed, closed_reissued_leaf, closed_evicted, closed_anonymous_full, closed_anonymous_address_full, closed_anonymous_prefix_full).",
		}, []string{"transport", "caller", "outcome"}),
		open: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "gridsync_signals_connections",
			Help: "Open connections on the signals listener, by transport and caller kind.",
		}, []string{"transport", "caller"}),
		closes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gridsync_signals_connection_closes_total",
			Help: "Connections the signals listener closed itself, by transport and reason (max_age, write_stalled, over_cap, anonymous_route, anonymous_idle, anonymous_refused, evicted).",
		}, []string{"transport", "reason"}),
		acceptErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "gridsync_signals_accept_errors_total",
			Help: "Failed accepts on the signals listener (out of file descriptors, say): each is retried after a short backoff.",
		}),
		resets: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "gridsync_signals_cap_resets_total",
			Help: "Times the listener's caps started over because its TLS material reloaded.",
		}),
	}
	for _, tr := range []string{transportTCP, transportQUIC} {
		for _, o := range []string{"completed", limitedAddress, limitedPrefix64, limitedPrefix48, limitedTable, inFlightTotal, inFlightAddress, inFlightPrefix, "failed"} {
			m.handshakes.WithLabelValues(tr, o)
		}
		for _, k := range []Kind{Anonymous, Gateway, Site} {
			m.open.WithLabelValues(tr, k.String())
		}
	}
	if reg != nil {
		reg.MustRegister(m.handshakes, m.connections, m.open, m.closes, m.resets, m.acceptErrors)
	}
	return m
}
