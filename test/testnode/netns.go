package testnode

import (
	"context"

	"github.com/gridsync/gridsync/test/testnetns"
)

// The addresses of a node's network namespace. None of them exists outside
// it: the namespace is the test's own, and nothing in it routes anywhere
// else (it has no interface to the host).
const (
	// nodeIP is the kubelet's node address, on the namespace's loopback.
	nodeIP = "10.200.0.1"
	// podSubnet is the pods' bridge network; podGateway the bridge's own
	// address, the pods' default route.
	podSubnet  = "10.244.0.0/24"
	podGateway = "10.244.0.1"
)

// PodSubnet is the node's pod network, for a caller that routes it (the
// WAN lab masquerades it when the node is a site of a grid).
func PodSubnet() string { return podSubnet }

// createNetns makes the named network namespace with its loopback up and
// the node's and the kubernetes Service's addresses on it.
func createNetns(ctx context.Context, name, serviceIP string) error {
	if err := testnetns.Add(ctx, name); err != nil {
		return err
	}
	for _, args := range [][]string{
		{"-n", name, "addr", "add", nodeIP + "/32", "dev", "lo"},
		{"-n", name, "addr", "add", serviceIP + "/32", "dev", "lo"},
	} {
		if err := testnetns.IP(ctx, args...); err != nil {
			return err
		}
	}
	return nil
}
