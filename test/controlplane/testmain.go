package controlplane

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"
)

// RunTests starts a control plane, stores it in *cp, runs the package's
// tests and stops it. A control plane that cannot start fails the package
// (it never skips): integration tests must run wherever `make test` runs.
func RunTests(m *testing.M, cp **ControlPlane) (code int) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	start := time.Now()
	started, err := Start(ctx)
	if err != nil {
		fmt.Fprintf(os.Stderr, "start control plane: %v\n", err)
		return 1
	}
	fmt.Fprintf(os.Stderr, "control plane ready at %s in %s\n", started.Host(), time.Since(start).Round(time.Millisecond))
	*cp = started
	defer func() {
		if err := started.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "stop control plane: %v\n", err)
			if code == 0 {
				code = 1
			}
		}
	}()
	return m.Run()
}
