package base

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gridsync/gridsync/api/v1alpha1"
)

// OpenNetwork reports whether a network declares no grid CA
// (spec.tls.caSecretRef and caConfigMapRef unset): no certificate vouches
// for its records, the SWIM key authenticates them, and none of its
// remote sites can become trusted.
func OpenNetwork(n *v1alpha1.GridNetwork) bool {
	return !n.HasGridCA()
}

// unsignedNetworks is grid_network_records_unsigned{network}: 1 for each
// network without a grid CA, 0 for each with one. Read from the cache
// when scraped, as grid_sites is: every replica says the same, and a
// deleted network's series goes with it.
type unsignedNetworks struct{ reader client.Reader }

var unsignedNetworksDesc = prometheus.NewDesc("grid_network_records_unsigned",
	"1 for a GridNetwork without a grid CA (spec.tls.caSecretRef and caConfigMapRef unset): its records carry no certificate, the SWIM key alone authenticates them (each remote site held to the first key that signed its records), and no remote site of it can become routable; 0 with a grid CA.",
	[]string{"network"}, nil)

func (unsignedNetworks) Describe(ch chan<- *prometheus.Desc) { ch <- unsignedNetworksDesc }

func (c unsignedNetworks) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	var list v1alpha1.GridNetworkList
	if err := c.reader.List(ctx, &list); err != nil {
		return // not synced yet: no sample rather than a false one
	}
	for i := range list.Items {
		v := 0.0
		if OpenNetwork(&list.Items[i]) {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(unsignedNetworksDesc, prometheus.GaugeValue, v, list.Items[i].Name)
	}
}
