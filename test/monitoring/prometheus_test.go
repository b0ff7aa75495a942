package monitoring

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/gridsync/gridsync/test/controlplane"
	"github.com/gridsync/gridsync/test/testgrid"
)

// prometheusAddr is where the Prometheus server listens: the loopback of
// the node's network namespace, reached only through the node.
const prometheusAddr = "127.0.0.1:9090"

// scrapeTarget is one scrape job as the Prometheus Operator would
// generate it from a ServiceMonitor or PodMonitor endpoint, its target
// given statically as the pod's address.
type scrapeTarget struct {
	job, scheme, path, interval string
	addr                        string
	labels                      map[string]string
	// tls: the files written from the Secrets the monitor names.
	serverName, caFile, certFile, keyFile string
}

// objectOf is the one object of kind among objs.
func objectOf(tb testing.TB, objs []*unstructured.Unstructured, kind string) *unstructured.Unstructured {
	tb.Helper()
	var found []*unstructured.Unstructured
	for _, o := range objs {
		if o.GetKind() == kind {
			found = append(found, o)
		}
	}
	require.Len(tb, found, 1, "the chart renders one %s", kind)
	return found[0]
}

// monitor is the chart's one object of kind (a ServiceMonitor or a
// PodMonitor), its one endpoint (in spec.<field>) and its label selector.
func monitor(tb testing.TB, objs []*unstructured.Unstructured, kind, field string) (obj *unstructured.Unstructured, ep map[string]any, selector map[string]string) {
	tb.Helper()
	obj = objectOf(tb, objs, kind)
	endpoints, _, _ := unstructured.NestedSlice(obj.Object, "spec", field)
	require.Len(tb, endpoints, 1, "the %s's endpoints", kind)
	selector, _, _ = unstructured.NestedStringMap(obj.Object, "spec", "selector", "matchLabels")
	return obj, endpoints[0].(map[string]any), selector
}

// containerPortOf is the number of the pod's container port named name.
// A native sidecar is an init container: its ports count too.
func containerPortOf(tb testing.TB, p *corev1.Pod, name string) int {
	tb.Helper()
	for _, c := range append(append([]corev1.Container{}, p.Spec.InitContainers...), p.Spec.Containers...) {
		for _, port := range c.Ports {
			if port.Name == name {
				return int(port.ContainerPort)
			}
		}
	}
	require.Failf(tb, "no such container port", "pod %s has no container port %s", p.Name, name)
	return 0
}

// containerOf is the name of the pod's container with the port named name.
func containerOf(p *corev1.Pod, port string) string {
	for _, c := range append(append([]corev1.Container{}, p.Spec.InitContainers...), p.Spec.Containers...) {
		for _, cp := range c.Ports {
			if cp.Name == port {
				return c.Name
			}
		}
	}
	return ""
}

