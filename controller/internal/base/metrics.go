package base

import (
	"context"
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gridsync/gridsync/api/v1alpha1"
	"github.com/gridsync/gridsync/trust/sitetrust"
)

// Publication outcomes.
const (
	PublishApplied   = "applied"
	PublishUnchanged = "unchanged"
	PublishDeleted   = "deleted"
	PublishFailed    = "failed"
	PublishRefused   = "refused" // not rendered or not ours to write
)

// Outcomes of a GridNetwork reconcile
// (gridsync_controller_network_reconciles_total{outcome}): ran (its stages
// ran), skipped (it stopped before them: the network is gone or being
// deleted, or its SWIM key failed), error.
const (
	ReconcileRan     = "ran"
	ReconcileSkipped = "skipped"
	ReconcileError   = "error"
)

// The stages of a GridNetwork reconcile counted in
// gridsync_controller_network_stages_total{stage}: those whose work is
// costly or reaches outside the agent, so that what set off a reconcile
// and what it did can be told apart.
const (
	StageRender       = "render"        // the overlays rendered
	StagePublish      = "publish"       // the overlay ConfigMaps published
	StageGossipConfig = "gossip_config" // the SWIM runtime configured for the network
	StageGridSites    = "grid_sites"    // the discovered sites synced to GridSites
	StageDeliveryFold = "delivery_fold" // the delivery reports folded into the overlay statuses
)

// RanStage counts a stage a GridNetwork reconcile ran.
func (e *Env) RanStage(stage string) {
	e.Metrics.NetworkStages.WithLabelValues(stage).Inc()
}

// Metrics are the controller's metrics, shared by its reconcilers.
type Metrics struct {
	// NetworkReconciles and NetworkStages count the GridNetwork reconciles
	// by controller and outcome, and the stages they ran.
	NetworkReconciles *prometheus.CounterVec
	NetworkStages     *prometheus.CounterVec
	Publishes         *prometheus.CounterVec
	StatusWrites      *prometheus.CounterVec
	RenderDuration    prometheus.Histogram
	// Site trust.
	SiteCertificates prometheus.Counter
	// IdentityExpiry and IdentityRotations are upstream's names for the
	// site certificate's expiry and its renewals.
	IdentityExpiry    *prometheus.GaugeVec
	IdentityRotations *prometheus.CounterVec
	SiteProbes        *prometheus.CounterVec
	ProbeDuration     prometheus.Histogram
	// Upstream's names for the probes and the phase changes, so that its
	// dashboards and alerts work on this agent.
	GatewayProbes        *prometheus.CounterVec
	GatewayProbeDuration prometheus.Histogram
	PhaseTransitions     *prometheus.CounterVec
	// Generated Praxis configs.
	PraxisWrites         *prometheus.CounterVec
	MountPatches         *prometheus.CounterVec
	PraxisRenderDuration prometheus.Histogram
}

