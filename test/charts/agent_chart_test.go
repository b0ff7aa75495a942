package charts

import (
	"context"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/gridsync/gridsync/api/v1alpha1"
	"github.com/gridsync/gridsync/controller"
	"github.com/gridsync/gridsync/controller/rbac"
	"github.com/gridsync/gridsync/shared/envelope"
)

const agentChart = "gridsync-agent"

var agentCases = []valueCase{
	{name: "defaults", release: "gridsync", namespace: "grid-system", values: map[string]any{}},
	{name: "namespaces", release: "gs", namespace: "agent-ns", values: map[string]any{
		"namespaces": []string{"gateways-a", "gateways-b"},
	}},
	{name: "single-replica-no-crds", release: "single", namespace: "single-ns", values: map[string]any{
		"replicaCount": 1, "crds": map[string]any{"enabled": false},
		"leaderElection": map[string]any{"enabled": false}, "resourceNamespaces": []string{"gateways-c"}, "deleteOrphanedOverlays": true,
	}},
	// SWIM on, as a site of a grid: the reference's example seed is only
	// rendered and applied here, never dialled.
	{name: "swim", release: "grid", namespace: "praxis-system", values: map[string]any{
		"resourceNamespaces": []string{"praxis-system"},
		"swim": map[string]any{"enabled": true, "siteName": "site-a", "seeds": "10.0.0.5:7946",
			"secretNames": []string{"grid-swim-key", "grid-site-cert"}},
		"gateway": map[string]any{"serviceName": "provider-gateway"},
		"trust": map[string]any{"secrets": []map[string]any{{"name": "grid-ca"}, {"name": "grid-site-cert"}, {"name": "edge-ca", "namespace": "gateways"}},
			"probeInterval": "10s"},
	}},
	// The signals listener, with its Service and the delivery reports.
	{name: "signals", release: "sig", namespace: "sig-system", values: map[string]any{
		"resourceNamespaces": []string{"gateways-s"},
		"swim":               map[string]any{"siteName": "site-s"},
		"signals":            map[string]any{"enabled": true, "siteSecretName": "grid-site-cert", "perSiteConnections": 4},
		// The issuer site: it answers enrolments on the signals listener.
		"trust": map[string]any{"enrollment": map[string]any{"issuer": true}},
	}},
	// Everything monitoring: /metrics over TLS from the site identity with
	// client certificates, the ServiceMonitor that follows, the alerts,
	// the dashboard and the NetworkPolicy.
	{name: "monitoring", release: "mon", namespace: "mon-system", values: map[string]any{
		"resourceNamespaces": []string{"gateways-m"},
		"swim":               map[string]any{"enabled": true, "siteName": "site-m"},
		"signals":            map[string]any{"enabled": true, "siteSecretName": "grid-site-cert"},
		"metrics": map[string]any{
			"tls":            map[string]any{"enabled": true, "clientAuth": map[string]any{"enabled": true, "clientSecretName": "prometheus-client"}},
			"serviceMonitor": map[string]any{"enabled": true, "labels": map[string]any{"release": "prometheus"}},
			"prometheusRule": map[string]any{"enabled": true},
			"dashboard":      map[string]any{"enabled": true},
		},
		"networkPolicy": map[string]any{"enabled": true, "peersFrom": []map[string]any{{"ipBlock": map[string]any{"cidr": "198.51.100.0/24"}}}},
	}},
	{name: "long-release-name", release: "a-release-name-long-enough-that-its-full-name-is-cut", namespace: "long-ns", values: map[string]any{
		"namespaces": []string{"gateways-d"}, "logLevel": "debug",
		"probes": map[string]any{"allowDestinations": []string{"198.51.100.0/24", "models.example.com"}, "secretSelector": "grid.praxis.fast/probe-credential=true"},
	}},
}

// The golden files leave the CRDs out: they are make generate's output,
// stored once in the chart's files/crds, and
// TestAgentChartRendersTheCRDsOfItsFilesFolder holds the chart to them.
func TestAgentChartLintsAndMatchesItsGoldenFiles(t *testing.T) {
	for _, c := range agentCases {
		t.Run(c.name, func(t *testing.T) {
			lint(t, agentChart, c)
			rest, _ := splitCRDs(render(t, agentChart, c))
			checkGolden(t, agentChart, c.name, rest)
		})
	}
}

// crdSource is the Source line helm template prints above each document of
// the agent chart's CRD template.
const crdSource = "# Source: gridsync-agent/templates/crds.yaml\n"

