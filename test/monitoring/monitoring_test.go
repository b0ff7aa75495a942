// Package monitoring proves the charts' monitoring with a real Prometheus:
// on a grid of two real sites (package testgrid), the agent's metrics
// served over mutual TLS and the gateway's sidecar are scraped exactly as
// the charts' ServiceMonitor and PodMonitor describe (port, scheme, path,
// server name, CA and client certificate from the Secrets they name), the
// targets given statically as the pods' addresses since no Prometheus
// Operator runs, and the rules are the PrometheusRules' groups as the
// charts rendered them. Three failures are induced and each alert must
// fire from real scrapes within its `for:` of becoming true: a gateway's
// overlay source deleted with no agent to publish it again
// (GridOverlayDeliveryDegraded), the other site cut off by the WAN
// (GridSiteNotActive), and a site certificate issued close to its expiry
// (GridSiteCertificateExpiringSoon). The Grafana dashboards of both charts
// must have data from the same Prometheus for each panel's queries: the
// agent's in the healthy grid, the gateway's once the cut's new overlay
// is delivered.
package monitoring

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gridsync/gridsync/test/framework"
	"github.com/gridsync/gridsync/test/testgrid"
	"github.com/gridsync/gridsync/test/testwan"
	"github.com/gridsync/gridsync/trust/sitetrust"
)

func TestMain(m *testing.M) { testwan.Main(m) }

// The link: 100 ms round trips with jitter, as the grid test's.
var link = testwan.Link{Delay: 50 * time.Millisecond, Jitter: 5 * time.Millisecond}

const (
	// evaluation is Prometheus's rule evaluation interval and the
	// monitors' scrape interval: an alert's timing is measured to it.
	evaluation = time.Second
	// alertFor is the `for:` of the alerts fired, set through the charts'
	// values: short, so that the test takes seconds, but several
	// evaluations long, so that a pending alert is seen.
	alertFor = "5s"
	// clientSecret holds the certificate Prometheus presents to the
	// agent's metrics port.
	clientSecret = "prometheus-client"
)

// The values that turn the monitoring on. The site certificate lives 50
// minutes: within the alert's hour from its issue, and renewed (at two
// thirds) long after the test.
var (
	agentValues = map[string]any{
		"trust":   map[string]any{"certificateLifetime": "50m"},
		"signals": map[string]any{"siteSecretName": testgrid.SiteCertSecret},
		"metrics": map[string]any{
			"tls": map[string]any{"enabled": true, "source": "site",
				"clientAuth": map[string]any{"enabled": true, "clientSecretName": clientSecret}},
			"serviceMonitor": map[string]any{"enabled": true, "interval": evaluation.String()},
			"prometheusRule": map[string]any{"enabled": true, "certificateExpiryHours": 1,
				"certificateExpiringFor": alertFor, "siteNotActiveFor": alertFor},
			"dashboard": map[string]any{"enabled": true},
		},
	}
	// The gateway's sidecar syncs the site certificate as its identity,
	// which the gateway's dashboard shows the expiry of.
	gatewayValues = map[string]any{
		"overlay": map[string]any{"sidecar": map[string]any{
			"identity": map[string]any{"enabled": true, "secretName": testgrid.SiteCertSecret},
		}},
		"metrics": map[string]any{
			"podMonitor":     map[string]any{"enabled": true, "interval": evaluation.String()},
			"prometheusRule": map[string]any{"enabled": true, "deliveryDegradedFor": alertFor},
			"dashboard":      map[string]any{"enabled": true},
		},
	}
)

// slack is what a bound from a failure allows beyond the alert's `for:`
// and the failure's noticing: a scrape that times out on a loaded machine
// makes the series stale, which starts the pending again.
const slack = 15 * time.Second

// fired is one alert that fired: how long after its failure was induced,
// its `for:`, and how long it was pending (from Prometheus's activeAt to
// the poll that saw it firing).
type fired struct {
	alert          string
	after, pending time.Duration
	forDuration    time.Duration
	// bound is how long after the failure the alert must have fired: the
	// time the site takes to notice, its `for:` and a few evaluations.
	bound time.Duration
}