// NewMetrics registers the controller's metrics; sites (the cache) is
// what grid_sites counts and grid_network_records_unsigned reads when
// scraped. The caller sets up the label values
// of IdentityRotations (the results are the identity stage's).
func NewMetrics(reg prometheus.Registerer, sites client.Reader) (*Metrics, error) {
	m := &Metrics{
		NetworkReconciles: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gridsync_controller_network_reconciles_total",
			Help: "GridNetwork reconciles by controller (gridnetwork: the overlay pipeline; gridnetwork-delivery: the delivery status) and outcome: ran, skipped (the network gone or being deleted, or its SWIM key failed: no stage ran), error.",
		}, []string{"controller", "outcome"}),
		NetworkStages: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gridsync_controller_network_stages_total",
			Help: "Stages the GridNetwork reconciles ran, by stage: render (the overlays), publish (the overlay ConfigMaps), gossip_config (the SWIM runtime configured), grid_sites (discovered sites synced to GridSites), delivery_fold (delivery reports folded into the overlay statuses).",
		}, []string{"stage"}),
		Publishes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gridsync_controller_overlay_publishes_total",
			Help: "Overlay ConfigMap publications by outcome: applied, unchanged (revision already stored), deleted (gateway or network gone), failed, refused.",
		}, []string{"outcome"}),
		StatusWrites: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gridsync_controller_status_writes_total",
			Help: "Status writes by kind (GridNetwork, InferenceProvider); written only when the status changes.",
		}, []string{"kind"}),
		RenderDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "gridsync_controller_render_duration_seconds",
			Help:    "Time to render and build one gateway's overlay envelope.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 16),
		}),
		SiteCertificates: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "grid_site_certificates_issued_total",
			Help: "Site certificates this agent issued into a site Secret (first issue, renewal, reissue).",
		}),
		IdentityExpiry: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "grid_site_identity_expiry_timestamp_seconds",
			Help: "When this site's certificate in a network expires (Unix seconds): the one to alert on.",
		}, []string{"network"}),
		IdentityRotations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "grid_site_identity_rotations_total",
			Help: "Site certificate renewals by result: enrolled (a first certificate), rotated, refused (by the issuer), failed (no answer), expired (found expired).",
		}, []string{"result"}),
		SiteProbes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "grid_site_probes_total",
			Help: "Probes of remote sites' gateways by outcome: TlsVerified or the reason that kept the site from Active.",
		}, []string{"outcome"}),
		ProbeDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "grid_site_probe_duration_seconds",
			Help:    "Time of one probe of a remote site's gateway: connect, mutual-TLS handshake, the wait for the gateway's verdict.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
		}),
		GatewayProbes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "grid_gateway_probe_total",
			Help: "Probes of remote sites' gateways (upstream's name) by outcome (TlsVerified or the reason that kept the site from Active) and tls_mode (mtls, plaintext).",
		}, []string{"outcome", "tls_mode"}),
		GatewayProbeDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "grid_gateway_probe_duration_seconds",
			Help:    "Time of one probe of a remote site's gateway (upstream's name; the same observations as grid_site_probe_duration_seconds).",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
		}),
		PhaseTransitions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "grid_site_phase_transition_total",
			Help: "GridSite phase changes by from_phase, to_phase and the reason of the new phase.",
		}, []string{"from_phase", "to_phase", "reason"}),
		PraxisWrites: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gridsync_controller_praxis_config_writes_total",
			Help: "Generated praxis.yaml ConfigMap writes by outcome: applied, unchanged (the same bytes already stored), failed, refused (not rendered or not ours to write).",
		}, []string{"outcome"}),
		MountPatches: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gridsync_controller_mount_patches_total",
			Help: "Pod-template patches of delegated gateway Deployments by kind (switch: the config slot, Secret projections and revisions in one patch; prune: obsolete projections removed after a rollout) and outcome (applied, failed, refused).",
		}, []string{"kind", "outcome"}),
		PraxisRenderDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "gridsync_controller_praxis_config_render_duration_seconds",
			Help:    "Time to render one gateway's praxis.yaml.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 16),
		}),
	}
	for _, o := range []string{PublishApplied, PublishUnchanged, PublishDeleted, PublishFailed, PublishRefused} {
		m.Publishes.WithLabelValues(o)
	}
	for _, o := range []string{PublishApplied, PublishUnchanged, PublishFailed, PublishRefused} {
		m.PraxisWrites.WithLabelValues(o)
	}
	for _, k := range []string{"switch", "prune"} {
		for _, o := range []string{PublishApplied, PublishFailed, PublishRefused} {
			m.MountPatches.WithLabelValues(k, o)
		}
	}
	for _, s := range []string{StageRender, StagePublish, StageGossipConfig, StageGridSites, StageDeliveryFold} {
		m.NetworkStages.WithLabelValues(s)
	}
	for _, k := range []string{"GridNetwork", "InferenceProvider", "GridSite"} {
		m.StatusWrites.WithLabelValues(k)
	}
	for _, c := range []prometheus.Collector{m.NetworkReconciles, m.NetworkStages, m.Publishes, m.StatusWrites, m.RenderDuration,
		m.SiteCertificates, m.IdentityExpiry, m.IdentityRotations, m.SiteProbes, m.ProbeDuration, sitePhases{sites}, unsignedNetworks{sites}, m.PraxisWrites, m.MountPatches, m.PraxisRenderDuration,
		m.GatewayProbes, m.GatewayProbeDuration, m.PhaseTransitions} {
		if err := reg.Register(c); err != nil {
			var already prometheus.AlreadyRegisteredError
			if !errors.As(err, &already) {
				return nil, err
			}
		}
	}
	return m, nil
}

// sitePhases is grid_sites, the GridSites by phase, and upstream's
// grid_site_phase{site,phase}, 1 for each site's phase: read from the
// cache when scraped, so that every replica says the same and nothing is
// kept beside the cache.
type sitePhases struct{ reader client.Reader }

var (
	sitePhasesDesc = prometheus.NewDesc("grid_sites", "GridSites by phase; only Active sites' providers reach overlays.", []string{"phase"}, nil)
	sitePhaseDesc  = prometheus.NewDesc("grid_site_phase", "1 for each GridSite's current phase (upstream's name).", []string{"site", "phase"}, nil)
)

func (sitePhases) Describe(ch chan<- *prometheus.Desc) {
	ch <- sitePhasesDesc
	ch <- sitePhaseDesc
}

func (c sitePhases) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	var list v1alpha1.GridSiteList
	if err := c.reader.List(ctx, &list); err != nil {
		return // not synced yet: no sample rather than a false zero
	}
	counts := map[v1alpha1.SitePhase]float64{}
	for i := range list.Items {
		phase := list.Items[i].Status.Phase
		counts[phase]++
		if phase != "" {
			ch <- prometheus.MustNewConstMetric(sitePhaseDesc, prometheus.GaugeValue, 1, list.Items[i].Name, string(phase))
		}
	}
	for _, p := range []v1alpha1.SitePhase{sitetrust.PhasePending, sitetrust.PhaseDiscovered, sitetrust.PhaseConnecting, sitetrust.PhaseActive, sitetrust.PhaseUnreachable, sitetrust.PhaseLeft, sitetrust.PhaseEvicted} {
		ch <- prometheus.MustNewConstMetric(sitePhasesDesc, prometheus.GaugeValue, counts[p], string(p))
	}
}
