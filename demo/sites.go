package main

import (
	"context"
	"crypto/rand"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gridsync/gridsync/api/v1alpha1"
	"github.com/gridsync/gridsync/controller"
	"github.com/gridsync/gridsync/controller/rbac"
	"github.com/gridsync/gridsync/test/controlplane"
	"github.com/gridsync/gridsync/test/framework"
	"github.com/gridsync/gridsync/test/testgateway"
	"github.com/gridsync/gridsync/test/testgrid"
	"github.com/gridsync/gridsync/trust/enrol"
)

// siteAgent is a demo site's gridsync-agent process.
type siteAgent struct {
	cmd              *exec.Cmd
	health, swimAddr string
}

// startSiteAgent prepares cp as the agent's chart does (CRDs again: it
// is idempotent; its least-privilege RBAC) and starts gridsync-agent as
// the given site, SWIM on loopback with the tests' fast timings
// (framework.Fast: a fifth of the reference's) so that a departure shows
// in seconds. The demo's sites all live on loopback, which site probes
// (as health probes) never dial unless a CIDR allows it.
func startSiteAgent(ctx context.Context, cp *controlplane.ControlPlane, work, binDir, site, gateway string, extra ...string) (*siteAgent, error) {
	s := demoSite(cp, work, site)
	if err := s.Setup(ctx); err != nil {
		return nil, err
	}
	// The chart's trust.secrets: the grid CA and site certificate Secrets,
	// by name.
	if err := cp.AgentTrustSecrets(ctx, agentNamespace, agentNamespace, "grid-ca", "grid-site-cert"); err != nil {
		return nil, err
	}
	a := &siteAgent{}
	var err error
	if a.health, err = freeAddr(); err != nil {
		return nil, err
	}
	if s.SwimAddr, err = freeAddr(); err != nil {
		return nil, err
	}
	a.swimAddr = s.SwimAddr
	args := s.AgentArgs(a.health, framework.AgentOptions{Timings: framework.Fast, Loopback: true,
		Args: append([]string{"--gateway-address", gateway}, extra...)})
	if a.cmd, err = startBinary(ctx, filepath.Join(binDir, "gridsync-agent"), filepath.Join(work, site+"-agent.log"), args...); err != nil {
		return nil, err
	}
	return a, waitHTTP(ctx, "http://"+a.health+"/readyz")
}

// newSwimKey is a fresh 32-byte SWIM key.
func newSwimKey() []byte {
	k := make([]byte, 32)
	if _, err := rand.Read(k); err != nil {
		panic(err)
	}
	return k
}

// demoGateway is the gateway address east advertises: only gossiped and
// shown, never dialled (west's is a gateway on loopback, probed).
func demoGateway(site string) string { return site + ".gateways.demo.invalid:8443" }

// demoNetwork is the demo's GridNetwork, the same at both sites: its SWIM
// key Secret, the grid CA and site certificate Secrets, and a GridSite for
// each discovered site.
func demoNetwork(seeds ...string) *v1alpha1.GridNetwork {
	return &v1alpha1.GridNetwork{
		ObjectMeta: metav1.ObjectMeta{Name: scope.Network, Labels: map[string]string{controller.AutoDiscoverSitesLabel: "true"}},
		Spec: v1alpha1.GridNetworkSpec{
			Seeds: seeds,
			ConsumerGateways: []v1alpha1.ConsumerGateway{
				{Name: scope.Gateway, Namespace: scope.Namespace, SiteName: scope.LocalSite},
			},
			TLS: &v1alpha1.GridTLS{
				SwimKeySecretRef: &v1alpha1.NamespacedKeyRef{Name: "grid-swim-key", Namespace: agentNamespace},
				CASecretRef:      &v1alpha1.NamespacedName{Name: "grid-ca", Namespace: agentNamespace},
				SiteSecretRef:    &v1alpha1.NamespacedName{Name: "grid-site-cert", Namespace: agentNamespace},
			},
		},
	}
}

