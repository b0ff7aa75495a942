// Package charts tests the Helm charts with the pinned Helm (`make tools`
// builds it) and the real kube-apiserver: lint and render over a matrix
// of values, golden files of the output (`make golden` rewrites them; the
// agent chart's leave out its CRDs, stored once in its files/crds),
// every rendered object applied, and the RBAC proven by access reviews
// and by running the agent with the chart's own ServiceAccount.
package charts

import (
	"os"
	"testing"

	"github.com/gridsync/gridsync/test/controlplane"
)

var cp *controlplane.ControlPlane

func TestMain(m *testing.M) {
	os.Exit(controlplane.RunTests(m, &cp))
}
