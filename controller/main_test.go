package controller_test

import (
	"os"
	"testing"

	"github.com/gridsync/gridsync/test/controlplane"
)

// planes holds the package's real control planes while no test uses
// them. Every agent a test starts reads all the cluster-scoped Grid
// objects, so a control plane serves one test at a time; most of a test
// is waiting for its agent, so two of them let two tests run at once
// (newEnv takes one for the test), which nearly halves the package's time
// for one more API server and etcd.
var planes chan *controlplane.ControlPlane

func TestMain(m *testing.M) {
	var a, b *controlplane.ControlPlane
	os.Exit(controlplane.RunTestsN(lendPlanes{m: m, planes: []**controlplane.ControlPlane{&a, &b}}, &a, &b))
}
