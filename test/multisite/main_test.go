// Package multisite runs several sites, each a gridsync-agent process with
// its own kube-apiserver and etcd, that find each other over real SWIM
// gossip on loopback: the reference's three-site mesh, encryption and key
// rotation, leader failover and kill -9.
package multisite

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gridsync/gridsync/api/v1alpha1"
	crds "github.com/gridsync/gridsync/charts/gridsync-agent/files/crds"
	"github.com/gridsync/gridsync/controller"
	membership "github.com/gridsync/gridsync/gossip"
	"github.com/gridsync/gridsync/test/controlplane"
	"github.com/gridsync/gridsync/test/testbin"
	"github.com/gridsync/gridsync/test/testnet"
	"github.com/gridsync/gridsync/test/testproc"
)

// Four clusters: three sites and one that plays an intruder or a site
// holding a retired key.
var (
	clusters   [4]*controlplane.ControlPlane
	agentBin   string
	sidecarBin string
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	dir, err := testbin.Dir(context.Background(), testbin.Agent, testbin.Sidecar)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	agentBin = filepath.Join(dir, "gridsync-agent")
	sidecarBin = filepath.Join(dir, "gridsync-sidecar")
	return controlplane.RunTestsN(m, &clusters[0], &clusters[1], &clusters[2], &clusters[3])
}

var seq atomic.Int32

// site is one cluster's corner for a test: namespaces, the agent's
// ServiceAccount with exactly the chart's RBAC, an admin client.
type site struct {
	t          *testing.T
	name       string
	cp         *controlplane.ControlPlane
	admin      client.Client
	agentNS    string
	resNS      string
	kubeconfig string
	swimAddr   string
	gateway    string
	// gatewayService, when set, is read for the gateway address instead.
	gatewayService string
}

func newSite(t *testing.T, cp *controlplane.ControlPlane, name string) *site {
	t.Helper()
	ctx := context.Background()
	n := seq.Add(1)
	s := &site{t: t, name: name, cp: cp, agentNS: fmt.Sprintf("grid-system-%d", n), resNS: fmt.Sprintf("grid-%d", n)}
	require.NoError(t, cp.InstallCRDsFS(ctx, crds.Manifests))
	require.NoError(t, cp.EnsureNamespace(ctx, s.resNS))
	cfg, err := cp.AgentConfig(ctx, s.agentNS, []string{s.resNS})
	require.NoError(t, err)
	s.kubeconfig = filepath.Join(t.TempDir(), "kubeconfig")
	require.NoError(t, controlplane.WriteKubeconfig(cfg, s.kubeconfig))
	scheme, err := controller.Scheme()
	require.NoError(t, err)
	s.admin, err = client.New(cp.AdminConfig(), client.Options{Scheme: scheme})
	require.NoError(t, err)
	s.swimAddr = testnet.FreeTCPUDPAddr(t)
	s.gateway = testproc.FreeAddr(t) // advertised, never dialled here
	return s
}

// agent is a gridsync-agent process of a site.
type agent struct {
	*testproc.Proc
	site   *site
	health string
}

// Timings a fifth of the reference's, so that a departure is seen in
// seconds: probe 1 s, 600 ms for a direct answer, suspect three probe
// periods.
func (s *site) start(env []string, extra ...string) *agent {
	s.t.Helper()
	health := testproc.FreeAddr(s.t)
	args := append([]string{
		"--kubeconfig", s.kubeconfig, "--namespaces", s.resNS, "--leader-election-namespace", s.agentNS,
		"--health-addr", health, "--site-name", s.name, "--swim-bind-addr", s.swimAddr,
		"--swim-probe-interval", "1s", "--swim-probe-timeout", "600ms", "--swim-push-pull-interval", "2s",
		"--swim-key-poll-interval", "1s", "--resync-period", "10s",
		"--lease-duration", "4s", "--renew-deadline", "3s", "--retry-period", "1s",
		// Every site's gateway and signals listen on loopback, which
		// the agent's probes and polls never dial unless a CIDR allows it.
		"--probe-allow-destinations", "127.0.0.0/8",
	}, extra...)
	if s.gatewayService != "" {
		args = append(args, "--gateway-service-name", s.gatewayService, "--gateway-service-namespace", s.resNS, "--gateway-discovery-interval", "200ms")
	} else {
		args = append(args, "--gateway-address", s.gateway)
	}
	a := &agent{Proc: testproc.Start(s.t, agentBin, env, args...), site: s, health: health}
	testproc.WaitOK(s.t, "http://"+health+"/readyz")
	return a
}

type swimStatus struct {
	Leader bool              `json:"leader"`
	Swim   membership.Status `json:"swim"`
}

