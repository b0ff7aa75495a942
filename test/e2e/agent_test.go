package e2e

import (
	"context"
	"encoding/json"
	"net"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gridsync/gridsync/api/v1alpha1"
	"github.com/gridsync/gridsync/shared/envelope"
	"github.com/gridsync/gridsync/test/controlplane"
	"github.com/gridsync/gridsync/test/framework"
	"github.com/gridsync/gridsync/test/testbin"
)

// newAgentSetup prepares what the agent's chart would (framework.Site).
// Its agent runs with the agent's defaults, as a pod runs it: these tests
// hold the binary as shipped, not a site's fast timings.
func newAgentSetup(t *testing.T) *framework.Site {
	t.Helper()
	return framework.NewSite(t, cp, framework.SiteOptions{Prefix: "e2e"})
}

// leads reports what the agent's /status says of its leadership.
func leads(t *testing.T, addr string) bool {
	_, body := get(t, "http://"+addr+"/status")
	var st struct {
		Leader bool `json:"leader"`
	}
	return json.Unmarshal([]byte(body), &st) == nil && st.Leader
}

func TestAgentPublishesAndServesProbesStatusAndMetrics(t *testing.T) {
	s := newAgentSetup(t)
	agent := s.StartAgent(t, framework.AgentOptions{})
	addr := agent.Health
	code, _ := get(t, "http://"+addr+"/livez")
	assert.Equal(t, 200, code)
	require.Eventually(t, func() bool { return leads(t, addr) }, 20*time.Second, 20*time.Millisecond, "the only replica leads")

	ctx := context.Background()
	network := &v1alpha1.GridNetwork{
		ObjectMeta: metav1.ObjectMeta{Name: "e2e-net-" + s.Namespace()},
		Spec:       v1alpha1.GridNetworkSpec{ConsumerGateways: []v1alpha1.ConsumerGateway{{Name: "edge", Namespace: s.Namespace()}}},
	}
	require.NoError(t, s.Admin.Create(ctx, network))
	t.Cleanup(func() { _ = s.Admin.Delete(context.Background(), network) })
	provider := &v1alpha1.InferenceProvider{
		ObjectMeta: metav1.ObjectMeta{Name: "e2e-provider-" + s.Namespace()},
		Spec: v1alpha1.InferenceProviderSpec{
			GridNetworkRef: network.Name,
			ProviderKind:   "vllm", BackendKind: "openai_compatible", Endpoint: "https://p.example",
			Models: []v1alpha1.Model{{Name: "m"}},
		},
	}
	require.NoError(t, s.Admin.Create(ctx, provider))
	t.Cleanup(func() { _ = s.Admin.Delete(context.Background(), provider) })
	name := envelope.ConfigMapName(network.Name, "edge")
	require.Eventually(t, func() bool {
		_, err := cp.AdminClient().CoreV1().ConfigMaps(s.Namespace()).Get(ctx, name, metav1.GetOptions{})
		return err == nil
	}, 20*time.Second, 20*time.Millisecond)

	// The counter moves just after the write the ConfigMap shows: wait for it.
	var metrics string
	require.Eventually(t, func() bool {
		var code int
		code, metrics = get(t, "http://"+addr+"/metrics")
		return code == 200 && strings.Contains(metrics, `gridsync_controller_overlay_publishes_total{outcome="applied"}`) &&
			!strings.Contains(metrics, `gridsync_controller_overlay_publishes_total{outcome="applied"} 0`)
	}, 10*time.Second, 20*time.Millisecond, "the applied publication is counted")
	for _, want := range []string{
		`gridsync_build_info{binary="gridsync-agent"`,
		`gridsync_controller_overlay_publishes_total{outcome="applied"}`,
		`gridsync_controller_render_duration_seconds_count`,
		`grid_sites{phase="Active"} 0`,
		`controller_runtime_reconcile_total{controller="gridnetwork",result="success"}`,
		`leader_election_master_status`,
		`go_goroutines`,
		`process_resident_memory_bytes`,
	} {
		assert.True(t, strings.Contains(metrics, want), "/metrics lacks %s", want)
	}
	for _, line := range strings.Split(strings.TrimSpace(agent.Log()), "\n") {
		assert.True(t, json.Valid([]byte(line)), "not a JSON log line: %s", line)
	}
}

