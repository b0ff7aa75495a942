package controlplane

import (
	"context"
	"fmt"
	"os"
	"sync"
	"time"
)

// Runner runs a package's tests: a *testing.M, or one that starts more
// (a node) around it.
type Runner interface{ Run() int }

// RunTests starts a control plane, stores it in *cp, runs the package's
// tests and stops it. A control plane that cannot start fails the package
// (it never skips): integration tests must run wherever `make test` runs.
func RunTests(m Runner, cp **ControlPlane) int {
	return RunTestsN(m, cp)
}

// RunTestsN starts one control plane per pointer, all at once (several
// sites, each with its own API server and etcd), stores them, runs the
// package's tests and stops them. Any that cannot start fails the
// package.
func RunTestsN(m Runner, cps ...**ControlPlane) (code int) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	start := time.Now()
	started := make([]*ControlPlane, len(cps))
	errs := make([]error, len(cps))
	var wg sync.WaitGroup
	for i := range cps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			started[i], errs[i] = Start(ctx)
		}()
	}
	wg.Wait()
	defer func() {
		for _, cp := range started {
			if cp == nil {
				continue
			}
			if err := cp.Stop(); err != nil {
				fmt.Fprintf(os.Stderr, "stop control plane: %v\n", err)
				if code == 0 {
					code = 1
				}
			}
		}
	}()
	for i, err := range errs {
		if err != nil {
			fmt.Fprintf(os.Stderr, "start control plane %d of %d: %v\n", i+1, len(cps), err)
			return 1
		}
		*cps[i] = started[i]
		fmt.Fprintf(os.Stderr, "control plane ready at %s in %s\n", started[i].Host(), time.Since(start).Round(time.Millisecond))
	}
	return m.Run()
}