func TestAlertsFireFromRealScrapes(t *testing.T) {
	for _, f := range fireAlerts(t) {
		t.Logf("%s fired %.1f s after its failure, %.1f s after it became pending (for: %s)", f.alert, f.after.Seconds(), f.pending.Seconds(), f.forDuration)
		assert.LessOrEqual(t, f.pending, f.forDuration+3*evaluation+3*time.Second, "%s fired within its for: and a few evaluations of becoming true", f.alert)
		assert.LessOrEqual(t, f.after, f.bound, "%s fired within %s of its failure", f.alert, f.bound)
	}
}

// BenchmarkAlerts prints, for each alert fired, how long after its
// failure it fired.
func BenchmarkAlerts(b *testing.B) {
	for b.Loop() {
		for _, f := range fireAlerts(b) {
			fmt.Printf("alert name=%s fired_after_s=%.1f for_s=%g\n", f.alert, f.after.Seconds(), f.forDuration.Seconds())
		}
	}
}

// fireAlerts starts the grid and Prometheus inside the first site's node,
// induces the three failures there one after the other and returns the
// alerts as they fired: the overlay's, the site's, the certificate's.
func fireAlerts(tb testing.TB) []fired {
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	tb.Cleanup(cancel)
	g := testgrid.StartForTest(tb, ctx, testgrid.Options{Sites: []string{"east", "west"}, Link: link, Logf: tb.Logf,
		AgentValues: agentValues, GatewayValues: gatewayValues})
	_, err := g.Watch(ctx, time.Now(), 4*time.Minute, testgrid.Routed)
	require.NoError(tb, err, "the sites trust and route to each other")
	require.NoError(tb, g.Steady(ctx, 3*time.Second, time.Minute, testgrid.Routed), "the grid settles")
	east, west := g.Sites[0], g.Sites[1]

	// Prometheus's client certificate, from the grid CA that the agent's
	// metrics port verifies clients to (its site Secret's ca.crt).
	var ca corev1.Secret
	require.NoError(tb, east.Client.Get(ctx, client.ObjectKey{Namespace: testgrid.Namespace, Name: testgrid.CASecret}, &ca))
	gridCA, err := sitetrust.ParseCA(ca.Data[corev1.TLSCertKey], ca.Data[corev1.TLSPrivateKeyKey])
	require.NoError(tb, err)
	chain, key, err := gridCA.Issue("prometheus", time.Now(), 24*time.Hour)
	require.NoError(tb, err)
	require.NoError(tb, east.Client.Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: clientSecret, Namespace: testgrid.Namespace}, Type: corev1.SecretTypeTLS,
		Data: map[string][]byte{corev1.TLSCertKey: chain, corev1.TLSPrivateKeyKey: key},
	}))

	agentPod, err := east.AgentPod(ctx)
	require.NoError(tb, err)
	gatewayPod, err := east.GatewayPod(ctx)
	require.NoError(tb, err)
	dir := tb.TempDir()
	rules := []*unstructured.Unstructured{objectOf(tb, east.AgentObjects, "PrometheusRule"), objectOf(tb, east.GatewayObjects, "PrometheusRule")}
	config := writeConfig(tb, dir, evaluation, []scrapeTarget{
		serviceMonitorTarget(tb, ctx, east, east.AgentObjects, agentPod, dir),
		podMonitorTarget(tb, east.GatewayObjects, gatewayPod),
	}, rules)
	forOf := forDurations(tb, rules)
	started := time.Now()
	startPrometheus(tb, ctx, east, config, dir)
	framework.Eventually(tb, 30*time.Second, "every target scraped", func() (bool, string) {
		ts, err := targets(ctx, east)
		if err != nil {
			return false, err.Error()
		}
		up := len(ts) == 2
		for _, t := range ts {
			up = up && t.Health == "up"
		}
		return up, fmt.Sprintf("%+v", ts)
	})
	scraping := time.Since(started)
	tb.Logf("Prometheus scrapes the agent and the gateway of %s (up %.1f s after its start)", east.Name, scraping.Seconds())

	// The certificate, issued 50 minutes from its expiry, is within the
	// alert's hour from the first scrape: its time counts from
	// Prometheus's start, its bound from the first scrapes of both
	// targets (Prometheus's own start is no part of the alert).
	cert := waitFiring(tb, ctx, east, "GridSiteCertificateExpiringSoon", nil, started, forOf)
	cert.bound = scraping + cert.forDuration + slack

	dashboard(tb, ctx, east, dashboardOf{
		chart: "gridsync-agent", objects: east.AgentObjects,
		variables:   map[string]string{"namespace": testgrid.Namespace},
		emptyPanels: agentEmptyPanels,
	})

	// The other site cut off: its trust probe fails and SWIM declares it
	// dead; its GridSite leaves Active.
	quiet(tb, ctx, east, "GridSiteNotActive")
	cut := time.Now()
	g.Lab.Partition([]int{0}, []int{1})
	site := waitFiring(tb, ctx, east, "GridSiteNotActive", map[string]string{"site": testgrid.Network + "-" + west.Name}, cut, forOf)
	site.bound = site.forDuration + 30*time.Second

	// The cut changes the other site's routes: once the new overlay is
	// on the gateway's disk, the gateway's dashboard has a delivery to
	// show within its rate interval.
	framework.Eventually(tb, time.Minute, "an overlay written since the cut", func() (bool, string) {
		written, err := query(ctx, east, fmt.Sprintf("grid_overlay_sync_last_write_timestamp_seconds > %.3f", float64(cut.UnixMilli())/1000))
		return err == nil && len(written) > 0, fmt.Sprint(written, err)
	})
	dashboard(tb, ctx, east, dashboardOf{
		chart: "praxis-gateway", objects: east.GatewayObjects,
		variables:   map[string]string{"namespace": testgrid.Namespace, "pod": gatewayPod.Name},
		emptyPanels: gatewayEmptyPanels,
	})

	// The overlay gone stale: no agent left to publish it, its ConfigMap
	// deleted. The sidecar keeps serving the last-known-good, degraded.
	quiet(tb, ctx, east, "GridOverlayDeliveryDegraded")
	stopAgent(tb, ctx, east)
	cm := overlayConfigMap(tb, east.GatewayObjects)
	deleted := time.Now()
	require.NoError(tb, east.CP.AdminClient().CoreV1().ConfigMaps(testgrid.Namespace).Delete(ctx, cm, metav1.DeleteOptions{}))
	overlay := waitFiring(tb, ctx, east, "GridOverlayDeliveryDegraded", nil, deleted, forOf)
	overlay.bound = overlay.forDuration + slack
	return []fired{overlay, site, cert}
}

