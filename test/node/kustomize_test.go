package node

import (
	"crypto/tls"
	"crypto/x509"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"github.com/gridsync/gridsync/hack/images"
	"github.com/gridsync/gridsync/test/testnode"
	"github.com/gridsync/gridsync/test/testpki"
)

// The OpenShift flavour of the kustomize base on the node: vendored as a
// platform does (its namespace, the node's agent image, a site name, one
// replica), it runs, and the agent serves /metrics over TLS with the
// certificate OpenShift's service CA writes for the agent's Service (here
// an ordinary Secret of the same shape: tls.crt and tls.key, no ca.crt),
// for the Service's name, to a scraper that trusts that CA.
func TestOpenShiftFlavourServesMetricsWithTheServiceCA(t *testing.T) {
	t.Parallel()
	ns := namespace(t, "agent-openshift")
	serviceCA := testpki.NewRoot(t, "openshift-service-serving-signer")
	serverName := "gridsync-agent." + ns + ".svc"
	cert, key := serviceCA.Leaf(t, serverName, testpki.Opts{Names: []string{serverName, serverName + ".cluster.local"}})
	_, err := cp.AdminClient().CoreV1().Secrets(ns).Create(t.Context(), &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "gridsync-agent-metrics-tls", Namespace: ns},
		Type:       corev1.SecretTypeTLS, Data: map[string][]byte{"tls.crt": cert, "tls.key": key},
	}, metav1.CreateOptions{})
	require.NoError(t, err)

	kustomization := `apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
namespace: ` + ns + `
resources:
  - DEPLOY/overlays/openshift
images:
  - name: ghcr.io/gridsync/gridsync-agent
    newName: ` + images.Registry + "/" + images.Agent.Name + `
    newTag: ` + testnode.ImageTag + `
patches:
  - target: {kind: Deployment, name: gridsync-agent}
    patch: |-
      - op: replace
        path: /spec/replicas
        value: 1
      - op: replace
        path: /spec/template/spec/containers/0/imagePullPolicy
        value: Never
      - op: replace
        path: /spec/template/spec/containers/0/env/2/value
        value: openshift-site
`
	built, err := testnode.KustomizeBuild(t.Context(), "../../deploy/kustomize", kustomization)
	require.NoError(t, err)
	var objs []*unstructured.Unstructured
	dec := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(string(built)), 4096)
	for {
		o := &unstructured.Unstructured{}
		if err := dec.Decode(&o.Object); err != nil {
			require.ErrorIs(t, err, io.EOF)
			break
		}
		if len(o.Object) > 0 {
			objs = append(objs, o)
		}
	}
	require.NoError(t, testnode.Apply(t.Context(), cp, ns, objs))
	pod := waitPod(t, ns, 90*time.Second, "Ready", testnode.PodReady)

	pool := x509.NewCertPool()
	require.True(t, pool.AppendCertsFromPEM(serviceCA.PEM))
	port := containerPort(t, pod, "https-metrics")
	var body string
	eventually(t, 30*time.Second, "a scrape of /metrics that trusts the service CA", func() bool {
		client := node.HTTPClient()
		client.Transport.(*http.Transport).TLSClientConfig = &tls.Config{RootCAs: pool, ServerName: serverName, MinVersion: tls.VersionTLS12}
		req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, "https://"+net.JoinHostPort(pod.Status.PodIP, strconv.Itoa(port))+"/metrics", http.NoBody)
		require.NoError(t, err)
		resp, err := client.Do(req)
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		body = string(b)
		return err == nil && resp.StatusCode == http.StatusOK
	})
	assert.Contains(t, body, `gridsync_build_info{binary="gridsync-agent"`)
	var none struct{}
	err = getJSON(t, pod.Status.PodIP, 8081, "/metrics", &none)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "404", "no /metrics in plaintext")
}
