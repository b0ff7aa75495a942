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
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/gridsync/gridsync/test/testnode"
	"github.com/gridsync/gridsync/test/testpki"
)

// The agent chart's metrics over TLS on the node: the agent pod serves
// /metrics over HTTPS with the mounted Secret, and a scrape made exactly
// as the chart's ServiceMonitor says (its port, scheme, path, server name,
// CA and client certificate, read from the Secrets it names) succeeds; a
// scraper without the client certificate is refused, and the health port
// keeps the probes but no longer serves /metrics. The chart's helm test
// pod then runs the agent image's probe against /readyz and succeeds.
func TestAgentMetricsOverTLSAsTheServiceMonitorScrapes(t *testing.T) {
	t.Parallel()
	ns := namespace(t, "agent-metrics")
	root := testpki.NewRoot(t, "monitoring-ca")
	// A release name of its own: the agent chart's cluster-scoped objects
	// (ClusterRoles and their bindings) are named after it, and the node's
	// other agent test installs its own at the same time.
	const fullname = "metrics-agent"
	serverName := fullname + "." + ns + ".svc"
	cert, key := root.Leaf(t, serverName, testpki.Opts{Names: []string{serverName}})
	clientCert, clientKey := root.Leaf(t, "prometheus", testpki.Opts{ClientOnly: true})
	secrets := cp.AdminClient().CoreV1().Secrets(ns)
	for name, data := range map[string]map[string][]byte{
		"agent-metrics-tls": {"tls.crt": cert, "tls.key": key, "ca.crt": root.PEM},
		"prometheus-client": {"tls.crt": clientCert, "tls.key": clientKey},
	} {
		_, err := secrets.Create(t.Context(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Type: corev1.SecretTypeTLS, Data: data}, metav1.CreateOptions{})
		require.NoError(t, err)
	}

	values := testnode.Merge(testnode.ImageValues("gridsync-agent"), map[string]any{
		"fullnameOverride":   fullname,
		"replicaCount":       1,
		"resourceNamespaces": []string{ns},
		"metrics": map[string]any{
			"tls": map[string]any{"enabled": true, "source": "secret", "secretName": "agent-metrics-tls",
				"clientAuth": map[string]any{"enabled": true, "clientSecretName": "prometheus-client"}},
			"serviceMonitor": map[string]any{"enabled": true},
		},
	})
	objs, err := testnode.Render(t.Context(), testnode.Chart("gridsync-agent"), fullname, ns, nil, values)
	require.NoError(t, err)
	// The node's API server has no Prometheus Operator: the
	// ServiceMonitor is read, not applied.
	var monitor *unstructured.Unstructured
	var apply []*unstructured.Unstructured
	for _, o := range objs {
		if o.GetKind() == "ServiceMonitor" {
			monitor = o
			continue
		}
		apply = append(apply, o)
	}
	require.NotNil(t, monitor)
	require.NoError(t, testnode.Apply(t.Context(), cp, ns, apply))
	pod := waitPod(t, ns, 90*time.Second, "Ready", testnode.PodReady)

	// The scrape, as the ServiceMonitor's endpoint describes it.
	endpoints, _, _ := unstructured.NestedSlice(monitor.Object, "spec", "endpoints")
	require.Len(t, endpoints, 1)
	ep := endpoints[0].(map[string]any)
	assert.Equal(t, "https", ep["scheme"])
	port := containerPort(t, pod, ep["port"].(string))
	tlsCfg := ep["tlsConfig"].(map[string]any)
	secretKey := func(path ...string) []byte {
		ref, _, _ := unstructured.NestedStringMap(tlsCfg, path...)
		s, err := secrets.Get(t.Context(), ref["name"], metav1.GetOptions{})
		require.NoError(t, err, "the ServiceMonitor names %v", ref)
		require.Contains(t, s.Data, ref["key"])
		return s.Data[ref["key"]]
	}
	pool := x509.NewCertPool()
	require.True(t, pool.AppendCertsFromPEM(secretKey("ca", "secret")))
	pair, err := tls.X509KeyPair(secretKey("cert", "secret"), secretKey("keySecret"))
	require.NoError(t, err)
	var served *x509.Certificate // the certificate the last scrape was served with
	scrape := func(certs []tls.Certificate) (int, string, error) {
		client := node.HTTPClient()
		client.Transport.(*http.Transport).TLSClientConfig = &tls.Config{
			RootCAs: pool, ServerName: tlsCfg["serverName"].(string), Certificates: certs, MinVersion: tls.VersionTLS12,
		}
		req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, "https://"+net.JoinHostPort(pod.Status.PodIP, strconv.Itoa(port))+ep["path"].(string), http.NoBody)
		require.NoError(t, err)
		resp, err := client.Do(req)
		if err != nil {
			return 0, "", err
		}
		defer resp.Body.Close()
		served = resp.TLS.PeerCertificates[0]
		body, err := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body), err
	}
	var body string
	eventually(t, 30*time.Second, "a scrape with the ServiceMonitor's settings", func() bool {
		var code int
		code, body, err = scrape([]tls.Certificate{pair})
		return err == nil && code == http.StatusOK
	})
	assert.Contains(t, body, `gridsync_build_info{binary="gridsync-agent"`)
	assert.Contains(t, body, "leader_election_master_status")
	assert.Contains(t, body, `gridsync_identity_not_after_timestamp_seconds{listener="metrics",material_type="certificate"}`,
		"the metrics port's own identity, labelled apart from the signals listener's")

	_, _, err = scrape(nil)
	require.Error(t, err, "a scraper without a client certificate is refused")

	// The Secret rotates: the kubelet swaps the volume, the agent's
	// reloader (every 30 s) picks the new certificate for new handshakes.
	first := served.SerialNumber
	rotated, rotatedKey := root.Leaf(t, serverName, testpki.Opts{Names: []string{serverName}})
	s, err := secrets.Get(t.Context(), "agent-metrics-tls", metav1.GetOptions{})
	require.NoError(t, err)
	s.Data["tls.crt"], s.Data["tls.key"] = rotated, rotatedKey
	_, err = secrets.Update(t.Context(), s, metav1.UpdateOptions{})
	require.NoError(t, err)
	eventually(t, 90*time.Second, "a scrape served with the rotated certificate", func() bool {
		code, _, err := scrape([]tls.Certificate{pair})
		return err == nil && code == http.StatusOK && served.SerialNumber.Cmp(first) != 0
	})
	var none struct{}
	err = getJSON(t, pod.Status.PodIP, 8081, "/metrics", &none)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "404", "no /metrics in plaintext")

	// helm test: the chart's test pod, its one change the Service's name
	// for the pod's address (the node has no cluster DNS or Service
	// routing).
	tests, err := testnode.RenderTests(t.Context(), testnode.Chart("gridsync-agent"), fullname, ns, values)
	require.NoError(t, err)
	require.Len(t, tests, 1)
	var testPod corev1.Pod
	require.NoError(t, runtime.DefaultUnstructuredConverter.FromUnstructured(tests[0].Object, &testPod))
	args := testPod.Spec.Containers[0].Args
	require.Equal(t, "probe", args[0])
	args[1] = strings.Replace(args[1], serverName, pod.Status.PodIP, 1)
	testPod.Namespace = ns
	_, err = cp.AdminClient().CoreV1().Pods(ns).Create(t.Context(), &testPod, metav1.CreateOptions{})
	require.NoError(t, err)
	eventually(t, 60*time.Second, "the helm test pod succeeds", func() bool {
		p, err := cp.AdminClient().CoreV1().Pods(ns).Get(t.Context(), testPod.Name, metav1.GetOptions{})
		require.NoError(t, err)
		require.NotEqual(t, corev1.PodFailed, p.Status.Phase, describe(p))
		return p.Status.Phase == corev1.PodSucceeded
	})
}

// containerPort is the number of the pod's container port named name.
func containerPort(t *testing.T, p *corev1.Pod, name string) int {
	t.Helper()
	for _, c := range p.Spec.Containers {
		for _, port := range c.Ports {
			if port.Name == name {
				return int(port.ContainerPort)
			}
		}
	}
	t.Fatalf("no container port %s", name)
	return 0
}
