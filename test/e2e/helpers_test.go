package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/gridsync/gridsync/shared/envelope"
	"github.com/gridsync/gridsync/test/controlplane"
	"github.com/gridsync/gridsync/test/testproc"
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
type proc = testproc.Proc

func start(t *testing.T, binary string, env []string, args ...string) *proc {
	t.Helper()
	return testproc.Start(t, filepath.Join(binDir, binary), env, args...)
}

func freeAddr(t *testing.T) string               { return testproc.FreeAddr(t) }
func waitOK(t *testing.T, url string)            { testproc.WaitOK(t, url) }
func get(t *testing.T, url string) (int, string) { return testproc.Get(t, url) }
