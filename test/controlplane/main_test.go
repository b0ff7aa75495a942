package controlplane_test

import (
	"context"
	"fmt"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gridsync/gridsync/test/controlplane"
)

var cp *controlplane.ControlPlane

var namespaceSeq atomic.Int64

// uniqueNamespace creates a fresh namespace, so that every test (and every
// repetition under -count) starts from a clean slate on the shared
// control plane.
func uniqueNamespace(t *testing.T, prefix string) string {
	t.Helper()
	ns := fmt.Sprintf("%s-%d", prefix, namespaceSeq.Add(1))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := cp.EnsureNamespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	return ns
}

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) != "" {
		runHelper()
		return
	}
	os.Exit(controlplane.RunTests(m, &cp))
}
