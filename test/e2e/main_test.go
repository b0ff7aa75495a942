// Package e2e runs the gridsync binaries as separate processes against a
// real kube-apiserver, each with a ServiceAccount token limited to its
// own Role, the way a pod runs them.
package e2e

import (
	"testing"

	"github.com/gridsync/gridsync/test/controlplane"
	"github.com/gridsync/gridsync/test/framework"
	"github.com/gridsync/gridsync/test/testbin"
)

var cp *controlplane.ControlPlane

func TestMain(m *testing.M) {
	framework.Main(m, framework.ControlPlanes(&cp), framework.Binaries(testbin.Sidecar, testbin.Init, testbin.Agent))
}