// demoSite is a site of the demo on cp: the agent in agentNamespace,
// watching it and the gateway's namespace.
func demoSite(cp *controlplane.ControlPlane, work, site string) *framework.Site {
	return &framework.Site{CP: cp, Name: site, AgentNS: agentNamespace, Namespaces: []string{scope.Namespace, agentNamespace},
		Kubeconfig: filepath.Join(work, site+".kubeconfig")}
}

// secondSite starts another site (its own kube-apiserver, etcd and
// gridsync-agent), lets it join the first one over encrypted SWIM, shows
// what each reports, then kills it and shows the first one notice.
func secondSite(ctx context.Context, eastCP *controlplane.ControlPlane, east client.Client, issuer string, key []byte, eastSwim, eastHealth, output, work, binDir string) (stop func(), err error) {
	stop = func() {}
	step("a second site, west-edge: its own kube-apiserver, etcd and gridsync-agent, seeding the first over SWIM")
	began := time.Now()
	cp, err := controlplane.Start(ctx)
	if err != nil {
		return stop, err
	}
	stop = func() { _ = cp.Stop() }
	// The CRDs and namespaces first, for west's Grid objects and Secrets;
	// startSiteAgent prepares the site again, which changes nothing.
	if err := demoSite(cp, work, "west-edge").Setup(ctx); err != nil {
		return stop, err
	}
	west, err := framework.AdminClient(cp)
	if err != nil {
		return stop, err
	}
	network := demoNetwork(eastSwim)
	network.Spec.ConsumerGateways[0].SiteName = "west-edge"
	var eastCA corev1.Secret
	if err := east.Get(ctx, types.NamespacedName{Namespace: agentNamespace, Name: "grid-ca"}, &eastCA); err != nil {
		return stop, fmt.Errorf("east generated no grid CA: %w", err)
	}
	// West holds the grid CA's certificate only, and enrols with east, the
	// issuer, for its own certificate: the CA's key stays at east.
	token, err := enrollToken(ctx, eastCP, work, binDir, "west-edge")
	if err != nil {
		return stop, err
	}
	network.Spec.TLS.CASecretRef = nil
	network.Spec.TLS.CAConfigMapRef = &v1alpha1.NamespacedKeyRef{Name: "grid-ca", Namespace: agentNamespace, Key: "ca.crt"}
	network.Spec.TLS.SiteCertificate = &v1alpha1.SiteCertificate{Mode: v1alpha1.SiteCertificateEnrolled,
		Issuer:                   &v1alpha1.EnrollmentIssuer{Address: issuer, Site: scope.LocalSite},
		EnrollmentTokenSecretRef: &v1alpha1.NamespacedKeyRef{Name: "grid-enroll-token", Namespace: agentNamespace}}
	objects := []client.Object{
		// The same SWIM key at both sites, the CA's certificate and the
		// token: the agent never copies Secrets between clusters; platform
		// tooling does.
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "grid-swim-key", Namespace: agentNamespace}, Data: map[string][]byte{"key": key}},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "grid-ca", Namespace: agentNamespace}, Data: map[string]string{"ca.crt": string(eastCA.Data["ca.crt"])}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "grid-enroll-token", Namespace: agentNamespace}, Data: map[string][]byte{"token": []byte(token)}},
		network,
		withModels(demoProvider("west-gpu-pool", "sim-west-2", nil), "llama-3-70b", "qwen-2-72b"),
	}
	for _, obj := range objects {
		if err := west.Create(ctx, obj); err != nil {
			return stop, err
		}
	}
	// West's gateway, on loopback: mutual TLS with the certificate west's
	// agent issues.
	gateway, err := testgateway.Start("127.0.0.1:0")
	if err != nil {
		return stop, err
	}
	stopCP := stop
	stop = func() { gateway.Close(); stopCP() }
	agent, err := startSiteAgent(ctx, cp, work, binDir, "west-edge", gateway.Addr)
	if agent != nil {
		stopGateway := stop
		stop = func() {
			_ = agent.cmd.Process.Kill()
			_ = agent.cmd.Wait()
			stopGateway()
		}
	}
	if err != nil {
		return stop, err
	}

	got, err := waitNetwork(ctx, east, func(n *v1alpha1.GridNetwork) bool {
		return n.Status.Phase == v1alpha1.NetworkActive && n.Status.NetworkSites == 1 && n.Status.RemoteProviderCount == 1
	})
	if err != nil {
		return stop, fmt.Errorf("east never saw west: %w", err)
	}
	fmt.Printf("    second site up and joined %s after it started (its control plane included)\n", time.Since(began).Round(time.Millisecond))
	showNetwork("east-edge", got)
	if got, err = waitNetwork(ctx, west, func(n *v1alpha1.GridNetwork) bool {
		return n.Status.Phase == v1alpha1.NetworkActive && n.Status.RemoteProviderCount == 2
	}); err != nil {
		return stop, fmt.Errorf("west never saw east: %w", err)
	}
	showNetwork("west-edge", got)
	if c := meta.FindStatusCondition(got.Status.Conditions, controller.ConditionSiteIdentity); c != nil {
		fmt.Printf("    west's SiteIdentity: %s\n", c.Message)
	}
	var westSecrets corev1.SecretList
	if err := west.List(ctx, &westSecrets); err != nil {
		return stop, err
	}
	caKeyAtWest := false
	for _, sec := range westSecrets.Items {
		for _, v := range sec.Data {
			caKeyAtWest = caKeyAtWest || len(eastCA.Data["tls.key"]) > 0 && string(v) == string(eastCA.Data["tls.key"])
		}
	}
	fmt.Printf("    the grid CA's key in west's cluster: %v; every record west gossips is signed with its own certificate\n", caKeyAtWest)
	var site v1alpha1.GridSite
	if err := waitFor(ctx, func() bool {
		return east.Get(ctx, types.NamespacedName{Name: scope.Network + "-west-edge"}, &site) == nil && site.Status.Phase == "Connecting"
	}); err != nil {
		return stop, fmt.Errorf("no GridSite for west-edge at east: %w", err)
	}
	fmt.Printf("    east's GridSite %s: phase %s (%s), gateway %s\n", site.Name, site.Status.Phase, site.Status.Reason, site.Spec.GatewayEndpoint.Address)
	if res, ok := fileResult(output); ok {
		fmt.Printf("    east's gateway still holds %d candidates, all its own: gossip alone never makes a site routable\n", res.CandidateCount)
	}
	if err := trustWest(ctx, east, west, gateway, &site, output); err != nil {
		return stop, err
	}
	for _, line := range metricLines("http://"+eastHealth+"/metrics", "grid_swim_encrypted ", "grid_swim_keys_installed ", `grid_swim_sites{state="Alive"}`, `grid_swim_packets_rejected_total{reason="unknown_key"}`) {
		fmt.Println("    east " + line)
	}
	if err := generateConsumerConfig(ctx, east, gateway.Addr); err != nil {
		return stop, err
	}

	step("kill -9 of west's agent: east suspects it, then declares it dead, and the network turns Degraded")
	killed := time.Now()
	_ = agent.cmd.Process.Signal(syscall.SIGKILL)
	_ = agent.cmd.Wait()
	var seen []string
	if err := waitFor(ctx, func() bool {
		state := memberState("http://"+eastHealth+"/status", "west-edge")
		if len(seen) == 0 || !strings.HasPrefix(seen[len(seen)-1], state) {
			seen = append(seen, fmt.Sprintf("%s at %.1f s", state, time.Since(killed).Seconds()))
		}
		return state == "Dead"
	}); err != nil {
		return stop, err
	}
	fmt.Printf("    east sees west-edge: %s (probe every 1 s here, a suspect kept 3 probe periods)\n", strings.Join(seen, ", "))
	if got, err = waitNetwork(ctx, east, func(n *v1alpha1.GridNetwork) bool {
		return n.Status.Phase == v1alpha1.NetworkDegraded
	}); err != nil {
		return stop, err
	}
	fmt.Println("    its provider records are kept, stale, until the stale TTL; its GridSite stays as evidence")
	showNetwork("east-edge", got)
	if err := waitFor(ctx, func() bool { return len(siteCandidates(output, "west-edge", false)) > 0 }); err != nil {
		return stop, err
	}
	fmt.Printf("    east's gateway keeps west-edge's routes, marked not fresh: %s\n", strings.Join(siteCandidates(output, "west-edge", false), ", "))
	return stop, evictWest(ctx, east, work, binDir, output)
}