// splitCRDs splits what helm template printed into the documents of the
// CRD template (each without its separator and Source line) and the
// others, whose bytes it keeps.
func splitCRDs(rendered string) (rest string, crds []string) {
	var others strings.Builder
	for _, doc := range documents(rendered) {
		if body, ok := strings.CutPrefix(doc, "---\n"+crdSource); ok {
			crds = append(crds, body)
			continue
		}
		others.WriteString(doc)
	}
	return others.String(), crds
}

// documents cuts helm template's output before every line that is a
// document separator.
func documents(rendered string) []string {
	var docs []string
	start := 0
	for i := 0; i < len(rendered); {
		next := strings.Index(rendered[i:], "\n---\n")
		if next < 0 {
			break
		}
		end := i + next + 1
		if end > start {
			docs = append(docs, rendered[start:end])
		}
		start, i = end, end
	}
	return append(docs, rendered[start:])
}

// The chart renders every CRD of its files/crds folder (where make generate
// writes them), in the folder's order, as its template does: the file
// decoded and encoded again, with the keep policy and the chart's labels
// added and nothing else. The CRDs are stored once, in that folder: the
// goldens leave them out, and this is what holds the chart's output to it,
// byte for byte, for every case that installs them.
func TestAgentChartRendersTheCRDsOfItsFilesFolder(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(chartDir(agentChart), "files", "crds", "*.yaml"))
	require.NoError(t, err)
	require.NotEmpty(t, files, "the chart's files/crds holds no CRD: run make generate")
	for _, c := range agentCases {
		t.Run(c.name, func(t *testing.T) {
			rendered := render(t, agentChart, c)
			_, crds := splitCRDs(rendered)
			crdValues, _ := c.values["crds"].(map[string]any)
			if enabled, ok := crdValues["enabled"].(bool); ok && !enabled {
				assert.Empty(t, crds, "crds.enabled=false renders no CRD")
				return
			}
			// The chart's labels, as the Deployment carries them.
			deployments := ofKind(objects(t, rendered), "Deployment")
			require.Len(t, deployments, 1)
			labels := map[string]any{}
			for k, v := range deployments[0].GetLabels() {
				labels[k] = v
			}
			require.Len(t, crds, len(files), "one CRD document per file of files/crds")
			for i, file := range files {
				assert.Equal(t, chartCRD(t, file, labels), crds[i], "the chart renders %s otherwise than its template says", file)
			}
		})
	}
}

// chartCRD is what the chart's CRD template makes of file: fromYaml, the
// annotation helm.sh/resource-policy: keep (over the file's), the chart's
// labels (over the file's), toYaml.
func chartCRD(t *testing.T, file string, labels map[string]any) string {
	t.Helper()
	data, err := os.ReadFile(file)
	require.NoError(t, err)
	var crd map[string]any
	require.NoError(t, sigsyaml.Unmarshal(data, &crd))
	metadata, ok := crd["metadata"].(map[string]any)
	require.True(t, ok, "%s has no metadata", file)
	for key, policy := range map[string]map[string]any{
		"annotations": {"helm.sh/resource-policy": "keep"},
		"labels":      labels,
	} {
		merged := map[string]any{}
		if own, ok := metadata[key].(map[string]any); ok {
			maps.Copy(merged, own)
		}
		maps.Copy(merged, policy)
		metadata[key] = merged
	}
	out, err := sigsyaml.Marshal(crd)
	require.NoError(t, err)
	return string(out)
}

func TestAgentChartRefusesValuesOutsideItsSchema(t *testing.T) {
	for name, values := range map[string]map[string]any{
		"bad namespace":      {"namespaces": []string{"Not_A_Namespace"}},
		"unknown value":      {"replicas": 2},
		"bad log level":      {"logLevel": "loud"},
		"no replicas":        {"replicaCount": 0},
		"bad lease setting":  {"leaderElection": map[string]any{"leaseDuration": "soon"}},
		"unknown probe key":  {"probes": map[string]any{"allowList": []string{"198.51.100.0/24"}}},
		"swim without site":  {"swim": map[string]any{"enabled": true}},
		"swim bad site":      {"swim": map[string]any{"enabled": true, "siteName": "Site_A"}},
		"swim bad service":   {"swim": map[string]any{"service": map[string]any{"type": "Headless"}}},
		"bad metrics source": {"metrics": map[string]any{"tls": map[string]any{"source": "vault"}}},
		"bad alert duration": {"metrics": map[string]any{"prometheusRule": map[string]any{"siteNotActiveFor": "ten minutes"}}},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := runHelm(t, values, "template", "x", chartDir(agentChart), "--kube-version", kubeVersion)
			require.Error(t, err)
			assert.Contains(t, err.Error(), "schema")
		})
	}
}