// serviceMonitorTarget is the scrape job of the ServiceMonitor's one
// endpoint at pod: the Service port the endpoint names leads to the
// container port its targetPort names, and the TLS material comes from
// the Secrets the endpoint names, written into dir.
func serviceMonitorTarget(tb testing.TB, ctx context.Context, s *testgrid.Site, objs []*unstructured.Unstructured, pod *corev1.Pod, dir string) scrapeTarget {
	tb.Helper()
	sm, ep, selector := monitor(tb, objs, "ServiceMonitor", "endpoints")
	// The Service the monitor selects by its labels and that has the
	// port it names (the agent's SWIM Service has neither).
	var svc *unstructured.Unstructured
	targetPort := ""
	for _, o := range objs {
		if o.GetKind() != "Service" || !matches(o.GetLabels(), selector) {
			continue
		}
		ports, _, _ := unstructured.NestedSlice(o.Object, "spec", "ports")
		for _, p := range ports {
			p := p.(map[string]any)
			if p["name"] == ep["port"] {
				require.Nil(tb, svc, "one Service the ServiceMonitor scrapes")
				svc, targetPort = o, fmt.Sprint(p["targetPort"])
			}
		}
	}
	require.NotNil(tb, svc, "a Service that the ServiceMonitor selects has the port %v it scrapes", ep["port"])
	port, err := strconv.Atoi(targetPort)
	if err != nil {
		port = containerPortOf(tb, pod, targetPort)
	}
	t := scrapeTarget{
		// The Operator's job label is the Service's name; its labels
		// name the namespace, Service, pod, container and endpoint.
		job: svc.GetName(), scheme: str(ep["scheme"], "http"), path: str(ep["path"], "/metrics"), interval: str(ep["interval"], "30s"),
		addr: net.JoinHostPort(pod.Status.PodIP, strconv.Itoa(port)),
		labels: map[string]string{
			"namespace": pod.Namespace, "service": svc.GetName(), "pod": pod.Name,
			"container": containerOf(pod, targetPort), "endpoint": fmt.Sprint(ep["port"]),
		},
	}
	if tlsCfg, ok := ep["tlsConfig"].(map[string]any); ok {
		t.serverName = str(tlsCfg["serverName"], "")
		secretFile := func(file string, path ...string) string {
			ref, _, _ := unstructured.NestedStringMap(tlsCfg, path...)
			if ref == nil {
				return ""
			}
			var sec corev1.Secret
			require.NoError(tb, s.Client.Get(ctx, client.ObjectKey{Namespace: sm.GetNamespace(), Name: ref["name"]}, &sec), "the ServiceMonitor names Secret %s", ref["name"])
			require.Contains(tb, sec.Data, ref["key"], "Secret %s", ref["name"])
			f := filepath.Join(dir, file)
			require.NoError(tb, os.WriteFile(f, sec.Data[ref["key"]], 0o600))
			return f
		}
		t.caFile = secretFile("ca.crt", "ca", "secret")
		t.certFile = secretFile("client.crt", "cert", "secret")
		t.keyFile = secretFile("client.key", "keySecret")
	}
	return t
}

// podMonitorTarget is the scrape job of the PodMonitor's one endpoint at
// pod, by the container port it names.
func podMonitorTarget(tb testing.TB, objs []*unstructured.Unstructured, pod *corev1.Pod) scrapeTarget {
	tb.Helper()
	pm, ep, selector := monitor(tb, objs, "PodMonitor", "podMetricsEndpoints")
	for k, v := range selector {
		require.Equal(tb, v, pod.Labels[k], "the PodMonitor selects the gateway's pod")
	}
	name := fmt.Sprint(ep["port"])
	return scrapeTarget{
		job: pm.GetNamespace() + "/" + pm.GetName(), scheme: str(ep["scheme"], "http"), path: str(ep["path"], "/metrics"), interval: str(ep["interval"], "30s"),
		addr:   net.JoinHostPort(pod.Status.PodIP, strconv.Itoa(containerPortOf(tb, pod, name))),
		labels: map[string]string{"namespace": pod.Namespace, "pod": pod.Name, "container": containerOf(pod, name), "endpoint": name},
	}
}

func str(v any, fallback string) string {
	if s, ok := v.(string); ok && s != "" {
		return s
	}
	return fallback
}

// writeConfig writes prometheus.yml (the jobs, evaluated every
// evaluation) and rules.yml (every group of the PrometheusRules) into dir.
func writeConfig(tb testing.TB, dir string, evaluation time.Duration, targets []scrapeTarget, rules []*unstructured.Unstructured) string {
	tb.Helper()
	var groups []any
	for _, r := range rules {
		g, _, _ := unstructured.NestedSlice(r.Object, "spec", "groups")
		require.NotEmpty(tb, g, "PrometheusRule %s has groups", r.GetName())
		groups = append(groups, g...)
	}
	rulesFile := filepath.Join(dir, "rules.yml")
	writeYAML(tb, rulesFile, map[string]any{"groups": groups})
	var jobs []any
	for _, t := range targets {
		job := map[string]any{
			"job_name": t.job, "scheme": t.scheme, "metrics_path": t.path,
			"scrape_interval": t.interval, "scrape_timeout": t.interval,
			"static_configs": []any{map[string]any{"targets": []string{t.addr}, "labels": t.labels}},
		}
		if t.scheme == "https" {
			job["tls_config"] = map[string]any{"server_name": t.serverName, "ca_file": t.caFile, "cert_file": t.certFile, "key_file": t.keyFile}
		}
		jobs = append(jobs, job)
	}
	config := filepath.Join(dir, "prometheus.yml")
	writeYAML(tb, config, map[string]any{
		"global":         map[string]any{"evaluation_interval": evaluation.String(), "scrape_interval": evaluation.String()},
		"rule_files":     []string{rulesFile},
		"scrape_configs": jobs,
	})
	return config
}

