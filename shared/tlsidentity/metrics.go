package tlsidentity

import "github.com/prometheus/client_golang/prometheus"

const (
	resultSuccess  = "success"
	resultRejected = "rejected"
)

type metrics struct {
	reloads *prometheus.CounterVec
}

// newMetrics makes the reload counter, with every series present from the
// first scrape; register adds it and the expiry gauges.
func newMetrics() *metrics {
	m := &metrics{reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "gridsync_identity_reloads_total",
		Help: "TLS identity reloads, by material_type (certificate, ca_bundle) and result (success, rejected); an identical repeated rejection counts once.",
	}, []string{"material_type", "result"})}
	for _, mt := range []Material{MaterialCertificate, MaterialCABundle} {
		for _, result := range []string{resultSuccess, resultRejected} {
			m.reloads.WithLabelValues(string(mt), result)
		}
	}
	return m
}

// register exports the counter and the expiry gauges, computed at scrape
// time from the active identity so that they exist only while one is
// active. A Reloader registers once it has started: a start that fails
// registers nothing, so a caller may try again with the same registry.
func (m *metrics) register(reg prometheus.Registerer, current func() *Identity) {
	if reg != nil {
		reg.MustRegister(m.reloads, &expiryCollector{current: current})
	}
}

var expiryDesc = prometheus.NewDesc("gridsync_identity_not_after_timestamp_seconds",
	"notAfter of the active TLS identity (earliest in its chain) and of its CA bundle, in unix seconds.",
	[]string{"material_type"}, nil)

// expiryCollector publishes the expiry only while a real identity is
// active: no series at all beats a zero that alerts read as expired.
type expiryCollector struct{ current func() *Identity }

func (c *expiryCollector) Describe(ch chan<- *prometheus.Desc) { ch <- expiryDesc }

func (c *expiryCollector) Collect(ch chan<- prometheus.Metric) {
	id := c.current()
	if id == nil {
		return
	}
	ch <- prometheus.MustNewConstMetric(expiryDesc, prometheus.GaugeValue, float64(id.NotAfter.Unix()), string(MaterialCertificate))
	if !id.CANotAfter.IsZero() {
		ch <- prometheus.MustNewConstMetric(expiryDesc, prometheus.GaugeValue, float64(id.CANotAfter.Unix()), string(MaterialCABundle))
	}
}