// forDurations are the rules' `for:` durations, by alert.
func forDurations(tb testing.TB, rules []*unstructured.Unstructured) map[string]time.Duration {
	tb.Helper()
	out := map[string]time.Duration{}
	for _, r := range rules {
		groups, _, _ := unstructured.NestedSlice(r.Object, "spec", "groups")
		for _, g := range groups {
			rs, _, _ := unstructured.NestedSlice(g.(map[string]any), "rules")
			for _, rule := range rs {
				rule := rule.(map[string]any)
				d := time.Duration(0)
				if f, ok := rule["for"].(string); ok {
					var err error
					d, err = time.ParseDuration(f)
					require.NoError(tb, err)
				}
				out[str(rule["alert"], "")] = d
			}
		}
	}
	return out
}

// waitFiring waits for the alert with labels to fire and says when.
func waitFiring(tb testing.TB, ctx context.Context, s *testgrid.Site, name string, labels map[string]string, from time.Time, forOf map[string]time.Duration) fired {
	tb.Helper()
	forDuration, ok := forOf[name]
	require.True(tb, ok, "the rules have alert %s", name)
	var f fired
	framework.Eventually(tb, forDuration+90*time.Second, name+" firing", func() (bool, string) {
		as, err := alerts(ctx, s)
		if err != nil {
			return false, err.Error()
		}
		for _, a := range as {
			if a.Labels["alertname"] != name || !matches(a.Labels, labels) || a.State != "firing" {
				continue
			}
			now := time.Now()
			f = fired{alert: name, after: now.Sub(from), pending: now.Sub(a.ActiveAt), forDuration: forDuration}
			return true, ""
		}
		return false, fmt.Sprintf("%+v", as)
	})
	return f
}

// quiet requires that the alert is neither pending nor firing: the
// failure about to be induced is what makes it fire.
func quiet(tb testing.TB, ctx context.Context, s *testgrid.Site, name string) {
	tb.Helper()
	as, err := alerts(ctx, s)
	require.NoError(tb, err)
	for _, a := range as {
		require.NotEqual(tb, name, a.Labels["alertname"], "%s is %s before its failure: %v", name, a.State, a.Labels)
	}
}

