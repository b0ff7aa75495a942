package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gridsync/gridsync/api/v1alpha1"
	"github.com/gridsync/gridsync/shared/envelope"
	"github.com/gridsync/gridsync/test/controlplane"
	"github.com/gridsync/gridsync/test/framework"
)

// agentNamespace is where the agent runs and keeps its Lease; credential
// Secrets live there too.
const agentNamespace = "grid-system"

// controllerLoop hands the ConfigMap over to gridsync-agent: Grid
// resources in, overlays out, delivered by the running sidecar.
func controllerLoop(ctx context.Context, cp *controlplane.ControlPlane, work, binDir, output string) (stop func(), err error) {
	stop = func() {}
	step("installing the Grid CRDs and starting gridsync-agent with its least-privilege RBAC")
	// The agent gets Secrets, it does not watch them: a deleted one is
	// noticed at the next resync, 300 s by default, 10 s here.
	listener, signalsFlags, err := newSignalsListener(work)
	if err != nil {
		return stop, err
	}
	agent, err := startSiteAgent(ctx, cp, work, binDir, scope.LocalSite, demoGateway(scope.LocalSite), signalsFlags...)
	if agent != nil {
		stop = func() {
			_ = agent.cmd.Process.Signal(syscall.SIGTERM)
			_ = agent.cmd.Wait()
		}
	}
	if err != nil {
		return stop, err
	}
	health, swimAddr := agent.health, agent.swimAddr
	if err := waitLeader(ctx, "http://"+health+"/status"); err != nil {
		return stop, err
	}
	fmt.Printf("    gridsync-agent ready and leading (health and metrics on %s); it only writes ConfigMaps it manages\n", health)

	c, err := framework.AdminClient(cp)
	if err != nil {
		return stop, err
	}

	step("removing the hand-made ConfigMap (the agent never takes over one it does not manage)")
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: configMapName(), Namespace: scope.Namespace}}
	if err := c.Delete(ctx, cm); err != nil {
		return stop, err
	}
	fmt.Printf("    the sidecar keeps serving revision %s\n", short(fileRevision(output)))

	step("creating a GridNetwork (with its SWIM key), a credential Secret and two InferenceProviders")
	swimKey := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "grid-swim-key", Namespace: agentNamespace}, Data: map[string][]byte{"key": newSwimKey()}}
	token := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "east-provider-token", Namespace: agentNamespace},
		Data:       map[string][]byte{"token": []byte("demo-token-never-in-an-overlay")},
	}
	network := demoNetwork()
	east := demoProvider("east-provider", "sim-east", []string{"llama-3-70b", "mistral-7b"})
	east.Spec.Auth = &v1alpha1.ProviderAuth{Strategy: "bearer_token", SecretRef: &v1alpha1.SecretKeyReference{
		Name: token.Name, Namespace: agentNamespace, Key: "token",
	}}
	west := demoProvider("west-provider", "sim-west", []string{"llama-3-70b"})
	var sent time.Time
	for _, obj := range []client.Object{swimKey, token, network, east, west} {
		if err := c.Create(ctx, obj); err != nil {
			return stop, err
		}
		sent = time.Now() // the overlay is complete once the last one exists
	}
	if err := showArrival(output, sent, 3, "first overlay from the agent"); err != nil {
		return stop, err
	}

	step("a provider adds a model: the new revision reaches the file")
	sent, err = updateProvider(ctx, c, east, func(p *v1alpha1.InferenceProvider) {
		p.Spec.Models = append(p.Spec.Models, v1alpha1.Model{Name: "qwen-2-72b"})
	})
	if err != nil {
		return stop, err
	}
	if err := showArrival(output, sent, 4, "east-provider serves qwen-2-72b"); err != nil {
		return stop, err
	}

	step("draining west-provider (spec.trafficPolicy.drain): existing_only in the file, after east's candidates; then undrained")
	for _, drain := range []bool{true, false} {
		sent, err = updateProvider(ctx, c, west, func(p *v1alpha1.InferenceProvider) {
			p.Spec.TrafficPolicy = &v1alpha1.TrafficPolicy{Drain: drain}
		})
		if err != nil {
			return stop, err
		}
		want := "new_and_existing"
		if drain {
			want = "existing_only"
		}
		if err := showAdmission(output, sent, west.Name, want); err != nil {
			return stop, err
		}
	}

	step("the credential Secret disappears: at the next resync (10 s here) east-provider is Unavailable and its routes are withdrawn")
	sent = time.Now()
	if err := c.Delete(ctx, token); err != nil {
		return stop, err
	}
	if err := showArrivalWithin(output, sent, 1, "only west-provider left", 20*time.Second); err != nil {
		return stop, err
	}

	step("what the cluster reports")
	var providers v1alpha1.InferenceProviderList
	if err := c.List(ctx, &providers); err != nil {
		return stop, err
	}
	fmt.Printf("    %-15s %-12s %s\n", "PROVIDER", "PHASE", "REASON")
	for _, p := range providers.Items {
		fmt.Printf("    %-15s %-12s %s\n", p.Name, p.Status.Phase, p.Status.Reason)
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(network), network); err != nil {
		return stop, err
	}
	for _, o := range network.Status.OverlayStatus {
		fmt.Printf("    GridNetwork %s, gateway %s: %s, revision %s, %d candidates, ConfigMap %s\n",
			network.Name, o.GatewayName, o.Phase, short(o.RenderedRevision), o.CandidateCount, o.ConfigMapName)
	}
	metrics, err := getBody("http://" + health + "/metrics")
	if err != nil {
		return stop, err
	}
	for _, line := range strings.Split(metrics, "\n") {
		if strings.HasPrefix(line, "gridsync_controller_overlay_publishes_total") || strings.HasPrefix(line, "gridsync_controller_status_writes_total") {
			fmt.Println("    " + line)
		}
	}

	if err := upstreamManifests(ctx, c, binDir); err != nil {
		return stop, err
	}

	if err := providerBehindTLS(ctx, c); err != nil {
		return stop, err
	}

	if err := rolloutEvidence(ctx, cp, c, listener, work, binDir); err != nil {
		return stop, err
	}

	stopAgent := stop
	stopSite, err := secondSite(ctx, cp, c, listener.addr, swimKey.Data["key"], swimAddr, health, output, work, binDir)
	return func() { stopSite(); stopAgent() }, err
}