func TestAgentShutsDownCleanlyOnSIGTERMAndHandsOverTheLease(t *testing.T) {
	s := newAgentSetup(t)
	agent := s.StartAgent(t, framework.AgentOptions{})
	addr := agent.Health
	require.Eventually(t, func() bool { return leads(t, addr) }, 20*time.Second, 20*time.Millisecond)

	require.NoError(t, agent.Cmd.Process.Signal(syscall.SIGTERM))
	began := time.Now()
	assert.Equal(t, 0, agent.Wait(t, 10*time.Second))
	assert.Less(t, time.Since(began), 6*time.Second)
	assert.Contains(t, agent.Log(), `"msg":"shutdown"`)
	lease, err := cp.AdminClient().CoordinationV1().Leases(s.AgentNS).Get(context.Background(), "gridsync-agent", metav1.GetOptions{})
	require.NoError(t, err)
	holder := ""
	if lease.Spec.HolderIdentity != nil {
		holder = *lease.Spec.HolderIdentity
	}
	assert.Empty(t, holder, "a stopping leader releases the Lease, so a standby takes over at once")
}

// An agent stopped while its API server has been unreachable since it
// started (its caches never synced, so it never led) exits, cleanly and
// soon: controller-runtime's manager alone would spin on the stop for good.
func TestAgentStopsOnSIGTERMWhileItsAPIServerIsUnreachable(t *testing.T) {
	s := newAgentSetup(t)
	proxy, err := cp.NewProxy()
	require.NoError(t, err)
	t.Cleanup(func() { _ = proxy.Close() })
	proxy.Cut()
	s.Kubeconfig = filepath.Join(t.TempDir(), "kubeconfig-through-proxy")
	require.NoError(t, controlplane.WriteKubeconfig(proxy.Config(s.Config), s.Kubeconfig))
	health := freeAddr(t)
	agent := start(t, testbin.Agent, nil, s.AgentArgs(health, framework.AgentOptions{})...)
	waitOK(t, "http://"+health+"/livez")
	// The manager is past its start and waits for the first list, which
	// fails at once and is retried.
	time.Sleep(time.Second)
	code, body := get(t, "http://"+health+"/readyz")
	require.NotEqual(t, 200, code, body)

	require.NoError(t, agent.Cmd.Process.Signal(syscall.SIGTERM))
	began := time.Now()
	assert.Equal(t, 0, agent.Wait(t, 20*time.Second))
	assert.Less(t, time.Since(began), 10*time.Second)
	assert.Contains(t, agent.Log(), `"msg":"shutdown"`)
}

func TestAgentRejectsBadFlagsNamingTheFlag(t *testing.T) {
	tests := []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--namespaces", "Not_A_Namespace"}, 2, "--namespaces"},
		{[]string{"--lease-duration", "1s"}, 2, "--lease-duration"},
		{[]string{"--log-level", "loud"}, 2, "--log-level"},
		{[]string{"--kube-api-qps", "0"}, 2, "--kube-api-qps"},
		{[]string{"--no-such-flag"}, 2, "no-such-flag"},
	}
	for _, tt := range tests {
		agent := start(t, testbin.Agent, nil, tt.args...)
		assert.Equal(t, tt.code, agent.Wait(t, 10*time.Second), "%v", tt.args)
		assert.Contains(t, agent.Log(), tt.want)
	}
	taken, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer func() { _ = taken.Close() }()
	agent := start(t, testbin.Agent, nil, "--health-addr", taken.Addr().String())
	assert.Equal(t, 1, agent.Wait(t, 10*time.Second))
	assert.Contains(t, agent.Log(), "health")
}