func (a *agent) status() swimStatus {
	code, body := testproc.Get(a.site.t, "http://"+a.health+"/status")
	var st swimStatus
	if code == 200 {
		_ = json.Unmarshal([]byte(body), &st)
	}
	return st
}

// member is what the agent's /status says of a remote site.
func (a *agent) member(site string) (membership.MemberStatus, bool) {
	for _, m := range a.status().Swim.Members {
		if m.Site == site {
			return m, true
		}
	}
	return membership.MemberStatus{}, false
}

// metric reads one sample of the agent's /metrics.
func (a *agent) metric(series string) float64 {
	_, body := testproc.Get(a.site.t, "http://"+a.health+"/metrics")
	for _, line := range strings.Split(body, "\n") {
		if strings.HasPrefix(line, series+" ") {
			v, _ := strconv.ParseFloat(strings.TrimPrefix(line, series+" "), 64)
			return v
		}
	}
	return -1
}

func (s *site) secret(name string, data map[string][]byte) {
	s.t.Helper()
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: s.resNS}}
	ctx := context.Background()
	err := s.admin.Get(ctx, client.ObjectKeyFromObject(sec), sec)
	sec.Data = data
	if err != nil {
		require.NoError(s.t, s.admin.Create(ctx, sec))
		return
	}
	require.NoError(s.t, s.admin.Update(ctx, sec))
}

// network creates a GridNetwork on the site with its SWIM key and site
// certificate Secrets, asking for GridSites of discovered sites. It is
// removed (finalizer and all) when the test ends.
func (s *site) network(name string, seeds ...string) *v1alpha1.GridNetwork {
	s.t.Helper()
	n := &v1alpha1.GridNetwork{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{controller.AutoDiscoverSitesLabel: "true"}},
		Spec: v1alpha1.GridNetworkSpec{
			Seeds:            seeds,
			ConsumerGateways: []v1alpha1.ConsumerGateway{{Name: "edge", Namespace: s.resNS, SiteName: s.name}},
			TLS: &v1alpha1.GridTLS{
				SwimKeySecretRef: &v1alpha1.NamespacedKeyRef{Name: "swim-key", Namespace: s.resNS},
				SiteSecretRef:    &v1alpha1.NamespacedName{Name: "site-cert", Namespace: s.resNS},
			},
		},
	}
	require.NoError(s.t, s.admin.Create(context.Background(), n))
	s.t.Cleanup(func() { s.remove(n) })
	return n
}

func (s *site) remove(obj client.Object) {
	ctx := context.Background()
	_ = s.admin.Patch(ctx, obj, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`)))
	_ = s.admin.Delete(ctx, obj)
}

func (s *site) provider(name, network string, models ...string) *v1alpha1.InferenceProvider {
	s.t.Helper()
	p := &v1alpha1.InferenceProvider{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1alpha1.InferenceProviderSpec{GridNetworkRef: network, ProviderKind: "vllm", BackendKind: "openai_compatible",
			Endpoint: "https://" + name + ".invalid", ClusterName: s.name},
	}
	for _, m := range models {
		p.Spec.Models = append(p.Spec.Models, v1alpha1.Model{Name: m})
	}
	require.NoError(s.t, s.admin.Create(context.Background(), p))
	s.t.Cleanup(func() { s.remove(p) })
	return p
}

// networkStatus waits up to timeout for the site's network status to
// satisfy ok.
func (s *site) networkStatus(name string, timeout time.Duration, ok func(*v1alpha1.GridNetwork) bool) *v1alpha1.GridNetwork {
	s.t.Helper()
	var n v1alpha1.GridNetwork
	deadline := time.Now().Add(timeout)
	last := ""
	for {
		err := s.admin.Get(context.Background(), types.NamespacedName{Name: name}, &n)
		if err == nil && ok(&n) {
			return &n
		}
		if now := fmt.Sprintf("%s networkSites=%d connected=%d remote=%d", n.Status.Phase, n.Status.NetworkSites, n.Status.ConnectedSites, n.Status.RemoteProviderCount); now != last {
			s.t.Logf("%s: network %s is %s", s.name, name, now)
			last = now
		}
		if time.Now().After(deadline) {
			b, _ := json.Marshal(n.Status)
			s.t.Fatalf("%s: network %s never got there; status: %s", s.name, name, b)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// counts is a network's phase, its alive sites (networkSites: those that
// announced it) and their provider records.
func counts(phase v1alpha1.NetworkPhase, sites, remote int32) func(*v1alpha1.GridNetwork) bool {
	return func(n *v1alpha1.GridNetwork) bool {
		return n.Status.Phase == phase && n.Status.NetworkSites == sites && n.Status.RemoteProviderCount == remote
	}
}

func hexKey(k []byte) string { return hex.EncodeToString(k) }
