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
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gridsync/gridsync/api/v1alpha1"
	"github.com/gridsync/gridsync/controller"
	membership "github.com/gridsync/gridsync/gossip"
	"github.com/gridsync/gridsync/test/controlplane"
	"github.com/gridsync/gridsync/test/framework"
	"github.com/gridsync/gridsync/test/testbin"
	"github.com/gridsync/gridsync/test/testproc"
)

// Four clusters: three sites and one that plays an intruder or a site
// holding a retired key.
var clusters [4]*controlplane.ControlPlane

func TestMain(m *testing.M) {
	framework.Main(m, framework.ControlPlanes(&clusters[0], &clusters[1], &clusters[2], &clusters[3]),
		framework.Binaries(testbin.Agent, testbin.Sidecar))
}

// site is one cluster's corner for a test (framework.Site): namespaces,
// the agent's ServiceAccount with exactly the chart's RBAC, an admin
// client, a SWIM address.
type site struct {
	*framework.Site
	t       *testing.T
	gateway string
	// gatewayService, when set, is read for the gateway address instead.
	gatewayService string
}

func newSite(t *testing.T, cp *controlplane.ControlPlane, name string) *site {
	t.Helper()
	return &site{
		Site: framework.NewSite(t, cp, framework.SiteOptions{Prefix: "grid", Name: name, Swim: true}),
		t:    t,
		// Advertised, never dialled here.
		gateway: testproc.FreeAddr(t),
	}
}

// agent is a gridsync-agent process of a site.
type agent struct {
	*framework.Agent
	site *site
}

// start starts the site's agent with the fast timings, so that a
// departure is seen in seconds, its gateway as given or read from the
// gateway Service. Every site's gateway and signals listen on loopback.
func (s *site) start(env []string, extra ...string) *agent {
	s.t.Helper()
	var gateway []string
	if s.gatewayService != "" {
		gateway = []string{"--gateway-service-name", s.gatewayService, "--gateway-service-namespace", s.Namespace(), "--gateway-discovery-interval", "200ms"}
	} else {
		gateway = []string{"--gateway-address", s.gateway}
	}
	return &agent{site: s, Agent: s.StartAgent(s.t, framework.AgentOptions{
		Timings: framework.Fast, Loopback: true, Env: env, Args: append(gateway, extra...)})}
}

type swimStatus struct {
	Leader bool              `json:"leader"`
	Swim   membership.Status `json:"swim"`
}

func (a *agent) status() swimStatus {
	code, body := testproc.Get(a.site.t, "http://"+a.Health+"/status")
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
	_, body := testproc.Get(a.site.t, "http://"+a.Health+"/metrics")
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
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: s.Namespace()}}
	ctx := context.Background()
	err := s.Admin.Get(ctx, client.ObjectKeyFromObject(sec), sec)
	sec.Data = data
	if err != nil {
		require.NoError(s.t, s.Admin.Create(ctx, sec))
		return
	}
	require.NoError(s.t, s.Admin.Update(ctx, sec))
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
			ConsumerGateways: []v1alpha1.ConsumerGateway{{Name: "edge", Namespace: s.Namespace(), SiteName: s.Name}},
			TLS: &v1alpha1.GridTLS{
				SwimKeySecretRef: &v1alpha1.NamespacedKeyRef{Name: "swim-key", Namespace: s.Namespace()},
				SiteSecretRef:    &v1alpha1.NamespacedName{Name: "site-cert", Namespace: s.Namespace()},
			},
		},
	}
	require.NoError(s.t, s.Admin.Create(context.Background(), n))
	s.t.Cleanup(func() { s.remove(n) })
	return n
}

func (s *site) remove(obj client.Object) {
	ctx := context.Background()
	_ = s.Admin.Patch(ctx, obj, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`)))
	_ = s.Admin.Delete(ctx, obj)
}

func (s *site) provider(name, network string, models ...string) *v1alpha1.InferenceProvider {
	s.t.Helper()
	p := &v1alpha1.InferenceProvider{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1alpha1.InferenceProviderSpec{GridNetworkRef: network, ProviderKind: "vllm", BackendKind: "openai_compatible",
			Endpoint: "https://" + name + ".invalid", ClusterName: s.Name},
	}
	for _, m := range models {
		p.Spec.Models = append(p.Spec.Models, v1alpha1.Model{Name: m})
	}
	require.NoError(s.t, s.Admin.Create(context.Background(), p))
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
		err := s.Admin.Get(context.Background(), types.NamespacedName{Name: name}, &n)
		if err == nil && ok(&n) {
			return &n
		}
		if now := fmt.Sprintf("%s networkSites=%d connected=%d remote=%d", n.Status.Phase, n.Status.NetworkSites, n.Status.ConnectedSites, n.Status.RemoteProviderCount); now != last {
			s.t.Logf("%s: network %s is %s", s.Name, name, now)
			last = now
		}
		if time.Now().After(deadline) {
			b, _ := json.Marshal(n.Status)
			s.t.Fatalf("%s: network %s never got there; status: %s", s.Name, name, b)
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
