package controller_test

import (
	"os"
	"testing"

	"github.com/gridsync/gridsync/test/controlplane"
)

// cp is the real control plane every test in this package runs against.
var cp *controlplane.ControlPlane

func TestMain(m *testing.M) {
	os.Exit(controlplane.RunTests(checkLeftovers{m}, &cp))
}
