package charts

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/gridsync/gridsync/test/controlplane"
)

// alertsCase renders the agent chart's rules as the promtool tests expect
// them: release grid in grid-system, the defaults otherwise.
var alertsCase = valueCase{name: "alerts-promtool", release: "grid", namespace: "grid-system", values: map[string]any{
	"metrics": map[string]any{"prometheusRule": map[string]any{"enabled": true}},
}}

// promtool is the pinned promtool `make tools` builds.
func promtool(t *testing.T) string {
	t.Helper()
	dir, err := controlplane.BinDir()
	require.NoError(t, err)
	bin := filepath.Join(dir, "promtool")
	_, err = os.Stat(bin)
	require.NoError(t, err, "promtool is built by make tools")
	return bin
}

// ruleGroupsOf are a chart's rendered PrometheusRule's groups.
func ruleGroupsOf(t *testing.T, chart string, vc valueCase) []any {
	t.Helper()
	rules := ofKind(objects(t, render(t, chart, vc)), "PrometheusRule")
	require.Len(t, rules, 1)
	groups, _, err := unstructured.NestedSlice(rules[0].Object, "spec", "groups")
	require.NoError(t, err)
	return groups
}

// Every alert of the agent chart fires on series written to fire it and
// stays quiet on series that must not, by `promtool test rules`; the rules
// as rendered, annotations included, pass `promtool check rules`.
func TestAgentChartAlertRulesFireAndStayQuiet(t *testing.T) {
	testAlertRules(t, ruleGroupsOf(t, agentChart, alertsCase), "agent-alerts.test.yaml", 9)
}

// The gateway chart's alerts on its sidecars, the same way.
func TestGatewayChartAlertRulesFireAndStayQuiet(t *testing.T) {
	testAlertRules(t, ruleGroupsOf(t, gatewayChart, gatewayCases[4]), "gateway-alerts.test.yaml", 6)
}

// testAlertRules runs promtool on groups: `check rules` as rendered, then
// `test rules` with the test file of testdata, and fails unless each of
// the alerts (count of them) has a test where it fires and one where it
// stays quiet.
func testAlertRules(t *testing.T, groups []any, testFile string, count int) {
	t.Helper()
	bin := promtool(t)
	dir := t.TempDir()
	write := func(name string, v any) {
		data, err := sigsyaml.Marshal(v)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), data, 0o644))
	}
	write("checked.yaml", map[string]any{"groups": groups})
	out, err := exec.CommandContext(t.Context(), bin, "check", "rules", filepath.Join(dir, "checked.yaml")).CombinedOutput()
	require.NoError(t, err, "promtool check rules:\n%s", out)

	// The unit tests compare labels; the annotations' texts are the rule
	// check's (their templates) and not restated in every test.
	var alerts []string
	for _, g := range groups {
		for _, r := range g.(map[string]any)["rules"].([]any) {
			rule := r.(map[string]any)
			delete(rule, "annotations")
			alerts = append(alerts, rule["alert"].(string))
		}
	}
	write("rules.yaml", map[string]any{"groups": groups})
	tests, err := os.ReadFile(filepath.Join("testdata", testFile))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, testFile), tests, 0o644))
	cmd := exec.CommandContext(t.Context(), bin, "test", "rules", testFile)
	cmd.Dir = dir
	out, err = cmd.CombinedOutput()
	require.NoError(t, err, "promtool test rules:\n%s", out)

	// Every alert is tested both ways.
	var file struct {
		Tests []struct {
			AlertRuleTest []struct {
				Alertname string           `json:"alertname"`
				ExpAlerts []map[string]any `json:"exp_alerts"`
			} `json:"alert_rule_test"`
		} `json:"tests"`
	}
	require.NoError(t, sigsyaml.Unmarshal(tests, &file))
	fires, quiet := map[string]bool{}, map[string]bool{}
	for _, tc := range file.Tests {
		for _, a := range tc.AlertRuleTest {
			if len(a.ExpAlerts) > 0 {
				fires[a.Alertname] = true
			} else {
				quiet[a.Alertname] = true
			}
		}
	}
	for _, a := range alerts {
		assert.True(t, fires[a], "no test where %s fires", a)
		assert.True(t, quiet[a], "no test where %s stays quiet", a)
	}
	assert.Len(t, alerts, count)
}

// metricName finds the project's series in a PromQL expression.
var metricName = regexp.MustCompile(`\b(grid|gridsync)_[a-z0-9_]+\b`)

// The alerts and the dashboard name only series the agent exports: each
// name is declared in the agent's sources (histograms by their family).
// A metric renamed in the code breaks this test, not a dashboard in
// production.
func TestAgentChartAlertsAndDashboardNameSeriesTheAgentExports(t *testing.T) {
	var exprs []string
	for _, g := range ruleGroupsOf(t, agentChart, alertsCase) {
		for _, r := range g.(map[string]any)["rules"].([]any) {
			exprs = append(exprs, r.(map[string]any)["expr"].(string))
		}
	}
	data, err := os.ReadFile(filepath.Join(chartDir(agentChart), "files", "dashboard.json"))
	require.NoError(t, err)
	var dashboard struct {
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
		Templating struct{ List []struct{ Query any } }
	}
	require.NoError(t, json.Unmarshal(data, &dashboard))
	require.NotEmpty(t, dashboard.Panels)
	for _, p := range dashboard.Panels {
		require.NotEmpty(t, p.Targets, p.Title)
		for _, target := range p.Targets {
			exprs = append(exprs, target.Expr)
		}
	}
	for _, v := range dashboard.Templating.List {
		if q, ok := v.Query.(string); ok {
			exprs = append(exprs, q)
		}
	}

	declared := sourceStrings(t, "cmd", "controller", "delivery", "gossip", "internal", "listener", "shared", "signals", "trust")
	names := map[string]bool{}
	for _, e := range exprs {
		for _, n := range metricName.FindAllString(e, -1) {
			for _, suffix := range []string{"_bucket", "_count", "_sum"} {
				if base, ok := strings.CutSuffix(n, suffix); ok && declared.Contains([]byte(`"`+base+`"`)) {
					n = base
				}
			}
			names[n] = true
		}
	}
	var unknown []string
	for n := range names {
		if !declared.Contains([]byte(`"` + n + `"`)) {
			unknown = append(unknown, n)
		}
	}
	sort.Strings(unknown)
	assert.Empty(t, unknown, "series no agent source declares")
	// The panels cover what the issue of the grid's operators asks for.
	joined := strings.Join(exprs, "\n")
	for _, want := range []string{"grid_site_phase", "gridsync_rollout_pods", "grid_provider_ready", "grid_swim_bytes_sent_total", "grid_site_identity_expiry_timestamp_seconds"} {
		assert.Contains(t, joined, want)
	}
}

// sources is the non-test Go sources below some folders, joined.
type sources []byte

func (s sources) Contains(b []byte) bool { return bytes.Contains(s, b) }

func sourceStrings(t *testing.T, dirs ...string) sources {
	t.Helper()
	var all []byte
	for _, d := range dirs {
		err := filepath.WalkDir(filepath.Join("..", "..", d), func(path string, e os.DirEntry, err error) error {
			if err != nil || e.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return err
			}
			data, err := os.ReadFile(path)
			all = append(all, data...)
			return err
		})
		require.NoError(t, err)
	}
	return all
}
