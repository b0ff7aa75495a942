package controlplane_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/gridsync/gridsync/test/controlplane"
)

func TestInstallCRDsWaitsUntilTheResourceIsServed(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	require.NoError(t, cp.InstallCRDs(ctx, "testdata/widgets-crd.yaml"))
	// Installing again is an idempotent apply.
	require.NoError(t, cp.InstallCRDs(ctx, "testdata/widgets-crd.yaml"))

	dyn, err := dynamic.NewForConfig(cp.AdminConfig())
	require.NoError(t, err)
	widgets := dyn.Resource(schema.GroupVersionResource{Group: "test.gridsync.io", Version: "v1", Resource: "widgets"}).Namespace(uniqueNamespace(t, "widgets"))
	widget := func(name string, size int64) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "test.gridsync.io/v1",
			"kind":       "Widget",
			"metadata":   map[string]any{"name": name},
			"spec":       map[string]any{"size": size},
		}}
	}
	// Used right after InstallCRDs returns: no retry needed.
	_, err = widgets.Create(ctx, widget("good", 3), metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = widgets.Create(ctx, widget("bad", 0), metav1.CreateOptions{})
	require.Error(t, err, "the CRD schema must be enforced by the API server")
	assert.Contains(t, err.Error(), "spec.size")
}

func TestAPIServerRestartsOnTheSameEtcd(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	admin := cp.AdminClient()
	ns := uniqueNamespace(t, "restart")
	_, err := admin.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "survives-restart"},
		Data:       map[string]string{"k": "v"},
	}, metav1.CreateOptions{})
	require.NoError(t, err)

	require.NoError(t, cp.StopAPIServer())
	short, cancelShort := context.WithTimeout(ctx, 2*time.Second)
	_, err = admin.CoreV1().ConfigMaps(ns).Get(short, "survives-restart", metav1.GetOptions{})
	cancelShort()
	require.Error(t, err, "the API must be unreachable while stopped")

	start := time.Now()
	require.NoError(t, cp.StartAPIServer(ctx))
	t.Logf("kube-apiserver ready %s after restart", time.Since(start).Round(time.Millisecond))
	got, err := admin.CoreV1().ConfigMaps(ns).Get(ctx, "survives-restart", metav1.GetOptions{})
	require.NoError(t, err, "the same client reconnects and etcd kept the object")
	assert.Equal(t, "v", got.Data["k"])
}

// helperEnv makes the test binary act as a helper that starts its own
// control plane, prints the server PIDs and then panics, as a failing test
// would.
const helperEnv = "GRIDSYNC_CONTROLPLANE_PANIC_HELPER"

func runHelper() {
	started, err := controlplane.Start(context.Background())
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(3)
	}
	for _, pid := range started.PIDs() {
		fmt.Println("pid", pid)
	}
	fmt.Println("ready")
	panic("a test panicked before teardown")
}

func TestNoServerOutlivesATestBinaryThatPanics(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"=1")
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	cmd.Stderr = nil
	require.NoError(t, cmd.Start())

	var pids []int
	scanner := bufio.NewScanner(stdout)
	for scanner.Scan() {
		line := scanner.Text()
		if pid, ok := strings.CutPrefix(line, "pid "); ok {
			n, err := strconv.Atoi(pid)
			require.NoError(t, err)
			pids = append(pids, n)
		}
		if line == "ready" {
			break
		}
		require.False(t, strings.HasPrefix(line, "error:"), line)
	}
	require.Len(t, pids, 2, "the helper reports etcd and kube-apiserver")
	for _, pid := range pids {
		require.NoError(t, syscall.Kill(pid, 0), "server %d runs while the helper lives", pid)
	}

	err = cmd.Wait()
	var exitErr *exec.ExitError
	require.ErrorAs(t, err, &exitErr, "the helper must die of its panic")

	require.Eventually(t, func() bool {
		for _, pid := range pids {
			if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
				return false
			}
		}
		return true
	}, 10*time.Second, 50*time.Millisecond, "etcd and kube-apiserver must die with the test binary")
}
