// Package testgrid runs a grid of real sites for tests and the demo: each
// site is a control plane (kube-apiserver and etcd) and a node (kubelet,
// containerd and runc, package testnode) of its own, with the agent and
// the gateway installed by their charts from the project's images. The
// nodes' network namespaces are joined by the WAN lab (package testwan):
// every packet between two sites crosses an emulated link with its delay,
// jitter and loss, and can be cut.
//
// A site is reached as a cluster behind a load balancer is: at an address
// of the lab's (its load balancer address) whose ports the lab translates
// to the agent's pod (SWIM, TCP and UDP) and to the gateway's pod (the
// grid listener a remote site's trust probe reaches). Each agent
// advertises that address and never binds it; the pods' own flows leave
// the node with the node's address (masqueraded), as from a cluster. So
// the grid works only if the advertise settings and the translation do.
//
// It needs what a node needs (root, cgroups, overlayfs, runc) and what the
// lab needs (/dev/net/tun, nft).
package testgrid

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gridsync/gridsync/api/v1alpha1"
	"github.com/gridsync/gridsync/controller"
	"github.com/gridsync/gridsync/gossip/swimkeys"
	"github.com/gridsync/gridsync/shared/envelope"
	"github.com/gridsync/gridsync/test/controlplane"
	"github.com/gridsync/gridsync/test/framework"
	"github.com/gridsync/gridsync/test/testnode"
	"github.com/gridsync/gridsync/test/testwan"
	"github.com/gridsync/gridsync/trust/sitetrust"
)

// The names every site uses: its namespace (the agent and the gateway in
// one), the network, the gateway and the Secrets.
const (
	Namespace    = "grid"
	Network      = "wan"
	Gateway      = "edge"
	agentRelease = "gridsync-agent"
	swimKey      = "swim-key"
	siteCert     = "site-cert"
	caSecret     = "grid-ca"
)

// SiteCertSecret and CASecret are the Secrets of each site's certificate
// (the agent issues it) and of the grid CA, in Namespace.
const (
	SiteCertSecret = siteCert
	CASecret       = caSecret
)

// The ports the load balancer address forwards, and the agent's health
// port (its /status), which only the node's namespace reaches.
const (
	SwimPort   = 7946
	GridPort   = 8443
	healthPort = 8081
)

// Options are a grid's sites and the link between them.
type Options struct {
	// Sites are the sites' names (DNS labels).
	Sites []string
	// Link is every direction of every path between two sites.
	Link testwan.Link
	// Logf, when set, hears each step as it finishes.
	Logf func(format string, args ...any)
	// AgentValues and GatewayValues are merged over each site's values of
	// the agent's and the gateway's chart (they win), for a test that
	// turns on what a grid does not need, such as metrics over TLS and
	// the monitoring objects.
	AgentValues, GatewayValues map[string]any
}

// Site is one site of a grid.
type Site struct {
	Name string
	CP   *controlplane.ControlPlane
	Node *testnode.Node
	// Client is an admin's client of the site's API server.
	Client client.Client
	// Addr is the site's load balancer address: what the other sites dial.
	Addr netip.Addr
	// AgentObjects and GatewayObjects are what the agent's and the
	// gateway's charts rendered for the site. The Prometheus Operator's
	// kinds among them (ServiceMonitor, PodMonitor, PrometheusRule) are
	// not applied, the sites' API servers serving no such kinds: a test
	// reads them here.
	AgentObjects, GatewayObjects []*unstructured.Unstructured

	index int
}

// Grid is the running sites and the lab between them.
type Grid struct {
	Lab   *testwan.Lab
	Sites []*Site

	logf                       func(string, ...any)
	agentValues, gatewayValues map[string]any
}