func matches(have, want map[string]string) bool {
	for k, v := range want {
		if have[k] != v {
			return false
		}
	}
	return true
}

// stopAgent scales the agent to no replica and waits for its pod to be
// gone, so that no one publishes the overlay again.
func stopAgent(tb testing.TB, ctx context.Context, s *testgrid.Site) {
	tb.Helper()
	deploy := objectOf(tb, s.AgentObjects, "Deployment").GetName()
	deployments := s.CP.AdminClient().AppsV1().Deployments(testgrid.Namespace)
	scale, err := deployments.GetScale(ctx, deploy, metav1.GetOptions{})
	require.NoError(tb, err)
	scale.Spec.Replicas = 0
	_, err = deployments.UpdateScale(ctx, deploy, scale, metav1.UpdateOptions{})
	require.NoError(tb, err)
	framework.Eventually(tb, time.Minute, "the agent's pod gone", func() (bool, string) {
		pods, err := s.CP.AdminClient().CoreV1().Pods(testgrid.Namespace).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=gridsync-agent"})
		if err != nil {
			return false, err.Error()
		}
		return len(pods.Items) == 0, fmt.Sprintf("%d pods", len(pods.Items))
	})
}

// overlayConfigMap is the ConfigMap the gateway's sidecar watches, as its
// rendered arguments name it.
func overlayConfigMap(tb testing.TB, objs []*unstructured.Unstructured) string {
	tb.Helper()
	for _, o := range objs {
		if o.GetKind() != "Deployment" {
			continue
		}
		for _, kind := range []string{"initContainers", "containers"} {
			cs, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", kind)
			for _, c := range cs {
				args, _, _ := unstructured.NestedStringSlice(c.(map[string]any), "args")
				for _, a := range args {
					if name, ok := strings.CutPrefix(a, "--config-map="); ok {
						return name
					}
				}
			}
		}
	}
	require.FailNow(tb, "the gateway's sidecar names no --config-map")
	return ""
}

// agentEmptyPanels are the agent dashboard's panels whose queries return
// nothing in this healthy grid, and why: the rest must return data. A
// panel listed here that has data is fine (it is not checked).
var agentEmptyPanels = map[string]string{
	"Sites not Active":                   "lists only sites out of Active: none while the grid is healthy",
	"Providers whose last scrape failed": "lists only failing provider scrapes: none, as none is scraped",
	// The grid's sites run no signals listener, so no sidecar reports
	// its delivery to its agent: no rollout state or delivery time.
	"Gateway pods by delivery state":                       "the sidecars report to no signals listener",
	"Rollout: rendering to every pod delivered (p50, p99)": "the sidecars report to no signals listener",
	// The grid's providers declare no health check and no metrics
	// endpoint: none is probed or scraped.
	"Provider readiness, by site": "no provider declares a health check",
	"Provider scrapes by outcome": "no provider declares a metrics endpoint",
}

// gatewayEmptyPanels are the gateway dashboard's panels that this grid
// has nothing for: none, its sidecar syncing the site certificate as its
// identity and the dashboard queried just after a delivery.
var gatewayEmptyPanels = map[string]string{}

// rateInterval stands for Grafana's $__rate_interval, the larger of four
// scrape intervals and the step plus one (the step over the dashboards'
// 6 h at a panel's width is some 20 s): a minute with the data source's
// default scrape interval, 15 s.
const rateInterval = "1m"

// dashboardOf is one chart's Grafana dashboard as its objects render it
// into a ConfigMap, what its query variables must find, and its panels
// this grid has nothing for.
type dashboardOf struct {
	chart   string
	objects []*unstructured.Unstructured
	// variables are the value each of the dashboard's query variables'
	// queries must find: the one they are set to.
	variables   map[string]string
	emptyPanels map[string]string
}

// variableRef is a Grafana variable in a query: $name or ${name}.
var variableRef = regexp.MustCompile(`\$\{([A-Za-z_]\w*)\}|\$([A-Za-z_]\w*)`)