// Timings the agent would refuse to start with fail the render, saying
// which; the edge of each rule renders.
func TestAgentChartRefusesTimingsTheAgentRefuses(t *testing.T) {
	for name, c := range map[string]struct {
		values  map[string]any
		refused string
	}{
		"site probe bound past its interval":     {map[string]any{"trust": map[string]any{"probeInterval": "3s", "probeTimeout": "3s500ms"}}, "trust.probeTimeout (3s500ms)"},
		"site probe bound of a minute in 30s":    {map[string]any{"trust": map[string]any{"probeInterval": "30s", "probeTimeout": "1m"}}, "trust.probeTimeout (1m)"},
		"site probe bound equal to its interval": {map[string]any{"trust": map[string]any{"probeInterval": "1m", "probeTimeout": "60000ms"}}, ""},
		"swim probe bound equal to its interval": {map[string]any{"swim": map[string]any{"probeInterval": "1s", "probeTimeout": "1000ms"}}, "swim.probeTimeout (1000ms)"},
		"swim probe bound under its interval":    {map[string]any{"swim": map[string]any{"probeInterval": "1s", "probeTimeout": "999ms"}}, ""},
		"the defaults":                           {nil, ""},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := runHelm(t, c.values, "template", "x", chartDir(agentChart), "--kube-version", kubeVersion)
			if c.refused == "" {
				require.NoError(t, err)
				return
			}
			require.Error(t, err)
			assert.Contains(t, err.Error(), c.refused)
			assert.Contains(t, err.Error(), "the agent refuses to start")
		})
	}
}

// Every rendered object is accepted by the API server: first a
// server-side dry run, then for real.
func TestAgentChartObjectsAreAcceptedByTheAPIServer(t *testing.T) {
	installMonitoringCRDs(t)
	c := adminClient(t)
	for _, vc := range agentCases {
		t.Run(vc.name, func(t *testing.T) {
			applyRendered(t, c, vc, render(t, agentChart, vc))
		})
	}
}

