// Package bench measures delivery end to end: the real kube-apiserver, the
// sidecar binary as a separate process, and a consumer that watches the
// output folder with fsnotify the way a gateway does; and the controller:
// the agent binary publishing the overlays of a thousand providers. Run
// it with `make bench`; it prints one line per case.
package bench

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/gridsync/gridsync/test/controlplane"
	"github.com/gridsync/gridsync/test/testbin"
)

var (
	cp      *controlplane.ControlPlane
	sidecar string
	agent   string
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	// Only benchmarks need the servers and the binary; `go test ./...`
	// passes through here too.
	flag.Parse()
	if flag.Lookup("test.bench").Value.String() == "" {
		return m.Run()
	}
	dir, err := testbin.Dir(context.Background(), testbin.Sidecar, testbin.Agent)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	sidecar = filepath.Join(dir, testbin.Sidecar.Name)
	agent = filepath.Join(dir, testbin.Agent.Name)
	return controlplane.RunTests(m, &cp)
}
