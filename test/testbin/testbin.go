// Package testbin builds the project's binaries for tests that run them
// as processes, the way `make build` builds them for the image: static,
// trimmed and stripped.
package testbin

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// Sidecar, Init and Agent are the import paths of the binaries.
const (
	Sidecar = "github.com/gridsync/gridsync/sidecar"
	Init    = "github.com/gridsync/gridsync/initcontainer"
	Agent   = "github.com/gridsync/gridsync/agent"
)

// Build builds each package into dir under the given file name.
func Build(ctx context.Context, dir string, binaries map[string]string) error {
	for name, pkg := range binaries {
		cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags", "-s -w", "-o", filepath.Join(dir, name), pkg)
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("build %s: %w\n%s", name, err, out)
		}
	}
	return nil
}
