// Package testpod is one gateway pod's corner of a real API server, as
// the sidecar and the init container see it: a namespace, the overlay
// ConfigMap's name, a kubeconfig with a token of a ServiceAccount that may
// read that one ConfigMap, and an emptyDir.
package testpod

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
	"k8s.io/client-go/rest"

	"github.com/gridsync/gridsync/shared/envelope"
	"github.com/gridsync/gridsync/test/controlplane"
)

var seq atomic.Int64

// Pod is one gateway pod's view.
type Pod struct {
	T          *testing.T
	Namespace  string
	ConfigMap  string
	Scope      envelope.Scope
	Kubeconfig string
	// Config is what Kubeconfig holds: the reader's token, the API server.
	Config *rest.Config
	Dir    string
	Admin  kubernetes.Interface
}

// New makes a pod's corner on cp, in a namespace of its own.
func New(t *testing.T, cp *controlplane.ControlPlane) *Pod {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ns := fmt.Sprintf("pod-%d-%d", time.Now().UnixNano()%1000000, seq.Add(1))
	p := &Pod{
		T:         t,
		Namespace: ns,
		Scope:     envelope.Scope{Network: "glb-demo", Gateway: "edge-gateway", Namespace: ns, LocalSite: "east-edge"},
		Dir:       t.TempDir(),
		Admin:     cp.AdminClient(),
	}
	p.ConfigMap = envelope.ConfigMapName(p.Scope.Network, p.Scope.Gateway)
	cfg, err := cp.ConfigMapReaderConfig(ctx, ns, "gateway", p.ConfigMap)
	require.NoError(t, err)
	p.Config = cfg
	p.Kubeconfig = filepath.Join(t.TempDir(), "kubeconfig")
	require.NoError(t, controlplane.WriteKubeconfig(cfg, p.Kubeconfig))
	return p
}

// Output is the file published for the gateway.
func (p *Pod) Output() string { return filepath.Join(p.Dir, "routing-overlay.json") }

// Args are the flags both binaries take for this pod.
func (p *Pod) Args(extra ...string) []string {
	return append([]string{
		"--kubeconfig", p.Kubeconfig,
		"--namespace", p.Namespace,
		"--config-map", p.ConfigMap,
		"--output", p.Output(),
		"--expected-network", p.Scope.Network,
		"--expected-gateway", p.Scope.Gateway,
		"--expected-local-site", p.Scope.LocalSite,
		"--log-level", "debug",
	}, extra...)
}

// Envelope is a valid envelope for the pod's scope; variant changes its
// content (and so its revision).
func (p *Pod) Envelope(variant int) ([]byte, string) {
	p.T.Helper()
	rank := int64(variant)
	doc, revision, err := envelope.Build(envelope.Overlay{
		Network:   p.Scope.Network,
		LocalSite: p.Scope.LocalSite,
		Candidates: []envelope.Candidate{{
			Kind: envelope.CandidateKindInferenceModel, Name: "model-east", Site: "east-provider",
			Cluster: "sim-east-provider", Fresh: true, Rank: &rank,
		}},
	}, p.Scope, envelope.Provenance{Producer: "gridsync-e2e", RenderedAt: time.Now()})
	require.NoError(p.T, err)
	return doc, revision
}

// Put stores doc in the ConfigMap, creating it when missing.
func (p *Pod) Put(doc []byte) {
	p.T.Helper()
	p.replace(&corev1.ConfigMap{Data: map[string]string{envelope.DataKeyEnvelope: string(doc)}})
}

// PutCompressed stores doc in the compressed form only (binaryData), as
// the producer does for pods that read it, and returns the
// ConfigMap's resourceVersion.
func (p *Pod) PutCompressed(doc []byte) string {
	p.T.Helper()
	return p.PutBinary(envelope.Compress(doc))
}

// PutBinary stores packed, a zstd frame or not, as the compressed form's
// only key, and returns the ConfigMap's resourceVersion.
func (p *Pod) PutBinary(packed []byte) string {
	p.T.Helper()
	return p.replace(&corev1.ConfigMap{BinaryData: map[string][]byte{envelope.CompressedKey(envelope.DataKeyEnvelope): packed}})
}

// replace makes cm, named for the pod, the whole ConfigMap, creating it
// when missing, and returns its resourceVersion.
func (p *Pod) replace(cm *corev1.ConfigMap) string {
	p.T.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cm.Name = p.ConfigMap
	cms := p.Admin.CoreV1().ConfigMaps(p.Namespace)
	stored, err := cms.Update(ctx, cm, metav1.UpdateOptions{})
	if apierrors.IsNotFound(err) {
		stored, err = cms.Create(ctx, cm, metav1.CreateOptions{})
	}
	require.NoError(p.T, err)
	return stored.ResourceVersion
}

// PutRaw stores data as the envelope, valid or not.
func (p *Pod) PutRaw(data string) {
	p.T.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: p.ConfigMap}, Data: map[string]string{envelope.DataKeyEnvelope: data}}
	_, err := p.Admin.CoreV1().ConfigMaps(p.Namespace).Update(ctx, cm, metav1.UpdateOptions{})
	require.NoError(p.T, err)
}

// DeleteConfigMap deletes the overlay ConfigMap.
func (p *Pod) DeleteConfigMap() {
	p.T.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(p.T, p.Admin.CoreV1().ConfigMaps(p.Namespace).Delete(ctx, p.ConfigMap, metav1.DeleteOptions{}))
}