func writeYAML(tb testing.TB, file string, v any) {
	tb.Helper()
	data, err := yaml.Marshal(v)
	require.NoError(tb, err)
	require.NoError(tb, os.WriteFile(file, data, 0o600))
}

// startPrometheus runs the pinned Prometheus server inside the node's
// network namespace, where the pods' addresses are, and waits for it to be
// ready. It is stopped before dir goes.
func startPrometheus(tb testing.TB, ctx context.Context, s *testgrid.Site, config, dir string) *controlplane.Process {
	tb.Helper()
	binDir, err := controlplane.BinDir()
	require.NoError(tb, err)
	bin := filepath.Join(binDir, "prometheus")
	_, err = os.Stat(bin)
	require.NoError(tb, err, "the pinned Prometheus server is not built: run `make tools` (hack/tools/build.sh builds it beside promtool)")
	p, err := s.Node.Run("prometheus", nil, bin,
		"--config.file="+config,
		"--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+prometheusAddr,
		"--log.level=warn")
	require.NoError(tb, err)
	tb.Cleanup(func() {
		// What Prometheus said, when a wait gave up (FailNow returns to
		// no one) or an assertion failed.
		if tb.Failed() {
			tb.Logf("the end of Prometheus's log:\n%s", p.LogTail())
		}
		_ = p.Stop(10 * time.Second)
	})
	err = p.WaitUntil(ctx, 30*time.Second, func() bool {
		resp, err := get(ctx, s, "/-/ready")
		if err != nil {
			return false
		}
		_ = resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	require.NoError(tb, err, "Prometheus is not ready:\n%s", p.LogTail())
	return p
}

func get(ctx context.Context, s *testgrid.Site, path string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+prometheusAddr+path, http.NoBody)
	if err != nil {
		return nil, err
	}
	return s.Node.HTTPClient().Do(req)
}

// api gets one of Prometheus's HTTP API answers into out (its data).
func api(ctx context.Context, s *testgrid.Site, path string, out any) error {
	resp, err := get(ctx, s, path)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var doc struct {
		Status string          `json:"status"`
		Error  string          `json:"error"`
		Data   json.RawMessage `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&doc); err != nil {
		return fmt.Errorf("%s: %s: %w", path, resp.Status, err)
	}
	if doc.Status != "success" {
		return fmt.Errorf("%s: %s", path, doc.Error)
	}
	return json.Unmarshal(doc.Data, out)
}

// alert is one alert as /api/v1/alerts lists it.
type alert struct {
	Labels   map[string]string `json:"labels"`
	State    string            `json:"state"`
	ActiveAt time.Time         `json:"activeAt"`
}

func alerts(ctx context.Context, s *testgrid.Site) ([]alert, error) {
	var out struct {
		Alerts []alert `json:"alerts"`
	}
	err := api(ctx, s, "/api/v1/alerts", &out)
	return out.Alerts, err
}

// series is one series of an instant query's answer.
type series struct {
	labels map[string]string
	value  float64
}

// query runs an instant query and returns its series.
func query(ctx context.Context, s *testgrid.Site, promql string) ([]series, error) {
	var out struct {
		Result []struct {
			Metric map[string]string `json:"metric"`
			// [unix time, "value"]
			Value [2]any `json:"value"`
		} `json:"result"`
	}
	if err := api(ctx, s, "/api/v1/query?query="+url.QueryEscape(promql), &out); err != nil {
		return nil, err
	}
	result := make([]series, len(out.Result))
	for i, r := range out.Result {
		v, err := strconv.ParseFloat(fmt.Sprint(r.Value[1]), 64)
		if err != nil {
			return nil, fmt.Errorf("%s: value %v: %w", promql, r.Value[1], err)
		}
		result[i] = series{labels: r.Metric, value: v}
	}
	return result, nil
}

// target is one of /api/v1/targets' active targets.
type target struct {
	ScrapeURL string `json:"scrapeUrl"`
	Health    string `json:"health"`
	LastError string `json:"lastError"`
}

func targets(ctx context.Context, s *testgrid.Site) ([]target, error) {
	var out struct {
		Active []target `json:"activeTargets"`
	}
	err := api(ctx, s, "/api/v1/targets", &out)
	return out.Active, err
}
