// Package bench measures delivery end to end: the real kube-apiserver, the
// sidecar binary as a separate process, and a consumer that watches the
// output folder with fsnotify the way a gateway does; and the controller:
// the agent binary publishing the overlays of a thousand providers. Run
// it with `make bench`; it prints one line per case.
package bench

import (
	"testing"

	"github.com/gridsync/gridsync/test/controlplane"
	"github.com/gridsync/gridsync/test/framework"
	"github.com/gridsync/gridsync/test/testbin"
)

var cp *controlplane.ControlPlane

func TestMain(m *testing.M) {
	framework.BenchMain(m, framework.ControlPlanes(&cp), framework.Binaries(testbin.Sidecar, testbin.Agent))
}
