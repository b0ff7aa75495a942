package controlplane_test

import (
	"os"
	"testing"

	"github.com/gridsync/gridsync/test/controlplane"
)

var cp *controlplane.ControlPlane

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) != "" {
		runHelper()
		return
	}
	os.Exit(controlplane.RunTests(m, &cp))
}