// Start starts every site, installs the charts, creates each site's
// network and provider, and returns once every site's load balancer
// address leads to its pods. The sites join and trust each other on their
// own from there: Start does not wait for it. Stop it with Stop, also
// after an error.
func Start(ctx context.Context, opts Options) (*Grid, error) {
	g := &Grid{logf: opts.Logf, agentValues: opts.AgentValues, gatewayValues: opts.GatewayValues}
	if g.logf == nil {
		g.logf = func(string, ...any) {}
	}
	began := time.Now()
	g.Sites = make([]*Site, len(opts.Sites))
	errs := make([]error, len(opts.Sites))
	var wg sync.WaitGroup
	for i, name := range opts.Sites {
		wg.Add(1)
		go func() {
			defer wg.Done()
			g.Sites[i], errs[i] = startSite(ctx, i, name)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return g, err
	}
	g.logf("%d sites, each a control plane and a node, up in %s", len(g.Sites), time.Since(began).Round(time.Millisecond))

	namespaces := make([]string, len(g.Sites))
	for i, s := range g.Sites {
		namespaces[i] = s.Node.Name
	}
	lab, err := testwan.Open(testwan.Options{Namespaces: namespaces, Link: opts.Link})
	if err != nil {
		return g, err
	}
	g.Lab = lab
	for i, s := range g.Sites {
		if err := lab.Masquerade(i, netip.MustParsePrefix(testnode.PodSubnet())); err != nil {
			return g, err
		}
		s.Addr = lab.ExposedAddr(i)
	}
	g.logf("the nodes joined by the emulated WAN: delay %s, jitter %s, loss %g %%", opts.Link.Delay, opts.Link.Jitter, opts.Link.Loss*100)

	caPEM, caKey, err := sitetrust.NewCA(time.Now(), 24*time.Hour)
	if err != nil {
		return g, err
	}
	key := make([]byte, swimkeys.Size)
	if _, err := rand.Read(key); err != nil {
		return g, err
	}
	// The grid CA's Secret, the same at every site (platform tooling
	// copies it, as the reference's install says): each agent issues its
	// own site certificate from it.
	gridCA := map[string][]byte{corev1.TLSCertKey: caPEM, corev1.TLSPrivateKeyKey: caKey, "ca.crt": caPEM}
	for _, s := range g.Sites {
		if err := g.install(ctx, s, key, gridCA); err != nil {
			return g, fmt.Errorf("site %s: %w", s.Name, err)
		}
	}
	g.logf("on each site: the agent and gateway charts installed, its GridNetwork and one provider created")
	for _, s := range g.Sites {
		if err := g.Route(ctx, s); err != nil {
			return g, fmt.Errorf("site %s: %w", s.Name, err)
		}
	}
	return g, nil
}

// StartForTest is Start for a test or benchmark: the grid is stopped when
// it ends, after the sites' pods and the ends of their logs are printed
// if it failed.
func StartForTest(tb testing.TB, ctx context.Context, opts Options) *Grid {
	tb.Helper()
	g, err := Start(ctx, opts)
	tb.Cleanup(func() {
		if tb.Failed() {
			for _, s := range g.Sites {
				if s != nil && s.Node != nil {
					tb.Log(s.Describe(context.Background()))
				}
			}
		}
		assert.NoError(tb, g.Stop())
	})
	require.NoError(tb, err)
	return g
}

func startSite(ctx context.Context, i int, name string) (*Site, error) {
	cp, err := controlplane.Start(ctx)
	if err != nil {
		return nil, err
	}
	s := &Site{Name: name, CP: cp, index: i}
	if s.Client, err = framework.AdminClient(cp); err != nil {
		return s, err
	}
	s.Node, err = testnode.Start(ctx, cp)
	return s, err
}

// Stop stops the lab, the nodes and the control planes.
func (g *Grid) Stop() error {
	if g.Lab != nil {
		g.Lab.Close()
	}
	var errs []error
	for _, s := range g.Sites {
		if s == nil {
			continue
		}
		if s.Node != nil {
			errs = append(errs, s.Node.Stop())
		}
		errs = append(errs, s.CP.Stop())
	}
	return errors.Join(errs...)
}

// Peers are the other sites' SWIM addresses, the seeds of a site.
func (g *Grid) peers(of *Site) []string {
	var out []string
	for _, s := range g.Sites {
		if s != of {
			out = append(out, netip.AddrPortFrom(s.Addr, SwimPort).String())
		}
	}
	return out
}

// install gives a site its Secrets, the two charts, its network and its
// provider.
func (g *Grid) install(ctx context.Context, s *Site, key []byte, gridCA map[string][]byte) error {
	if err := s.CP.EnsureNamespace(ctx, Namespace); err != nil {
		return err
	}
	for _, sec := range []*corev1.Secret{
		{ObjectMeta: metav1.ObjectMeta{Name: swimKey, Namespace: Namespace}, Data: map[string][]byte{"key": key}},
		{ObjectMeta: metav1.ObjectMeta{Name: caSecret, Namespace: Namespace}, Type: corev1.SecretTypeTLS, Data: gridCA},
	} {
		if err := s.Client.Create(ctx, sec); err != nil {
			return err
		}
	}
	advertised := func(port int) string { return netip.AddrPortFrom(s.Addr, uint16(port)).String() }
	agent := testnode.Merge(testnode.ImageValues("gridsync-agent"), map[string]any{
		"replicaCount":       1,
		"resourceNamespaces": []string{Namespace},
		"swim": map[string]any{
			"enabled": true, "siteName": s.Name, "advertiseAddress": advertised(SwimPort),
			"secretNames": []string{swimKey, siteCert, caSecret},
			// A probe a second, a suspect kept three: over a 100 ms round
			// trip a direct answer needs well under the 600 ms given.
			"probeInterval": "1s", "probeTimeout": "600ms", "suspectPeriods": 3,
			"keyPollInterval": "1s",
		},
		"trust": map[string]any{
			"secrets":       []map[string]any{{"name": siteCert}, {"name": caSecret}},
			"probeInterval": "3s", "probeTimeout": "3s",
		},
		"gateway": map[string]any{"address": advertised(GridPort)},
	}, g.agentValues)
	objs, err := testnode.Render(ctx, testnode.Chart("gridsync-agent"), agentRelease, Namespace, nil, agent)
	if err != nil {
		return err
	}
	s.AgentObjects = objs
	if err := testnode.Apply(ctx, s.CP, Namespace, withoutOperatorKinds(objs)); err != nil {
		return err
	}
	gateway := testnode.SidecarGatewayValues(envelope.Scope{Network: Network, Gateway: Gateway, LocalSite: s.Name, Namespace: Namespace},
		map[string]any{
			"args": []string{"--grid-listen=:" + strconv.Itoa(GridPort)},
			// The site certificate the agent issues and the grid CA's
			// certificate (the CA's key is not projected).
			"gridIdentity": map[string]any{"tlsSecretName": siteCert, "caSecretName": caSecret},
		})
	gateway = testnode.Merge(gateway, g.gatewayValues)
	if objs, err = testnode.Render(ctx, testnode.Chart("praxis-gateway"), Gateway, Namespace, nil, gateway); err != nil {
		return err
	}
	s.GatewayObjects = objs
	if err := testnode.Apply(ctx, s.CP, Namespace, withoutOperatorKinds(objs)); err != nil {
		return err
	}
	ttl := int32(5)
	network := &v1alpha1.GridNetwork{
		ObjectMeta: metav1.ObjectMeta{Name: Network, Labels: map[string]string{controller.AutoDiscoverSitesLabel: "true"}},
		Spec: v1alpha1.GridNetworkSpec{
			Seeds:            g.peers(s),
			ConsumerGateways: []v1alpha1.ConsumerGateway{{Name: Gateway, Namespace: Namespace, SiteName: s.Name}},
			// A site no longer alive keeps its routes, marked not fresh,
			// for 5 s: a test sees them withdrawn in seconds.
			StaleCandidateTTLSeconds: &ttl,
			// Any site the grid CA signed, for the name it claims: no
			// operator pins each site's certificate.
			PeerTrust: &v1alpha1.PeerTrust{Mode: "spiffe"},
			TLS: &v1alpha1.GridTLS{
				SwimKeySecretRef: &v1alpha1.NamespacedKeyRef{Name: swimKey, Namespace: Namespace},
				SiteSecretRef:    &v1alpha1.NamespacedName{Name: siteCert, Namespace: Namespace},
				CASecretRef:      &v1alpha1.NamespacedName{Name: caSecret, Namespace: Namespace},
			},
		},
	}
	provider := &v1alpha1.InferenceProvider{
		ObjectMeta: metav1.ObjectMeta{Name: ProviderOf(s.Name)},
		Spec: v1alpha1.InferenceProviderSpec{GridNetworkRef: Network, ProviderKind: "vllm", BackendKind: "openai_compatible",
			Endpoint: "https://" + s.Name + "-pool.invalid", ClusterName: s.Name, Models: []v1alpha1.Model{{Name: "llama-3-70b"}}},
	}
	// The chart's CRDs are applied with it; their kinds are served once
	// established.
	for _, obj := range []client.Object{network, provider} {
		err := waitFor(ctx, time.Minute, func() bool {
			err := s.Client.Create(ctx, obj)
			return err == nil || !meta.IsNoMatchError(err)
		})
		if err != nil {
			return fmt.Errorf("create %s: %w", obj.GetName(), err)
		}
	}
	return nil
}

// withoutOperatorKinds are objs but the Prometheus Operator's, which no
// site's API server serves.
func withoutOperatorKinds(objs []*unstructured.Unstructured) []*unstructured.Unstructured {
	out := make([]*unstructured.Unstructured, 0, len(objs))
	for _, o := range objs {
		if o.GroupVersionKind().Group != "monitoring.coreos.com" {
			out = append(out, o)
		}
	}
	return out
}

// ProviderOf is the name of the provider each site declares.
func ProviderOf(site string) string { return site + "-pool" }

// Route points the site's load balancer address at its pods: SWIM at the
// agent's, the grid listener at the gateway's. It waits for both pods to
// have an address; call it again when a pod was replaced.
func (g *Grid) Route(ctx context.Context, s *Site) error {
	var agentIP, gatewayIP string
	err := waitFor(ctx, 3*time.Minute, func() bool {
		agentIP, gatewayIP = s.podIP(ctx, "app.kubernetes.io/name=gridsync-agent"), s.podIP(ctx, "app.kubernetes.io/instance="+Gateway)
		return agentIP != "" && gatewayIP != ""
	})
	if err != nil {
		return fmt.Errorf("the agent's and the gateway's pods got no address (agent %q, gateway %q): %w", agentIP, gatewayIP, err)
	}
	agent, gateway := netip.MustParseAddr(agentIP), netip.MustParseAddr(gatewayIP)
	_, err = g.Lab.ExposePorts(s.index, []testwan.Forward{
		{Proto: "udp", Port: SwimPort, To: netip.AddrPortFrom(agent, SwimPort)},
		{Proto: "tcp", Port: SwimPort, To: netip.AddrPortFrom(agent, SwimPort)},
		{Proto: "tcp", Port: GridPort, To: netip.AddrPortFrom(gateway, GridPort)},
	})
	if err == nil {
		g.logf("%s at %s: SWIM to the agent's pod %s, the grid listener to the gateway's pod %s", s.Name, s.Addr, agent, gateway)
	}
	return err
}

// podIP is the address of the running pod the label selector picks, ""
// until it has one.
func (s *Site) podIP(ctx context.Context, selector string) string {
	pod, err := s.Pod(ctx, selector)
	if err != nil {
		return ""
	}
	return pod.Status.PodIP
}

// Pod is the one pod of the grid namespace that the label selector picks
// and that is not being deleted.
func (s *Site) Pod(ctx context.Context, selector string) (*corev1.Pod, error) {
	list, err := s.CP.AdminClient().CoreV1().Pods(Namespace).List(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		return nil, err
	}
	var out []*corev1.Pod
	for i := range list.Items {
		if list.Items[i].DeletionTimestamp == nil {
			out = append(out, &list.Items[i])
		}
	}
	if len(out) != 1 {
		return nil, fmt.Errorf("%d pods of %s", len(out), selector)
	}
	return out[0], nil
}

// AgentPod and GatewayPod are the site's agent and gateway pods.
func (s *Site) AgentPod(ctx context.Context) (*corev1.Pod, error) {
	return s.Pod(ctx, "app.kubernetes.io/name=gridsync-agent")
}

func (s *Site) GatewayPod(ctx context.Context) (*corev1.Pod, error) {
	return s.Pod(ctx, "app.kubernetes.io/instance="+Gateway)
}

// MemberState is how the site's agent sees peer in SWIM (Alive, Suspect,
// Dead, Left), "absent" when it does not know it, or an error.
func (s *Site) MemberState(ctx context.Context, peer string) (string, error) {
	pod, err := s.AgentPod(ctx)
	if err != nil {
		return "", err
	}
	var body json.RawMessage
	if err := s.Node.GetJSON(ctx, pod.Status.PodIP, healthPort, "/status", &body); err != nil {
		return "", err
	}
	return MemberStateIn(body, peer)
}

// MemberStateIn reads peer's SWIM state from an agent's /status answer:
// Alive, Suspect, Dead or Left, "absent" when the agent does not know it.
func MemberStateIn(status []byte, peer string) (string, error) {
	var st struct {
		Swim struct {
			Members []struct {
				Site  string `json:"site"`
				State string `json:"state"`
			} `json:"members"`
		} `json:"swim"`
	}
	if err := json.Unmarshal(status, &st); err != nil {
		return "", fmt.Errorf("an agent's /status: %w", err)
	}
	for _, m := range st.Swim.Members {
		if m.Site == peer {
			return m.State, nil
		}
	}
	return "absent", nil
}

// SiteStatus is the status of the site's GridSite for peer, empty while
// it has none.
func (s *Site) SiteStatus(ctx context.Context, peer string) v1alpha1.GridSiteStatus {
	var gs v1alpha1.GridSite
	if err := s.Client.Get(ctx, client.ObjectKey{Name: Network + "-" + peer}, &gs); err != nil {
		return v1alpha1.GridSiteStatus{}
	}
	return gs.Status
}

// Candidates are the candidates of the overlay the site's gateway reads,
// from the file in its pod's volume on the node: name, site and whether
// fresh. Nil while there is no file.
func (s *Site) Candidates(ctx context.Context) ([]Candidate, error) {
	pod, err := s.GatewayPod(ctx)
	if err != nil {
		return nil, err
	}
	data, err := os.ReadFile(s.Node.VolumeFile(pod, "kubernetes.io~empty-dir", "routing-overlay", "routing-overlay.json"))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var doc struct {
		Overlay struct {
			Candidates []Candidate `json:"candidates"`
		} `json:"overlay"`
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("the gateway's file: %w", err)
	}
	return doc.Overlay.Candidates, nil
}

// Candidate is one candidate of a gateway's overlay, as far as a grid
// test looks at it. A local candidate's site is its provider's name; a
// remote one's is the remote site's, its cluster that site's gateway.
type Candidate struct {
	Name    string `json:"name"`
	Site    string `json:"site"`
	Cluster string `json:"cluster"`
	Fresh   bool   `json:"fresh"`
}

// Routes says whether the candidates hold one of site's, and whether it is
// fresh.
func Routes(cands []Candidate, site string) (present, fresh bool) {
	for _, c := range cands {
		if c.Site == site {
			return true, c.Fresh
		}
	}
	return false, false
}

func waitFor(ctx context.Context, timeout time.Duration, cond func() bool) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for !cond() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return nil
}