// The chart grants exactly the controller's least privilege: the rules
// match controller/rbac, access reviews say yes and no where they must,
// and the controller runs on a token of the chart's ServiceAccount.
func TestAgentChartGrantsTheControllersLeastPrivilegeAndNothingMore(t *testing.T) {
	vc := agentCases[1]
	rendered := render(t, agentChart, vc)
	objs := objects(t, rendered)
	clusterRoles := map[string][]rbacv1.PolicyRule{}
	for _, r := range ofKind(objs, "ClusterRole") {
		clusterRoles[r.GetName()] = rulesOf(t, r)
	}
	assert.Equal(t, map[string][]rbacv1.PolicyRule{
		"gs-gridsync-agent":           rbac.ClusterRules(),
		"gs-gridsync-agent-resources": rbac.NamespaceRules(false),
		"gs-gridsync-agent-scraper":   rbac.ScraperRules(), // the scraper account's, not the agent's
	}, clusterRoles)
	roles := map[string][]rbacv1.PolicyRule{}
	for _, r := range ofKind(objs, "Role") {
		roles[r.GetNamespace()+"/"+r.GetName()] = rulesOf(t, r)
	}
	assert.Equal(t, map[string][]rbacv1.PolicyRule{
		"agent-ns/gs-gridsync-agent-leader-election": rbac.LeaderElectionRules(),
		"agent-ns/gs-gridsync-agent-scraper-token":   rbac.ScraperTokenRules("gs-gridsync-agent-scraper"),
	}, roles)
	// The resources ClusterRole is bound only by RoleBindings, in the
	// listed namespaces: never cluster-wide.
	var bound []string
	for _, b := range ofKind(objs, "RoleBinding") {
		ref, _, _ := unstructured.NestedString(b.Object, "roleRef", "name")
		if ref == "gs-gridsync-agent-resources" {
			bound = append(bound, b.GetNamespace())
		}
	}
	assert.ElementsMatch(t, []string{"gateways-a", "gateways-b"}, bound)
	for _, b := range ofKind(objs, "ClusterRoleBinding") {
		ref, _, _ := unstructured.NestedString(b.Object, "roleRef", "name")
		assert.NotEqual(t, "gs-gridsync-agent-resources", ref)
	}

	c := adminClient(t)
	applyRendered(t, c, vc, rendered)
	user := "system:serviceaccount:agent-ns:gs-gridsync-agent"
	assertAccess(t, user, []access{
		{true, authorizationv1.ResourceAttributes{Verb: "watch", Group: "grid.praxis.fast", Resource: "gridnetworks"}},
		{true, authorizationv1.ResourceAttributes{Verb: "patch", Group: "grid.praxis.fast", Resource: "inferenceproviders", Subresource: "status"}},
		{true, authorizationv1.ResourceAttributes{Verb: "patch", Namespace: "gateways-a", Resource: "configmaps"}},
		{true, authorizationv1.ResourceAttributes{Verb: "create", Namespace: "gateways-b", Resource: "configmaps"}},
		{true, authorizationv1.ResourceAttributes{Verb: "get", Namespace: "gateways-a", Resource: "secrets", Name: "any"}},
		{true, authorizationv1.ResourceAttributes{Verb: "update", Namespace: "agent-ns", Group: "coordination.k8s.io", Resource: "leases"}},
		{true, authorizationv1.ResourceAttributes{Verb: "create", Namespace: "agent-ns", Resource: "events"}},
		// What the reference's operator never does, and neither does the agent.
		{false, authorizationv1.ResourceAttributes{Verb: "list", Namespace: "gateways-a", Resource: "secrets"}},
		{false, authorizationv1.ResourceAttributes{Verb: "watch", Namespace: "gateways-a", Resource: "secrets"}},
		{false, authorizationv1.ResourceAttributes{Verb: "list", Namespace: "gateways-a", Resource: "configmaps"}},
		{false, authorizationv1.ResourceAttributes{Verb: "watch", Namespace: "gateways-a", Resource: "configmaps"}},
		{false, authorizationv1.ResourceAttributes{Verb: "delete", Namespace: "gateways-b", Resource: "configmaps"}},
		{false, authorizationv1.ResourceAttributes{Verb: "update", Namespace: "gateways-b", Resource: "configmaps"}},
		{false, authorizationv1.ResourceAttributes{Verb: "update", Group: "grid.praxis.fast", Resource: "inferenceproviders", Subresource: "status"}},
		{false, authorizationv1.ResourceAttributes{Verb: "update", Group: "grid.praxis.fast", Resource: "gridnetworks"}},
		{false, authorizationv1.ResourceAttributes{Verb: "delete", Group: "grid.praxis.fast", Resource: "inferenceproviders"}},
		{false, authorizationv1.ResourceAttributes{Verb: "create", Namespace: "elsewhere", Resource: "configmaps"}},
		{false, authorizationv1.ResourceAttributes{Verb: "list", Namespace: "elsewhere", Resource: "secrets"}},
		{false, authorizationv1.ResourceAttributes{Verb: "create", Namespace: "gateways-a", Resource: "secrets"}},
		{false, authorizationv1.ResourceAttributes{Verb: "list", Resource: "secrets"}},
		{false, authorizationv1.ResourceAttributes{Verb: "update", Namespace: "gateways-a", Group: "coordination.k8s.io", Resource: "leases"}},
		{false, authorizationv1.ResourceAttributes{Verb: "list", Resource: "nodes"}},
		{false, authorizationv1.ResourceAttributes{Verb: "create", Namespace: "gateways-a", Resource: "pods"}},
		// Deployments only through a gateway's own grant (delegated mounts,
		// the identity rollout): none of the agent's.
		{false, authorizationv1.ResourceAttributes{Verb: "get", Namespace: "gateways-a", Group: "apps", Resource: "deployments", Name: "any"}},
		{false, authorizationv1.ResourceAttributes{Verb: "patch", Namespace: "gateways-a", Group: "apps", Resource: "deployments", Name: "any"}},
		{false, authorizationv1.ResourceAttributes{Verb: "list", Group: "apps", Resource: "replicasets"}},
	})

	// The controller itself, on a token of the chart's ServiceAccount.
	saConfig, err := cp.ServiceAccountConfig(t.Context(), "agent-ns", "gs-gridsync-agent")
	require.NoError(t, err)
	mgr, err := controller.NewManager(saConfig, controller.ManagerOptions{
		Options:                 controller.Options{Namespaces: []string{"gateways-a", "gateways-b"}},
		LeaderElection:          true,
		LeaderElectionNamespace: "agent-ns",
		LeaderElectionID:        "gs-gridsync-agent",
		SeveralPerProcess:       true, // -count=N runs this test again in the same process
	})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		assert.NoError(t, <-done)
	})
	network := &v1alpha1.GridNetwork{
		ObjectMeta: metav1.ObjectMeta{Name: "chart-net"},
		Spec:       v1alpha1.GridNetworkSpec{ConsumerGateways: []v1alpha1.ConsumerGateway{{Name: "edge", Namespace: "gateways-a"}}},
	}
	require.NoError(t, c.Create(t.Context(), network))
	t.Cleanup(func() { _ = c.Delete(context.Background(), network) })
	key := client.ObjectKey{Namespace: "gateways-a", Name: envelope.ConfigMapName(network.Name, "edge")}
	require.Eventually(t, func() bool {
		var got v1alpha1.GridNetwork
		if err := c.Get(t.Context(), client.ObjectKeyFromObject(network), &got); err != nil {
			return false
		}
		return got.Status.DistributedCount == 1
	}, 30*time.Second, 50*time.Millisecond, "the agent publishes with the chart's RBAC")
	_, err = cp.AdminClient().CoreV1().ConfigMaps(key.Namespace).Get(t.Context(), key.Name, metav1.GetOptions{})
	require.NoError(t, err)
}

