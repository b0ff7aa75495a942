// Package node runs the charts' pods on a real node: a kubelet of the
// pinned Kubernetes with containerd and runc (package testnode), the
// charts rendered by the pinned Helm and applied to the API server, the
// project's images built without a container engine. It proves what only
// a kubelet can: init-container gating, the shared emptyDir, the Secret
// volume's ..data swap, projected tokens, probes, ordering and
// termination, and the agent Deployment's failover.
package node

import (
	"os"
	"testing"

	"github.com/gridsync/gridsync/test/controlplane"
	"github.com/gridsync/gridsync/test/testnode"
)

var (
	cp   *controlplane.ControlPlane
	node *testnode.Node
)

func TestMain(m *testing.M) {
	os.Exit(testnode.RunTests(m, &cp, &node))
}
