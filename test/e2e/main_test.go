// Package e2e runs the gridsync binaries as separate processes against a
// real kube-apiserver, with a ServiceAccount token limited to the
// sidecar's Role, the way a pod runs them.
package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/gridsync/gridsync/test/controlplane"
)

var (
	cp     *controlplane.ControlPlane
	binDir string
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	dir, err := os.MkdirTemp("", "gridsync-e2e-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() { _ = os.RemoveAll(dir) }()
	binDir = dir
	if err := buildBinaries(dir); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return controlplane.RunTests(m, &cp)
}

// buildBinaries builds the binaries under test the way the Makefile does.
func buildBinaries(dir string) error {
	for name, pkg := range map[string]string{
		"gridsync-sidecar": "../../sidecar",
		"gridsync-init":    "../../initcontainer",
	} {
		cmd := exec.CommandContext(context.Background(), "go", "build", "-trimpath", "-o", filepath.Join(dir, name), pkg)
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("build %s: %w\n%s", name, err, out)
		}
	}
	return nil
}