// With SWIM and trust on, the chart adds exactly what membership and trust
// need: the SWIM Service's EndpointSlice in its namespace, the named key
// and certificate Secrets (get), the gateway Service (get), the named CA
// and site Secrets in their namespaces and the record key Secret in its
// own (get, create, patch), and nothing else.
func TestAgentChartGrantsSwimOnlyWhatItNeeds(t *testing.T) {
	var vc valueCase
	for _, c := range agentCases {
		if c.name == "swim" {
			vc = c
		}
	}
	rendered := render(t, agentChart, vc)
	objs := objects(t, rendered)
	roles := map[string][]rbacv1.PolicyRule{}
	for _, r := range ofKind(objs, "Role") {
		roles[r.GetNamespace()+"/"+r.GetName()] = rulesOf(t, r)
	}
	assert.Equal(t, map[string][]rbacv1.PolicyRule{
		"praxis-system/grid-gridsync-agent-leader-election": rbac.LeaderElectionRules(),
		"praxis-system/grid-gridsync-agent-swim-service":    rbac.SwimServiceRules(),
		"praxis-system/grid-gridsync-agent-record-key":      rbac.RecordKeySecretRules("grid-gridsync-agent-record-key"),
		"praxis-system/grid-gridsync-agent-swim-secrets": {{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get"},
			ResourceNames: []string{"grid-swim-key", "grid-site-cert"}}},
		"praxis-system/grid-gridsync-agent-gateway-service": {{APIGroups: []string{""}, Resources: []string{"services"}, Verbs: []string{"get"},
			ResourceNames: []string{"provider-gateway"}}},
		"praxis-system/grid-gridsync-agent-trust-secrets": rbac.TrustSecretRules("grid-ca", "grid-site-cert"),
		"gateways/grid-gridsync-agent-trust-secrets":      rbac.TrustSecretRules("edge-ca"),
		"praxis-system/grid-gridsync-agent-scraper-token": rbac.ScraperTokenRules("grid-gridsync-agent-scraper"),
	}, roles)
	var swimService *unstructured.Unstructured
	for _, svc := range ofKind(objs, "Service") {
		if svc.GetName() == "grid-gridsync-agent-swim" {
			swimService = svc
		}
	}
	require.NotNil(t, swimService)
	_, hasSelector, _ := unstructured.NestedMap(swimService.Object, "spec", "selector")
	assert.False(t, hasSelector, "the leader points the SWIM Service at itself")

	c := adminClient(t)
	applyRendered(t, c, vc, rendered)
	user := "system:serviceaccount:praxis-system:grid-gridsync-agent"
	assertAccess(t, user, []access{
		{true, authorizationv1.ResourceAttributes{Verb: "get", Namespace: "praxis-system", Resource: "secrets", Name: "grid-swim-key"}},
		{true, authorizationv1.ResourceAttributes{Verb: "patch", Namespace: "praxis-system", Group: "discovery.k8s.io", Resource: "endpointslices"}},
		{true, authorizationv1.ResourceAttributes{Verb: "get", Namespace: "praxis-system", Resource: "services", Name: "provider-gateway"}},
		{true, authorizationv1.ResourceAttributes{Verb: "create", Group: "grid.praxis.fast", Resource: "gridsites"}},
		{true, authorizationv1.ResourceAttributes{Verb: "watch", Group: "grid.praxis.fast", Resource: "gridsites"}},
		{true, authorizationv1.ResourceAttributes{Verb: "create", Namespace: "praxis-system", Resource: "secrets", Name: "grid-ca"}},
		{true, authorizationv1.ResourceAttributes{Verb: "patch", Namespace: "praxis-system", Resource: "secrets", Name: "grid-site-cert"}},
		{true, authorizationv1.ResourceAttributes{Verb: "create", Namespace: "gateways", Resource: "secrets", Name: "edge-ca"}},
		{true, authorizationv1.ResourceAttributes{Verb: "create", Namespace: "praxis-system", Resource: "secrets", Name: "grid-gridsync-agent-record-key"}},
		{true, authorizationv1.ResourceAttributes{Verb: "get", Namespace: "praxis-system", Resource: "secrets", Name: "grid-gridsync-agent-record-key"}},
		{false, authorizationv1.ResourceAttributes{Verb: "delete", Namespace: "praxis-system", Resource: "secrets", Name: "grid-gridsync-agent-record-key"}},
		{false, authorizationv1.ResourceAttributes{Verb: "create", Namespace: "praxis-system", Resource: "secrets", Name: "grid-swim-key"}},
		{false, authorizationv1.ResourceAttributes{Verb: "patch", Namespace: "gateways", Resource: "secrets", Name: "grid-ca"}},
		{false, authorizationv1.ResourceAttributes{Verb: "delete", Namespace: "praxis-system", Resource: "secrets", Name: "grid-ca"}},
		{true, authorizationv1.ResourceAttributes{Verb: "patch", Group: "grid.praxis.fast", Resource: "gridsites", Subresource: "status"}},
		{false, authorizationv1.ResourceAttributes{Verb: "get", Namespace: "praxis-system", Resource: "services", Name: "another"}},
		{false, authorizationv1.ResourceAttributes{Verb: "list", Namespace: "praxis-system", Resource: "services"}},
		{false, authorizationv1.ResourceAttributes{Verb: "delete", Group: "grid.praxis.fast", Resource: "gridsites"}},
		{false, authorizationv1.ResourceAttributes{Verb: "update", Group: "grid.praxis.fast", Resource: "gridsites"}},
		{false, authorizationv1.ResourceAttributes{Verb: "delete", Namespace: "praxis-system", Group: "discovery.k8s.io", Resource: "endpointslices"}},
		{false, authorizationv1.ResourceAttributes{Verb: "patch", Namespace: "elsewhere", Group: "discovery.k8s.io", Resource: "endpointslices"}},
	})
}