func withModels(p *v1alpha1.InferenceProvider, models ...string) *v1alpha1.InferenceProvider {
	for _, m := range models {
		p.Spec.Models = append(p.Spec.Models, v1alpha1.Model{Name: m})
	}
	return p
}

func showNetwork(site string, n *v1alpha1.GridNetwork) {
	msg := ""
	if c := meta.FindStatusCondition(n.Status.Conditions, controller.ConditionMembership); c != nil {
		msg = c.Reason + ": " + c.Message
	}
	fmt.Printf("    %-9s GridNetwork %s: phase %s, grid %s, connectedSites %d, networkSites %d, remoteProviderCount %d (%s)\n",
		site, n.Name, n.Status.Phase, short(n.Status.GridID), n.Status.ConnectedSites, n.Status.NetworkSites, n.Status.RemoteProviderCount, msg)
}

func waitNetwork(ctx context.Context, c client.Client, ok func(*v1alpha1.GridNetwork) bool) (*v1alpha1.GridNetwork, error) {
	var n v1alpha1.GridNetwork
	err := waitFor(ctx, func() bool {
		return c.Get(ctx, types.NamespacedName{Name: scope.Network}, &n) == nil && ok(&n)
	})
	return &n, err
}

// waitFor polls cond for up to 60 s.
func waitFor(ctx context.Context, cond func() bool) error {
	deadline := time.Now().Add(60 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			return fmt.Errorf("timed out")
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	return nil
}

func metricLines(url string, prefixes ...string) []string {
	body, err := getBody(url)
	if err != nil {
		return nil
	}
	var out []string
	for _, line := range strings.Split(body, "\n") {
		for _, p := range prefixes {
			if strings.HasPrefix(line, p) {
				out = append(out, line)
			}
		}
	}
	return out
}

// memberState is what an agent's /status says of a remote site.
func memberState(url, site string) string {
	body, err := getBody(url)
	if err != nil {
		return "unknown"
	}
	state, err := testgrid.MemberStateIn([]byte(body), site)
	if err != nil {
		return "unknown"
	}
	return state
}

// enrollToken has east's operator make west's one-time enrolment token
// with the agent's own command, as the README shows it, and grants east's
// agent its token Secret (the chart's trust.enrollment.issuer).
func enrollToken(ctx context.Context, eastCP *controlplane.ControlPlane, work, binDir, site string) (string, error) {
	step("%s enrols: east's operator makes a one-time token for it; west will hold the grid CA's certificate only", site)
	if err := eastCP.Grant(ctx, agentNamespace, controlplane.AgentServiceAccount, "gridsync-agent-enrollment", agentNamespace,
		rbac.EnrollmentTokenRules(enrol.DefaultTokenSecret)); err != nil {
		return "", err
	}
	admin := filepath.Join(work, "east-admin.kubeconfig")
	if err := controlplane.WriteKubeconfig(eastCP.AdminConfig(), admin); err != nil {
		return "", err
	}
	args := []string{"enroll-token", "--network", scope.Network, "--site", site, "--namespace", agentNamespace, "--ttl", "10m"}
	out, err := exec.CommandContext(ctx, filepath.Join(binDir, "gridsync-agent"), append(args, "--kubeconfig", admin)...).Output()
	if err != nil {
		return "", fmt.Errorf("enroll-token: %w", err)
	}
	token := strings.TrimSpace(string(out))
	fmt.Printf("    $ gridsync-agent %s\n    %s… (shown once; east stores only its SHA-256, usable once, by %s only)\n", strings.Join(args, " "), token[:10], site)
	return token, nil
}
