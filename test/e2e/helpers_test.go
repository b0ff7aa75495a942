package e2e

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/gridsync/gridsync/shared/envelope"
	"github.com/gridsync/gridsync/test/controlplane"
)

var seq atomic.Int64

// pod is one gateway pod's view: a namespace, the overlay ConfigMap's
// name, a kubeconfig with a token of a ServiceAccount bound to the
// least-privilege Role, and an emptyDir.
type pod struct {
	t          *testing.T
	namespace  string
	configMap  string
	scope      envelope.Scope
	kubeconfig string
	dir        string
	admin      kubernetes.Interface
}

func newPod(t *testing.T) *pod {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ns := fmt.Sprintf("pod-%d", seq.Add(1))
	p := &pod{
		t:         t,
		namespace: ns,
		scope:     envelope.Scope{Network: "glb-demo", Gateway: "edge-gateway", Namespace: ns, LocalSite: "east-edge"},
		dir:       t.TempDir(),
		admin:     cp.AdminClient(),
	}
	p.configMap = envelope.ConfigMapName(p.scope.Network, p.scope.Gateway)
	cfg, err := cp.ConfigMapReaderConfig(ctx, ns, "gateway", p.configMap)
	require.NoError(t, err)
	p.kubeconfig = filepath.Join(t.TempDir(), "kubeconfig")
	require.NoError(t, controlplane.WriteKubeconfig(cfg, p.kubeconfig))
	return p
}

func (p *pod) output() string { return filepath.Join(p.dir, "routing-overlay.json") }

// args are the flags both binaries take for this pod.
func (p *pod) args(extra ...string) []string {
	return append([]string{
		"--kubeconfig", p.kubeconfig,
		"--namespace", p.namespace,
		"--config-map", p.configMap,
		"--output", p.output(),
		"--expected-network", p.scope.Network,
		"--expected-gateway", p.scope.Gateway,
		"--expected-local-site", p.scope.LocalSite,
		"--log-level", "debug",
	}, extra...)
}

func (p *pod) envelope(variant int) ([]byte, string) {
	p.t.Helper()
	rank := int64(variant)
	doc, revision, err := envelope.Build(envelope.Overlay{
		Network:   p.scope.Network,
		LocalSite: p.scope.LocalSite,
		Candidates: []envelope.Candidate{{
			Kind: envelope.CandidateKindInferenceModel, Name: "model-east", Site: "east-provider",
			Cluster: "sim-east-provider", Fresh: true, Rank: &rank,
		}},
	}, p.scope, envelope.Provenance{Producer: "gridsync-e2e", RenderedAt: time.Now()})
	require.NoError(p.t, err)
	return doc, revision
}

func (p *pod) put(doc []byte) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cms := p.admin.CoreV1().ConfigMaps(p.namespace)
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: p.configMap}, Data: map[string]string{envelope.DataKeyEnvelope: string(doc)}}
	_, err := cms.Update(ctx, cm, metav1.UpdateOptions{})
	if apierrors.IsNotFound(err) {
		_, err = cms.Create(ctx, cm, metav1.CreateOptions{})
	}
	require.NoError(p.t, err)
}

// putRaw stores data as the envelope, valid or not.
func (p *pod) putRaw(data string) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: p.configMap}, Data: map[string]string{envelope.DataKeyEnvelope: data}}
	_, err := p.admin.CoreV1().ConfigMaps(p.namespace).Update(ctx, cm, metav1.UpdateOptions{})
	require.NoError(p.t, err)
}

// deleteConfigMap deletes the overlay ConfigMap.
func (p *pod) deleteConfigMap() {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(p.t, p.admin.CoreV1().ConfigMaps(p.namespace).Delete(ctx, p.configMap, metav1.DeleteOptions{}))
}

// proc is a binary running as a child process.
type proc struct {
	cmd    *exec.Cmd
	mu     sync.Mutex
	output bytes.Buffer
	exited chan struct{}
	err    error
}

func (pr *proc) Write(b []byte) (int, error) {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	return pr.output.Write(b)
}

func (pr *proc) log() string {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	return pr.output.String()
}

func start(t *testing.T, binary string, env []string, args ...string) *proc {
	t.Helper()
	pr := &proc{exited: make(chan struct{})}
	pr.cmd = exec.Command(filepath.Join(binDir, binary), args...) //nolint:noctx // stopped by signals in the test
	pr.cmd.Env = append(os.Environ(), env...)
	pr.cmd.Stdout = pr
	pr.cmd.Stderr = pr
	pr.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	require.NoError(t, pr.cmd.Start())
	go func() {
		pr.err = pr.cmd.Wait()
		close(pr.exited)
	}()
	t.Cleanup(func() {
		_ = pr.cmd.Process.Kill()
		<-pr.exited
		if t.Failed() {
			t.Logf("%s output:\n%s", binary, pr.log())
		}
	})
	return pr
}

// wait returns the exit code, failing the test after timeout.
func (pr *proc) wait(t *testing.T, timeout time.Duration) int {
	t.Helper()
	select {
	case <-pr.exited:
	case <-time.After(timeout):
		t.Fatalf("did not exit within %s; output:\n%s", timeout, pr.log())
	}
	if pr.err == nil {
		return 0
	}
	if exit, ok := pr.err.(*exec.ExitError); ok { //nolint:errorlint // Wait returns it unwrapped
		return exit.ExitCode()
	}
	t.Fatalf("wait: %v", pr.err)
	return -1
}

func (pr *proc) running() bool {
	select {
	case <-pr.exited:
		return false
	default:
		return true
	}
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	return addr
}

// waitOK waits up to 10 s for url to answer 200.
func waitOK(t *testing.T, url string) {
	t.Helper()
	var last string
	require.Eventually(t, func() bool {
		code, body := get(t, url)
		last = body
		return code == 200
	}, 10*time.Second, 10*time.Millisecond, "%s never answered 200; last: %s", url, last)
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, url, http.NoBody)
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(body)
}