func rulesOf(t *testing.T, role interface{ UnstructuredContent() map[string]any }) []rbacv1.PolicyRule {
	t.Helper()
	var r rbacv1.ClusterRole
	require.NoError(t, runtime.DefaultUnstructuredConverter.FromUnstructured(role.UnstructuredContent(), &r))
	return r.Rules
}

func adminClient(t *testing.T) client.Client {
	t.Helper()
	scheme, err := controller.Scheme()
	require.NoError(t, err)
	c, err := client.New(cp.AdminConfig(), client.Options{Scheme: scheme})
	require.NoError(t, err)
	return c
}

// applyRendered applies every rendered object server-side: a dry run
// first, then for real.
func applyRendered(t *testing.T, c client.Client, vc valueCase, rendered string) {
	t.Helper()
	objs := objects(t, rendered)
	require.NotEmpty(t, objs)
	namespaces := map[string]bool{vc.namespace: true}
	for _, o := range objs {
		if ns := o.GetNamespace(); ns != "" {
			namespaces[ns] = true
		}
	}
	for ns := range namespaces {
		require.NoError(t, cp.EnsureNamespace(t.Context(), ns))
		// A cluster's controller manager creates each namespace's default
		// ServiceAccount, which Pods without one name; this control plane
		// runs none.
		_, err := cp.AdminClient().CoreV1().ServiceAccounts(ns).Create(t.Context(),
			&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			require.NoError(t, err)
		}
	}
	for _, dryRun := range []bool{true, false} {
		for _, o := range objs {
			obj := o.DeepCopy()
			opts := []client.PatchOption{client.FieldOwner("helm"), client.ForceOwnership}
			if dryRun {
				opts = append(opts, client.DryRunAll)
			}
			err := c.Patch(t.Context(), obj, client.Apply, opts...) //nolint:staticcheck // unstructured objects have no apply configuration
			if apierrors.IsNotFound(err) && dryRun {
				continue // a custom resource of a CRD that the dry run did not create
			}
			require.NoError(t, err, "apply %s %s/%s (dry run %v)", o.GetKind(), o.GetNamespace(), o.GetName(), dryRun)
		}
	}
}