func demoProvider(name, cluster string, models []string) *v1alpha1.InferenceProvider {
	p := &v1alpha1.InferenceProvider{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1alpha1.InferenceProviderSpec{
			GridNetworkRef: scope.Network,
			ProviderKind:   "vllm", BackendKind: "openai_compatible",
			Endpoint: "https://" + name + ".example", ClusterName: cluster,
		},
	}
	for _, m := range models {
		p.Spec.Models = append(p.Spec.Models, v1alpha1.Model{Name: m})
	}
	return p
}

// updateProvider applies mutate and returns when the API server answered
// (read and written again when the agent wrote its status in between).
func updateProvider(ctx context.Context, c client.Client, p *v1alpha1.InferenceProvider, mutate func(*v1alpha1.InferenceProvider)) (time.Time, error) {
	var sent time.Time
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := c.Get(ctx, client.ObjectKeyFromObject(p), p); err != nil {
			return err
		}
		mutate(p)
		sent = time.Now()
		return c.Update(ctx, p)
	})
	return sent, err
}

// showArrival waits until the sidecar's file holds an overlay with the
// given number of candidates and prints how long it took.
func showArrival(output string, since time.Time, candidates int, what string) error {
	return showArrivalWithin(output, since, candidates, what, 10*time.Second)
}

// showArrivalWithin is showArrival with its own deadline.
func showArrivalWithin(output string, since time.Time, candidates int, what string, within time.Duration) error {
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		if res, ok := fileResult(output); ok && res.CandidateCount == candidates {
			fmt.Printf("    %-36s revision %s, %d candidates, in the file %.1f ms after the API answered\n",
				what, short(res.Revision), candidates, float64(time.Since(since).Microseconds())/1000)
			return nil
		}
		time.Sleep(200 * time.Microsecond)
	}
	return fmt.Errorf("%s: the file never held %d candidates", what, candidates)
}

// showAdmission waits until the sidecar's file lists site's candidates
// with the admission state want and prints the order and the delay.
func showAdmission(output string, since time.Time, site, want string) error {
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if order, ok := admissionOrder(output, site, want); ok {
			fmt.Printf("    %s %-22s in the file %.1f ms after the API answered: %s\n", site, want,
				float64(time.Since(since).Microseconds())/1000, order)
			return nil
		}
		time.Sleep(200 * time.Microsecond)
	}
	return fmt.Errorf("%s never became %s in the file", site, want)
}

// admissionOrder reads the file's candidates ("site/model=state, ...")
// and whether every candidate of site has the state want.
func admissionOrder(output, site, want string) (string, bool) {
	data, err := os.ReadFile(output)
	if err != nil {
		return "", false
	}
	var doc struct {
		Overlay envelope.Overlay `json:"overlay"`
	}
	if json.Unmarshal(data, &doc) != nil {
		return "", false
	}
	var parts []string
	ok := false
	for _, c := range doc.Overlay.Candidates {
		parts = append(parts, c.Site+"/"+c.Name+"="+c.AdmissionState)
		if c.Site == site {
			ok = c.AdmissionState == want
			if !ok {
				return "", false
			}
		}
	}
	return strings.Join(parts, ", "), ok
}

// waitLeader waits until the agent's /status says it leads, so that the
// delays shown afterwards are the controller's, not the election's.
func waitLeader(ctx context.Context, url string) error {
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if body, err := getBody(url); err == nil && strings.Contains(strings.ReplaceAll(body, " ", ""), `"leader":true`) {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	return fmt.Errorf("%s never reported leadership", url)
}
