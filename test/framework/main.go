package framework

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/gridsync/gridsync/test/controlplane"
	"github.com/gridsync/gridsync/test/testbin"
	"github.com/gridsync/gridsync/test/testnode"
)

// Option is what a suite's main starts or builds before its tests.
type Option func(*mainConfig)

type mainConfig struct {
	cps  []**controlplane.ControlPlane
	node **testnode.Node
	bins []testbin.Binary
}

// ControlPlanes starts one control plane per pointer, all at once (a
// suite of several sites gives each its own API server and etcd).
func ControlPlanes(cps ...**controlplane.ControlPlane) Option {
	return func(c *mainConfig) { c.cps = append(c.cps, cps...) }
}

// Node starts a node on the one control plane.
func Node(node **testnode.Node) Option {
	return func(c *mainConfig) { c.node = node }
}

// Binaries builds the project's binaries the suite runs as processes (or
// finds them built by `make testbins`); Bin gives their paths.
func Binaries(bins ...testbin.Binary) Option {
	return func(c *mainConfig) { c.bins = append(c.bins, bins...) }
}

// built are the binaries Main built, by name, and their directory.
var (
	built  = map[string]bool{}
	binDir string
)

// Bin is the path of a binary the suite's main built.
func Bin(b testbin.Binary) string {
	if !built[b.Name] {
		panic(fmt.Sprintf("%s was not built: pass framework.Binaries(testbin...) to the package's Main", b.Name))
	}
	return filepath.Join(binDir, b.Name)
}

// Main is a suite's TestMain: it builds the binaries, starts the control
// planes (and the node), runs the tests, stops what it started and exits
// with the tests' code. What cannot start fails the package; it never
// skips.
func Main(m *testing.M, opts ...Option) {
	os.Exit(run(m, opts))
}

// BenchMain is a benchmark package's TestMain: Main when benchmarks run,
// the package's plain tests alone otherwise (`go test ./...` passes
// through every benchmark package, which then starts nothing).
func BenchMain(m *testing.M, opts ...Option) {
	flag.Parse()
	if flag.Lookup("test.bench").Value.String() == "" {
		os.Exit(m.Run())
	}
	Main(m, opts...)
}

func run(m *testing.M, opts []Option) int {
	var c mainConfig
	for _, o := range opts {
		o(&c)
	}
	if len(c.bins) > 0 {
		dir, err := testbin.Dir(context.Background(), c.bins...)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		binDir = dir
		for _, b := range c.bins {
			built[b.Name] = true
		}
	}
	switch {
	case c.node != nil && len(c.cps) != 1:
		fmt.Fprintln(os.Stderr, "framework: a node needs exactly one control plane")
		return 1
	case c.node != nil:
		return testnode.RunTests(m, c.cps[0], c.node)
	case len(c.cps) > 0:
		return controlplane.RunTestsN(m, c.cps...)
	default:
		return m.Run()
	}
}
