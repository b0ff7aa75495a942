package gossip

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/gridsync/gridsync/gossip/internal/streamgate"
	"github.com/gridsync/gridsync/gossip/record"
	"github.com/gridsync/gridsync/gossip/sites"
)

type metrics struct {
	keyPending       prometheus.Gauge
	keysInstalled    prometheus.Gauge
	encrypted        prometheus.Gauge
	rejected         *prometheus.CounterVec
	dropped          *prometheus.CounterVec
	sites            *prometheus.GaugeVec
	generation       prometheus.Gauge
	records          prometheus.Gauge
	sends            *prometheus.CounterVec
	bytesSent        *prometheus.CounterVec
	bytesReceived    *prometheus.CounterVec
	seedJoinFailures prometheus.Counter
	reconnects       *prometheus.CounterVec
	resends          *prometheus.CounterVec
	verified         prometheus.Counter
	gridIDConflicts  prometheus.Counter
	membersRefused   prometheus.Counter
	recordsRejected  *prometheus.CounterVec
	recordsReceived  *prometheus.CounterVec
	pending          prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		keyPending: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "grid_swim_key_pending",
			Help: "1 while SWIM holds every send and receive until a key is loaded.",
		}),
		keysInstalled: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "grid_swim_keys_installed",
			Help: "SWIM keys installed in the keyring (more than one during a rotation).",
		}),
		encrypted: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "grid_swim_encrypted",
			Help: "1 when SWIM traffic is encrypted and authenticated, 0 in the clear or not running.",
		}),
		rejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "grid_swim_packets_rejected_total",
			Help: "SWIM packets and streams dropped before membership saw them, by reason.",
		}, []string{"reason"}),
		dropped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "grid_swim_messages_dropped_total",
			Help: "Authenticated gossip messages of the state layer dropped, by reason.",
		}, []string{"reason"}),
		sites: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "grid_swim_sites",
			Help: "Remote sites known to membership, by state.",
		}, []string{"state"}),
		generation: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "grid_swim_generation",
			Help: "Generation of this site's membership identity; 0 when not joined.",
		}),
		records: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "grid_swim_records",
			Help: "State records held, this site's and remote ones, tombstones included.",
		}),
		sends: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "grid_swim_state_sends_total",
			Help: "State messages sent, by path: gossip (queued for epidemic broadcast) or reliable (straight to one member over TCP: every change, a new member's copy, anti-entropy).",
		}, []string{"path"}),
		bytesSent: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "grid_swim_bytes_sent_total",
			Help: "Bytes SWIM sent, by transport.",
		}, []string{"transport"}),
		bytesReceived: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "grid_swim_bytes_received_total",
			Help: "Bytes SWIM received, by transport.",
		}, []string{"transport"}),
		seedJoinFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "grid_swim_seed_join_failures_total",
			Help: "Seed addresses that could not be joined.",
		}),
		reconnects: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "grid_swim_reconnects_total",
			Help: "Dials of a site this site holds dead, to notice it back (a healed partition, an ended outage), by outcome: joined or failed.",
		}, []string{"outcome"}),
		resends: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "grid_swim_resends_total",
			Help: "This site's records sent again to a member a direct copy missed, by outcome: delivered or failed.",
		}, []string{"outcome"}),
		verified: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "grid_swim_sites_verified_alive_total",
			Help: "Sites the view held suspect or dead that answered this site's own ping and were taken back alive (their alive notice never arrived here).",
		}),
		gridIDConflicts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "grid_swim_grid_id_conflicts_total",
			Help: "Merges and members refused because they belong to another grid.",
		}),
		membersRefused: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "grid_swim_members_evicted_refused_total",
			Help: "Joins and alive messages refused because their site is evicted from every network of this site.",
		}),
		recordsRejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "grid_swim_records_rejected_total",
			Help: "Records of other sites refused before they were stored, by reason: unsigned, signed by a certificate that does not chain to the grid CA or names another site, a signature that does not verify, signed too far ahead or too long ago, of a network this site does not take part in, or, in a network without a grid CA, signed with another key than the one its site is held to (rebound_key, before_reset).",
		}, []string{"reason"}),
		recordsReceived: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "grid_swim_records_received_total",
			Help: "Records of other sites received, each counted once by what became of it: stored, not_newer (the copy held is as new), own_site, refused (grid_swim_records_rejected_total says why), over_cap (grid_swim_messages_dropped_total says which cap), shed (dropped unchecked: the verifier's queue was full), or duplicate (a copy of a record already waiting for its check).",
		}, []string{"outcome"}),
		pending: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "grid_swim_records_pending",
			Help: "Records received and waiting for their check.",
		}),
	}
	for _, c := range []prometheus.Collector{m.keyPending, m.keysInstalled, m.encrypted, m.rejected, m.dropped, m.sites,
		m.generation, m.records, m.sends, m.bytesSent, m.bytesReceived, m.seedJoinFailures, m.reconnects, m.resends, m.verified, m.gridIDConflicts, m.membersRefused, m.recordsRejected, m.recordsReceived, m.pending} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	for _, o := range []string{"joined", "failed"} {
		m.reconnects.WithLabelValues(o)
	}
	for _, o := range []string{"delivered", "failed"} {
		m.resends.WithLabelValues(o)
	}
	for _, r := range streamgate.RejectReasons {
		m.rejected.WithLabelValues(r)
	}
	for _, r := range record.DropReasons {
		m.dropped.WithLabelValues(r)
	}
	for _, r := range record.RecordRejectReasons {
		m.recordsRejected.WithLabelValues(r)
	}
	for _, o := range recordOutcomes {
		m.recordsReceived.WithLabelValues(o)
	}
	for _, s := range []sites.SiteState{sites.SiteAlive, sites.SiteSuspect, sites.SiteDead, sites.SiteLeft} {
		m.sites.WithLabelValues(string(s))
	}
	for _, p := range []string{"gossip", "reliable"} {
		m.sends.WithLabelValues(p)
	}
	for _, t := range []string{"udp", "tcp"} {
		m.bytesSent.WithLabelValues(t)
		m.bytesReceived.WithLabelValues(t)
	}
	return m, nil
}
