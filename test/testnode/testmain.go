package testnode

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/gridsync/gridsync/test/controlplane"
)

// RunTests starts a control plane and a node on it, stores them in *cp
// and *node, runs the package's tests and stops both. A node that cannot
// start fails the package, saying what the machine lacks; it never skips.
// When a test failed, the ends of the kubelet's and containerd's logs are
// printed.
func RunTests(m controlplane.Runner, cp **controlplane.ControlPlane, node **Node) int {
	return controlplane.RunTests(&withNode{m: m, cp: cp, node: node}, cp)
}

type withNode struct {
	m    controlplane.Runner
	cp   **controlplane.ControlPlane
	node **Node
}

func (w *withNode) Run() int {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	start := time.Now()
	n, err := Start(ctx, *w.cp)
	if err != nil {
		fmt.Fprintln(os.Stderr, "start the node:", err)
		return 1
	}
	*w.node = n
	fmt.Fprintf(os.Stderr, "node %s ready in %s (%s)\n", n.Name, time.Since(start).Round(time.Millisecond), n.Steps())
	code := w.m.Run()
	if code != 0 {
		for _, name := range []string{"kubelet", "containerd"} {
			fmt.Fprintf(os.Stderr, "--- the end of the %s log:\n%s\n", name, n.LogTail(name))
		}
	}
	if err := n.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "stop the node:", err)
		if code == 0 {
			code = 1
		}
	}
	return code
}
