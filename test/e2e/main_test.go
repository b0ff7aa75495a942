// Package e2e runs the gridsync binaries as separate processes against a
// real kube-apiserver, each with a ServiceAccount token limited to its
// own Role, the way a pod runs them.
package e2e

import (
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/gridsync/gridsync/test/controlplane"
	"github.com/gridsync/gridsync/test/testbin"
)

var (
	cp     *controlplane.ControlPlane
	binDir string
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	dir, err := testbin.Dir(context.Background(), testbin.Sidecar, testbin.Init, testbin.Agent)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	binDir = dir
	return controlplane.RunTests(m, &cp)
}