// With the signals listener on, the chart adds TokenReview create (the
// sidecars' report tokens) and the signals Service's EndpointSlice, and
// serves the listener on TCP and UDP from a Service that keeps the
// callers' source addresses (the handshake caps count them).
func TestAgentChartGrantsTheSignalsListenerOnlyWhatItNeeds(t *testing.T) {
	var vc valueCase
	for _, c := range agentCases {
		if c.name == "signals" {
			vc = c
		}
	}
	rendered := render(t, agentChart, vc)
	objs := objects(t, rendered)
	roles := map[string][]rbacv1.PolicyRule{}
	for _, r := range ofKind(objs, "Role") {
		roles[r.GetNamespace()+"/"+r.GetName()] = rulesOf(t, r)
	}
	assert.Equal(t, rbac.SwimServiceRules(), roles["sig-system/sig-gridsync-agent-signals-service"])
	assert.Equal(t, rbac.EnrollmentTokenRules("grid-enrollment-tokens"), roles["sig-system/sig-gridsync-agent-enrollment-tokens"],
		"the issuer gets and patches its token Secret, by name, and nothing else of it")
	clusterRoles := map[string][]rbacv1.PolicyRule{}
	for _, r := range ofKind(objs, "ClusterRole") {
		clusterRoles[r.GetName()] = rulesOf(t, r)
	}
	assert.Equal(t, rbac.TokenReviewRules(), clusterRoles["sig-gridsync-agent-tokenreview"])

	var service *unstructured.Unstructured
	for _, svc := range ofKind(objs, "Service") {
		if svc.GetName() == "sig-gridsync-agent-signals" {
			service = svc
		}
	}
	require.NotNil(t, service)
	policy, _, _ := unstructured.NestedString(service.Object, "spec", "externalTrafficPolicy")
	assert.Equal(t, "Local", policy)
	ports, _, _ := unstructured.NestedSlice(service.Object, "spec", "ports")
	var protocols []string
	for _, p := range ports {
		protocols = append(protocols, p.(map[string]any)["protocol"].(string))
	}
	assert.ElementsMatch(t, []string{"TCP", "UDP"}, protocols, "HTTPS and HTTP/3 on one port")

	c := adminClient(t)
	applyRendered(t, c, vc, rendered)
	user := "system:serviceaccount:sig-system:sig-gridsync-agent"
	assertAccess(t, user, []access{
		{true, authorizationv1.ResourceAttributes{Verb: "create", Group: "authentication.k8s.io", Resource: "tokenreviews"}},
		{true, authorizationv1.ResourceAttributes{Verb: "patch", Namespace: "sig-system", Group: "discovery.k8s.io", Resource: "endpointslices"}},
		{false, authorizationv1.ResourceAttributes{Verb: "create", Group: "authorization.k8s.io", Resource: "subjectaccessreviews"}},
		{false, authorizationv1.ResourceAttributes{Verb: "create", Namespace: "sig-system", Resource: "serviceaccounts", Subresource: "token"}},
	})
}

// The agent chart's PrometheusRule (off by default) alerts on a site
// certificate near its expiry (6 hours by default, certificateExpiryHours;
// the earlier certificateExpiryDays wins when set) and on renewals refused
// or failing, and the API server takes it.
func TestAgentChartAlertsOnTheSiteCertificate(t *testing.T) {
	caseOf := func(rule map[string]any) valueCase {
		rule["enabled"], rule["labels"] = true, map[string]any{"release": "prometheus"}
		return valueCase{name: "alerts", release: "grid", namespace: "grid-alerts", values: map[string]any{
			"namespaces": []string{"gateways-alerts"},
			"metrics":    map[string]any{"prometheusRule": rule},
		}}
	}
	exprsOf := func(rendered string) (map[string]string, *unstructured.Unstructured) {
		rules := ofKind(objects(t, rendered), "PrometheusRule")
		require.Len(t, rules, 1)
		groups, _, _ := unstructured.NestedSlice(rules[0].Object, "spec", "groups")
		exprs := map[string]string{}
		for _, g := range groups {
			rs, _, _ := unstructured.NestedSlice(g.(map[string]any), "rules")
			for _, r := range rs {
				exprs[r.(map[string]any)["alert"].(string)] = r.(map[string]any)["expr"].(string)
			}
		}
		return exprs, rules[0]
	}
	vc := caseOf(map[string]any{})
	rendered := render(t, agentChart, vc)
	exprs, rule := exprsOf(rendered)
	assert.Equal(t, `grid_site_identity_expiry_timestamp_seconds{namespace="grid-alerts"} - time() < 6 * 3600`, exprs["GridSiteCertificateExpiringSoon"])
	assert.Equal(t, `increase(grid_site_identity_rotations_total{namespace="grid-alerts", result=~"refused|failed|expired"}[10m]) > 0`, exprs["GridSiteCertificateRenewalFailing"])
	assert.Equal(t, "prometheus", rule.GetLabels()["release"])
	for want, rule := range map[string]map[string]any{
		"12 * 3600":  {"certificateExpiryHours": 12},
		"336 * 3600": {"certificateExpiryDays": 14},
		"48 * 3600":  {"certificateExpiryDays": 2, "certificateExpiryHours": 12},
	} {
		exprs, _ := exprsOf(render(t, agentChart, caseOf(rule)))
		assert.Equal(t, `grid_site_identity_expiry_timestamp_seconds{namespace="grid-alerts"} - time() < `+want, exprs["GridSiteCertificateExpiringSoon"], "%v", rule)
	}
	installMonitoringCRDs(t)
	applyRendered(t, adminClient(t), vc, rendered)
	for _, o := range ofKind(objects(t, render(t, agentChart, agentCases[0])), "PrometheusRule") {
		t.Errorf("a PrometheusRule by default: %s", o.GetName())
	}
}