// Describe says where the site's pods stand and how their containers'
// logs end: what a failed grid test prints.
func (s *Site) Describe(ctx context.Context) string {
	return s.Node.DescribePods(ctx, Namespace, s.Name+": ")
}

// Pairs are every ordered pair of the grid's sites: a site and a peer.
func (g *Grid) Pairs() [][2]*Site {
	var out [][2]*Site
	for _, s := range g.Sites {
		for _, peer := range g.Sites {
			if s != peer {
				out = append(out, [2]*Site{s, peer})
			}
		}
	}
	return out
}

// Condition says how a site sees a peer, and whether that is what is
// waited for.
type Condition func(ctx context.Context, s, peer *Site) (now string, done bool)

// view is how the site sees peer: its SWIM state, its GridSite's phase,
// and the peer's routes in the site's gateway file.
type view struct {
	state          string
	phase          v1alpha1.SitePhase
	present, fresh bool
}

func (v view) String() string {
	return fmt.Sprintf("%s, GridSite %s, routes %s", v.state, v.phase, routesWord(v.present, v.fresh))
}

func look(ctx context.Context, s, peer *Site) (view, error) {
	state, err := s.MemberState(ctx, peer.Name)
	if err != nil {
		return view{}, err
	}
	v := view{state: state, phase: s.SiteStatus(ctx, peer.Name).Phase}
	v.present, v.fresh = s.routes(ctx, peer.Name)
	return v, nil
}

