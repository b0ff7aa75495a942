// Package node runs the charts' pods on a real node: a kubelet of the
// pinned Kubernetes with containerd and runc (package testnode), the
// charts rendered by the pinned Helm and applied to the API server, the
// project's images built without a container engine. It proves what only
// a kubelet can: init-container gating, the shared emptyDir, the Secret
// volume's ..data swap, projected tokens, probes, ordering and
// termination, and the agent Deployment's failover.
package node

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/gridsync/gridsync/test/controlplane"
	"github.com/gridsync/gridsync/test/testnode"
)

var (
	cp   *controlplane.ControlPlane
	node *testnode.Node
)

func TestMain(m *testing.M) {
	os.Exit(controlplane.RunTests(&nodeTests{m}, &cp))
}

// nodeTests starts the node once the control plane is up, for every test
// of the package, and stops it after them.
type nodeTests struct{ m *testing.M }

func (n *nodeTests) Run() int {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	start := time.Now()
	var err error
	node, err = testnode.Start(ctx, cp, testnode.Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, "start the node:", err)
		return 1
	}
	fmt.Fprintf(os.Stderr, "node %s ready in %s\n", node.Name, time.Since(start).Round(time.Millisecond))
	code := n.m.Run()
	if code != 0 {
		for _, name := range []string{"kubelet", "containerd"} {
			fmt.Fprintf(os.Stderr, "--- the end of the %s log:\n%s\n", name, node.LogTail(name))
		}
	}
	if err := node.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "stop the node:", err)
		if code == 0 {
			code = 1
		}
	}
	return code
}