// The scraper account the chart creates may get /metrics and nothing
// else; the agent may create that account's tokens, by name, and no other
// account's; the agent is told the account. Off, none of it is rendered.
func TestAgentChartScraperMayGetMetricsOnly(t *testing.T) {
	vc := valueCase{name: "scraper", release: "scr", namespace: "scr-system", values: map[string]any{}}
	rendered := render(t, agentChart, vc)
	objs := objects(t, rendered)
	var scraperRole, tokenRole []rbacv1.PolicyRule
	for _, r := range ofKind(objs, "ClusterRole") {
		if r.GetName() == "scr-gridsync-agent-scraper" {
			scraperRole = rulesOf(t, r)
		}
	}
	for _, r := range ofKind(objs, "Role") {
		if r.GetName() == "scr-gridsync-agent-scraper-token" {
			tokenRole = rulesOf(t, r)
		}
	}
	assert.Equal(t, rbac.ScraperRules(), scraperRole)
	assert.Equal(t, rbac.ScraperTokenRules("scr-gridsync-agent-scraper"), tokenRole)
	assert.Contains(t, rendered, "--scraper-service-account=scr-gridsync-agent-scraper", "the name alone: the agent's own namespace")

	c := adminClient(t)
	applyRendered(t, c, vc, rendered)
	agent := "system:serviceaccount:scr-system:scr-gridsync-agent"
	scraper := "system:serviceaccount:scr-system:scr-gridsync-agent-scraper"
	assertAccess(t, agent, []access{
		{true, authorizationv1.ResourceAttributes{Verb: "create", Namespace: "scr-system", Resource: "serviceaccounts", Subresource: "token", Name: "scr-gridsync-agent-scraper"}},
		{false, authorizationv1.ResourceAttributes{Verb: "create", Namespace: "scr-system", Resource: "serviceaccounts", Subresource: "token", Name: "scr-gridsync-agent"}},
		{false, authorizationv1.ResourceAttributes{Verb: "get", Namespace: "scr-system", Resource: "serviceaccounts", Name: "scr-gridsync-agent-scraper"}},
	})
	assertAccess(t, scraper, []access{
		{false, authorizationv1.ResourceAttributes{Verb: "get", Namespace: "scr-system", Resource: "secrets"}},
		{false, authorizationv1.ResourceAttributes{Verb: "list", Resource: "pods"}},
		{false, authorizationv1.ResourceAttributes{Verb: "get", Group: "grid.praxis.fast", Resource: "inferenceproviders"}},
	})
	for _, c := range []struct {
		path, verb string
		allowed    bool
	}{{"/metrics", "get", true}, {"/metrics", "post", false}, {"/debug/pprof/", "get", false}, {"/logs", "get", false}} {
		sar, err := cp.AdminClient().AuthorizationV1().SubjectAccessReviews().Create(t.Context(), &authorizationv1.SubjectAccessReview{
			Spec: authorizationv1.SubjectAccessReviewSpec{User: scraper, Groups: []string{"system:serviceaccounts", "system:serviceaccounts:scr-system", "system:authenticated"},
				NonResourceAttributes: &authorizationv1.NonResourceAttributes{Path: c.path, Verb: c.verb}},
		}, metav1.CreateOptions{})
		require.NoError(t, err)
		assert.Equal(t, c.allowed, sar.Status.Allowed, "the scraper may %s %s", c.verb, c.path)
	}

	off := render(t, agentChart, valueCase{name: "no-scraper", release: "scr", namespace: "scr-system",
		values: map[string]any{"probes": map[string]any{"scraper": map[string]any{"enabled": false}}}})
	assert.NotContains(t, off, "scraper")
}

// The reference grants get, create and patch on Secrets: delete and update
// are not granted. No values of the chart grant either on any Secret, the
// issuer's enrolment token Secret included (a token is spent by a patch
// on the version read).
func TestAgentChartGrantsNoUpdateOrDeleteOnSecrets(t *testing.T) {
	for _, vc := range agentCases {
		t.Run(vc.name, func(t *testing.T) {
			objs := objects(t, render(t, agentChart, vc))
			for _, kind := range []string{"Role", "ClusterRole"} {
				for _, r := range ofKind(objs, kind) {
					for _, rule := range rulesOf(t, r) {
						if !slices.Contains(rule.APIGroups, "") || !slices.ContainsFunc(rule.Resources, func(res string) bool { return res == "secrets" || res == "*" }) {
							continue
						}
						for _, verb := range []string{"update", "delete", "*"} {
							assert.NotContains(t, rule.Verbs, verb, "%s %s grants %s on Secrets", kind, r.GetName(), verb)
						}
					}
				}
			}
		})
	}
}