// expand puts the variables' values into expr, failing on a variable it
// has no value for.
func expand(tb testing.TB, expr string, vars map[string]string) string {
	tb.Helper()
	var unknown []string
	out := variableRef.ReplaceAllStringFunc(expr, func(ref string) string {
		m := variableRef.FindStringSubmatch(ref)
		if v, ok := vars[m[1]+m[2]]; ok {
			return v
		}
		unknown = append(unknown, ref)
		return ref
	})
	require.Empty(tb, unknown, "variables with no value in %s", expr)
	return out
}

// dashboard runs each query of the chart's dashboard, as rendered into its
// ConfigMap: its variables set to what their own queries find (the
// release's namespace, the scraped pod) and $__rate_interval to
// rateInterval. Each panel but those the grid has nothing for must have
// a number (a histogram with no observation in the window has NaN).
func dashboard(tb testing.TB, ctx context.Context, s *testgrid.Site, d dashboardOf) {
	tb.Helper()
	var files []map[string]string
	for _, o := range d.objects {
		if o.GetKind() == "ConfigMap" && strings.HasSuffix(o.GetName(), "-dashboard") {
			data, _, _ := unstructured.NestedStringMap(o.Object, "data")
			files = append(files, data)
		}
	}
	require.Len(tb, files, 1, "the %s chart renders its dashboard's ConfigMap", d.chart)
	require.Len(tb, files[0], 1, "the %s chart's dashboard ConfigMap holds one dashboard", d.chart)
	var file, data string
	for file, data = range files[0] {
		break
	}
	var doc struct {
		Templating struct {
			List []struct {
				Name  string `json:"name"`
				Type  string `json:"type"`
				Query string `json:"query"`
			} `json:"list"`
		} `json:"templating"`
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	require.NoError(tb, json.Unmarshal([]byte(data), &doc), "%s", file)
	vars := map[string]string{"__rate_interval": rateInterval}
	for _, v := range doc.Templating.List {
		if v.Type != "query" {
			continue
		}
		// label_values(selector, label): the label's values among the
		// selected series, now.
		args, ok := strings.CutPrefix(v.Query, "label_values(")
		i := strings.LastIndex(args, ",")
		require.True(tb, ok && i > 0 && strings.HasSuffix(args, ")"), "%s: variable %s: %s is not label_values(selector, label)", file, v.Name, v.Query)
		label := strings.TrimSpace(strings.TrimSuffix(args[i+1:], ")"))
		found, err := query(ctx, s, fmt.Sprintf("group by (%s) (%s)", label, expand(tb, args[:i], vars)))
		require.NoError(tb, err, "%s: variable %s", file, v.Name)
		var values []string
		for _, f := range found {
			values = append(values, f.labels[label])
		}
		want, ok := d.variables[v.Name]
		require.True(tb, ok, "%s: variable %s has no value to find", file, v.Name)
		require.Equal(tb, []string{want}, values, "%s: variable %s's query %s", file, v.Name, v.Query)
		vars[v.Name] = want
	}
	// A rate needs two samples of a counter.
	time.Sleep(2 * evaluation)
	var empty []string
	queries, listed := 0, 0
	for _, p := range doc.Panels {
		if _, ok := d.emptyPanels[p.Title]; ok {
			listed++
		}
		require.NotEmpty(tb, p.Targets, "%s: panel %q", file, p.Title)
		for _, target := range p.Targets {
			expr := expand(tb, target.Expr, vars)
			found, err := query(ctx, s, expr)
			require.NoError(tb, err, "%s: panel %q: %s", file, p.Title, expr)
			queries++
			if _, ok := d.emptyPanels[p.Title]; ok || slices.ContainsFunc(found, func(f series) bool { return !math.IsNaN(f.value) }) {
				continue
			}
			empty = append(empty, fmt.Sprintf("%q: %s: %v", p.Title, expr, found))
		}
	}
	assert.Len(tb, d.emptyPanels, listed, "%s: the panels listed as empty are the dashboard's", file)
	assert.Empty(tb, empty, "%s: panels without data", file)
	but := ""
	if listed > 0 {
		but = fmt.Sprintf(" but the %d panels this grid has nothing for", listed)
	}
	tb.Logf("%s dashboard (%s): %d panels, %d queries, every one with data%s", d.chart, file, len(doc.Panels), queries, but)
}
