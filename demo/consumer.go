package main

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gridsync/gridsync/api/v1alpha1"
	"github.com/gridsync/gridsync/controller/praxisconfig"
)

// generateConsumerConfig has east generate its gateway's praxis.yaml:
// west-edge's gateway as a mutual-TLS provider hop, east's providers
// derived from their own URLs; then a broken edit fails closed.
func generateConsumerConfig(ctx context.Context, east client.Client, westGateway string) error {
	step("east generates its gateway's whole praxis.yaml: west-edge as a mutual-TLS hop, its own providers derived from their URLs")
	sni := "west-edge.grid.internal"
	if err := editGateway(ctx, east, func(g *v1alpha1.ConsumerGateway) {
		g.PraxisConfig = &v1alpha1.PraxisConfig{
			Generate: true,
			ClusterEndpoints: []v1alpha1.ClusterEndpoint{{Cluster: "west-edge", Address: westGateway,
				Transport: &v1alpha1.EndpointTransport{Mode: "mutual_tls", SNI: &sni}}},
			DeriveTopology: &v1alpha1.DeriveTopology{FromProviders: []string{"sim-east", "sim-west"},
				Transport: &v1alpha1.EndpointTransport{Mode: "tls", SNI: ptr("inference.example")}},
		}
	}); err != nil {
		return err
	}
	st, err := praxisStatus(ctx, east, func(s v1alpha1.PraxisConfigStatus) bool { return s.Phase == "Rendered" })
	if err != nil {
		return err
	}
	fmt.Printf("    praxisConfigStatus: %s: %s\n", st.Phase, st.Message)
	var cm corev1.ConfigMap
	key := types.NamespacedName{Namespace: scope.Namespace, Name: praxisconfig.DefaultConfigMapName}
	if err := east.Get(ctx, key, &cm); err != nil {
		return err
	}
	fmt.Printf("    ConfigMap %s, key praxis.yaml (excerpt):\n", key)
	for _, line := range strings.Split(cm.Data[praxisconfig.DataKey], "\n") {
		t := strings.TrimSpace(line)
		for _, keep := range []string{"address:", "overlay_file:", "local_site:", "provider_hop_clusters:", "- \"west-edge\"", "- name:", "sni:", "file:"} {
			if strings.HasPrefix(t, keep) {
				fmt.Println("      " + line)
				break
			}
		}
	}

	step("a clusterEndpoints entry loses its transport: the render fails closed and the applied config stays")
	if err := editGateway(ctx, east, func(g *v1alpha1.ConsumerGateway) { g.PraxisConfig.ClusterEndpoints[0].Transport = nil }); err != nil {
		return err
	}
	st, err = praxisStatus(ctx, east, func(s v1alpha1.PraxisConfigStatus) bool { return s.Phase == "Error" })
	if err != nil {
		return err
	}
	var after corev1.ConfigMap
	if err := east.Get(ctx, key, &after); err != nil {
		return err
	}
	fmt.Printf("    praxisConfigStatus: %s/%s: %s\n", st.Phase, st.Reason, st.Message)
	fmt.Printf("    ConfigMap unchanged: resourceVersion %s before and after\n", after.ResourceVersion)
	if after.ResourceVersion != cm.ResourceVersion {
		return fmt.Errorf("the failed render changed the ConfigMap")
	}
	return editGateway(ctx, east, func(g *v1alpha1.ConsumerGateway) {
		g.PraxisConfig.ClusterEndpoints[0].Transport = &v1alpha1.EndpointTransport{Mode: "mutual_tls", SNI: &sni}
	})
}

func ptr[T any](v T) *T { return &v }

// editGateway changes the demo gateway's entry of the network, read and
// written again when the agent wrote the network's status in between (as
// kubectl edit would have its user do).
func editGateway(ctx context.Context, c client.Client, mutate func(*v1alpha1.ConsumerGateway)) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var n v1alpha1.GridNetwork
		if err := c.Get(ctx, types.NamespacedName{Name: scope.Network}, &n); err != nil {
			return err
		}
		for i := range n.Spec.ConsumerGateways {
			if n.Spec.ConsumerGateways[i].Name == scope.Gateway {
				mutate(&n.Spec.ConsumerGateways[i])
			}
		}
		return c.Update(ctx, &n)
	})
}

// praxisStatus waits for the demo gateway's praxisConfigStatus entry.
func praxisStatus(ctx context.Context, c client.Client, ok func(v1alpha1.PraxisConfigStatus) bool) (v1alpha1.PraxisConfigStatus, error) {
	var got v1alpha1.PraxisConfigStatus
	err := waitFor(ctx, func() bool {
		var n v1alpha1.GridNetwork
		if c.Get(ctx, types.NamespacedName{Name: scope.Network}, &n) != nil {
			return false
		}
		for _, s := range n.Status.PraxisConfigStatus {
			if s.GatewayName == scope.Gateway {
				got = s
				return ok(s)
			}
		}
		return false
	})
	if err != nil {
		return got, fmt.Errorf("praxisConfigStatus %s/%s: %w", got.Phase, got.Reason, err)
	}
	return got, nil
}