// Routed holds once the site has the peer Alive in SWIM, its GridSite
// Active (the mutual-TLS probe of the peer's gateway passed) and the
// peer's routes fresh in the site's gateway file.
func Routed(ctx context.Context, s, peer *Site) (string, bool) {
	v, err := look(ctx, s, peer)
	if err != nil {
		return err.Error(), false
	}
	return v.String(), v.state == "Alive" && v.phase == sitetrust.PhaseActive && v.present && v.fresh
}

// Withdrawn holds once the site has declared the peer Dead and the peer's
// routes are gone from the site's gateway file.
func Withdrawn(ctx context.Context, s, peer *Site) (string, bool) {
	v, err := look(ctx, s, peer)
	if err != nil {
		return err.Error(), false
	}
	return v.String(), v.state == "Dead" && !v.present
}

func routesWord(present, fresh bool) string {
	switch {
	case !present:
		return "withdrawn"
	case !fresh:
		return "stale"
	}
	return "fresh"
}

func (s *Site) routes(ctx context.Context, peer string) (present, fresh bool) {
	cands, err := s.Candidates(ctx)
	if err != nil {
		return false, false
	}
	return Routes(cands, peer)
}

// Watch polls cond for every pair of sites until it holds for each, and
// returns each site's changes of what cond says, with their times since
// from ("Suspect, GridSite Active, routes fresh at 1.6 s"). Past timeout
// it returns what it saw with an error.
func (g *Grid) Watch(ctx context.Context, from time.Time, timeout time.Duration, cond Condition) (map[string][]string, error) {
	seen := map[string][]string{}
	done := map[string]bool{}
	deadline := time.Now().Add(timeout)
	for {
		all := true
		for _, p := range g.Pairs() {
			s, peer := p[0], p[1]
			key := s.Name + "/" + peer.Name
			if done[key] {
				continue
			}
			now, ok := cond(ctx, s, peer)
			if h := seen[key]; len(h) == 0 || !strings.HasPrefix(h[len(h)-1], now+" at ") {
				seen[key] = append(h, fmt.Sprintf("%s at %.1f s", now, time.Since(from).Seconds()))
			}
			done[key] = ok
			all = all && ok
		}
		if all {
			return seen, nil
		}
		if time.Now().After(deadline) {
			return seen, fmt.Errorf("not every site within %s: %v", timeout, seen)
		}
		select {
		case <-ctx.Done():
			return seen, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Steady waits until cond has held at every site, without a break, for
// hold: a grid that has just formed may still be settling a suspicion
// from its first seconds (memberlist's own, which ends in a death of its
// own), and a test that cuts the link then would see that death rather
// than the cut's.
func (g *Grid) Steady(ctx context.Context, hold, timeout time.Duration, cond Condition) error {
	deadline := time.Now().Add(timeout)
	since := time.Now()
	last := ""
	for time.Since(since) < hold {
		for _, p := range g.Pairs() {
			if now, ok := cond(ctx, p[0], p[1]); !ok {
				since, last = time.Now(), p[0].Name+" sees "+p[1].Name+": "+now
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not steady for %s within %s; last break: %s", hold, timeout, last)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return nil
}
