// Command demo runs gridsync's main job end to end on this machine: a real
// kube-apiserver and etcd (built by `make tools`), an overlay ConfigMap,
// gridsync-init gating the "gateway", then gridsync-sidecar delivering a
// series of updates into a local folder, an invalid one included; then
// gridsync-agent takes over: Grid resources in, overlays out, a provider
// change and a withdrawn credential delivered to the same file. It prints
// what a person wants to see and cleans up. Run it with `make demo`.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/go-json-experiment/json"
	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/gridsync/gridsync/shared/envelope"
	"github.com/gridsync/gridsync/test/controlplane"
)

func main() {
	binDir := flag.String("bin", "bin", "folder holding gridsync-init, gridsync-sidecar and gridsync-agent")
	flag.Parse()
	// The demo's own Grid clients have nothing to log; without a logger
	// controller-runtime prints a warning with a stack trace.
	ctrllog.SetLogger(logr.Discard())
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	err := run(ctx, *binDir)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

var scope = envelope.Scope{Network: "glb-demo", Gateway: "edge-gateway", Namespace: "praxis", LocalSite: "east-edge"}

func step(format string, args ...any) { fmt.Printf("\n==> "+format+"\n", args...) }

func configMapName() string { return envelope.ConfigMapName(scope.Network, scope.Gateway) }

func run(ctx context.Context, binDir string) error {
	work, err := os.MkdirTemp("", "gridsync-demo-")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(work) }()

	step("starting a real etcd and kube-apiserver on loopback")
	began := time.Now()
	cp, err := controlplane.Start(ctx)
	if err != nil {
		return err
	}
	defer func() {
		step("cleaning up")
		if err := cp.Stop(); err != nil {
			fmt.Println("stop control plane:", err)
		}
	}()
	fmt.Printf("    kube-apiserver ready at %s after %s\n", cp.Host(), time.Since(began).Round(time.Millisecond))

	configMap := configMapName()
	step("granting the gateway's ServiceAccount get/list/watch on ConfigMap %s/%s only", scope.Namespace, configMap)
	saConfig, err := cp.ConfigMapReaderConfig(ctx, scope.Namespace, "praxis-gateway", configMap)
	if err != nil {
		return err
	}
	kubeconfig := filepath.Join(work, "kubeconfig")
	if err := controlplane.WriteKubeconfig(saConfig, kubeconfig); err != nil {
		return err
	}
	admin := cp.AdminClient()
	volume := filepath.Join(work, "praxis-routing")
	if err := os.MkdirAll(volume, 0o755); err != nil {
		return err
	}
	output := filepath.Join(volume, "routing-overlay.json")
	args := []string{
		"--kubeconfig", kubeconfig, "--namespace", scope.Namespace, "--config-map", configMap, "--output", output,
		"--expected-network", scope.Network, "--expected-gateway", scope.Gateway, "--expected-local-site", scope.LocalSite,
	}

	step("starting gridsync-init before the ConfigMap exists: the gateway must not start without routes")
	initLog := filepath.Join(work, "init.log")
	initCmd, err := startBinary(ctx, filepath.Join(binDir, "gridsync-init"), initLog, args...)
	if err != nil {
		return err
	}
	time.Sleep(time.Second)
	fmt.Println("    gridsync-init is waiting:", lastLine(initLog, "config_map_absent"))

	doc, revision := render(1, 2)
	step("the controller publishes the first overlay (revision %s)", short(revision))
	if err := put(ctx, admin, configMap, doc); err != nil {
		return err
	}
	if err := initCmd.Wait(); err != nil {
		return fmt.Errorf("gridsync-init: %w", err)
	}
	fmt.Printf("    gridsync-init exited 0; the file holds revision %s\n", short(fileRevision(output)))

	health, err := freeAddr()
	if err != nil {
		return err
	}
	step("starting gridsync-sidecar (health and metrics on %s)", health)
	sidecarLog := filepath.Join(work, "sidecar.log")
	sidecar, err := startBinary(ctx, filepath.Join(binDir, "gridsync-sidecar"), sidecarLog, append(args, "--health-addr", health)...)
	if err != nil {
		return err
	}
	defer func() {
		_ = sidecar.Process.Signal(syscall.SIGTERM)
		_ = sidecar.Wait()
	}()
	if err := waitHTTP(ctx, "http://"+health+"/readyz"); err != nil {
		return err
	}
	fmt.Println("    /readyz: 200 (restored the overlay gridsync-init wrote)")

	step("pushing updates through the API server")
	fmt.Printf("    %-38s %-10s %-18s %s\n", "update", "revision", "file holds", "API response -> file")
	updates := []struct {
		what string
		doc  []byte
	}{}
	for i := 2; i <= 6; i++ {
		d, _ := render(i, 1+i%3)
		updates = append(updates, struct {
			what string
			doc  []byte
		}{fmt.Sprintf("routing change %d (%d candidates)", i-1, 1+i%3), d})
	}
	tampered := tamper(updates[len(updates)-1].doc)
	rerendered, _ := render(6, 1+6%3)
	updates = append(updates,
		struct {
			what string
			doc  []byte
		}{"tampered candidate (digest mismatch)", tampered},
		struct {
			what string
			doc  []byte
		}{"same routes re-rendered later", rerendered},
	)
	for _, u := range updates {
		res, verr := envelope.Validate(u.doc, envelope.Options{Expect: scope})
		before := fileRevision(output)
		sent := time.Now()
		if err := put(ctx, admin, configMap, u.doc); err != nil {
			return err
		}
		want := res.Revision
		if verr != nil {
			want = before
		}
		latency, ok := waitFileRevision(output, want, sent, 5*time.Second)
		var shown string
		switch {
		case verr != nil:
			shown = "rejected: " + string(envelope.RejectionReason(verr))
			time.Sleep(100 * time.Millisecond)
		case want == before:
			shown = "unchanged, no write"
			time.Sleep(100 * time.Millisecond)
		case ok:
			shown = fmt.Sprintf("%.2f ms", float64(latency.Microseconds())/1000)
		default:
			shown = "NOT DELIVERED"
		}
		rev := want
		if verr != nil {
			rev = "(invalid)"
		}
		fmt.Printf("    %-38s %-10s %-18s %s\n", u.what, short(rev), short(fileRevision(output)), shown)
	}

	step("deleting the ConfigMap: the file keeps serving, the sidecar reports degraded")
	if err := admin.CoreV1().ConfigMaps(scope.Namespace).Delete(ctx, configMap, metav1.DeleteOptions{}); err != nil {
		return err
	}
	time.Sleep(200 * time.Millisecond)
	status, _ := getBody("http://" + health + "/status")
	var st map[string]any
	_ = json.Unmarshal([]byte(status), &st)
	fmt.Printf("    state=%v degraded_reason=%v file holds %s\n", st["state"], st["degraded_reason"], short(fileRevision(output)))
	code, _ := getCode("http://" + health + "/readyz")
	fmt.Printf("    /readyz: %d\n", code)

	step("re-creating it: recovered")
	if err := put(ctx, admin, configMap, rerendered); err != nil {
		return err
	}
	time.Sleep(200 * time.Millisecond)
	fmt.Printf("    file holds %s\n", short(fileRevision(output)))

	stopAgent, err := controllerLoop(ctx, cp, work, binDir, output)
	defer stopAgent()
	if err != nil {
		return err
	}

	step("/status")
	status, err = getBody("http://" + health + "/status")
	if err != nil {
		return err
	}
	fmt.Println(indent(status))

	step("selected metrics from /metrics")
	metrics, err := getBody("http://" + health + "/metrics")
	if err != nil {
		return err
	}
	for _, line := range strings.Split(metrics, "\n") {
		for _, prefix := range []string{
			"grid_overlay_sync_ready ", "grid_overlay_sync_degraded ", "grid_overlay_sync_revision_info",
			`grid_overlay_sync_events_total{outcome="accepted"`, `grid_overlay_sync_events_total{outcome="unchanged"`,
			`grid_overlay_sync_validation_failures_total{reason="digest_mismatch"}`,
			"grid_overlay_sync_delivery_latency_seconds_count", "grid_overlay_sync_delivery_latency_seconds_sum",
			"process_resident_memory_bytes",
		} {
			if strings.HasPrefix(line, prefix) {
				fmt.Println("    " + line)
			}
		}
	}
	fmt.Printf("\n    sidecar log: %d JSON lines, e.g.\n    %s\n", countLines(sidecarLog), lastLine(sidecarLog, "overlay_rejected"))
	if err := onANode(ctx, cp); err != nil {
		return err
	}
	return gridAcrossAWAN(ctx)
}

// render builds the controller's envelope for a routing state.
func render(variant, candidates int) ([]byte, string) {
	overlay := envelope.Overlay{Network: scope.Network, LocalSite: scope.LocalSite, GeneratedAt: time.Now()}
	for i := range candidates {
		rank := int64(i)
		c := envelope.Candidate{
			Kind: envelope.CandidateKindInferenceModel, Name: fmt.Sprintf("llama-%d", variant),
			Site: []string{"east-provider", "west-provider", "north-provider"}[i%3], Cluster: fmt.Sprintf("cluster-%d", i),
			Fresh: true, Rank: &rank,
			Credential: &envelope.Credential{Strategy: "bearer_token", SecretRef: envelope.SecretRef{Name: "provider-token", Namespace: "grid-system", Key: "token"}},
		}
		c.StableID = envelope.StableID(c.Kind, c.Name, c.Site, c.Cluster)
		overlay.Candidates = append(overlay.Candidates, c)
	}
	doc, revision, err := envelope.Build(overlay, scope, envelope.Provenance{
		Producer: "gridsync-demo", ProducerVersion: "demo", SourceName: scope.Network, SourceGeneration: int64(variant), RenderedAt: time.Now(),
	})
	if err != nil {
		panic(err)
	}
	return doc, revision
}

// tamper changes a candidate without updating the digest, as a corrupted
// or forged update would.
func tamper(doc []byte) []byte {
	return []byte(strings.Replace(string(doc), `"fresh": true`, `"fresh": false`, 1))
}

func put(ctx context.Context, admin kubernetes.Interface, name string, doc []byte) error {
	return putIn(ctx, admin, scope.Namespace, name, doc)
}

func putIn(ctx context.Context, admin kubernetes.Interface, namespace, name string, doc []byte) error {
	cms := admin.CoreV1().ConfigMaps(namespace)
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: map[string]string{envelope.DataKeyEnvelope: string(doc)}}
	_, err := cms.Update(ctx, cm, metav1.UpdateOptions{})
	if apierrors.IsNotFound(err) {
		_, err = cms.Create(ctx, cm, metav1.CreateOptions{})
	}
	return err
}

func fileRevision(path string) string {
	if _, err := os.Stat(path); err != nil {
		return "(none)"
	}
	res, ok := fileResult(path)
	if !ok {
		return "(invalid!)"
	}
	return res.Revision
}

// fileResult validates the file as the gateway would.
func fileResult(path string) (envelope.Result, bool) {
	data, err := os.ReadFile(path)
	if err != nil {
		return envelope.Result{}, false
	}
	res, err := envelope.Validate(data, envelope.Options{Expect: scope})
	return res, err == nil
}

// waitFileRevision polls the file until it holds revision.
func waitFileRevision(path, revision string, since time.Time, timeout time.Duration) (time.Duration, bool) {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if fileRevision(path) == revision {
			return time.Since(since), true
		}
		time.Sleep(200 * time.Microsecond)
	}
	return 0, false
}

func short(revision string) string {
	if len(revision) == 64 {
		return revision[:8]
	}
	return revision
}

func startBinary(ctx context.Context, path, logPath string, args ...string) (*exec.Cmd, error) {
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s (run `make build`): %w", filepath.Base(path), err)
	}
	return cmd, nil
}

func freeAddr() (string, error) {
	l, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer func() { _ = l.Close() }()
	return l.Addr().String(), nil
}

func waitHTTP(ctx context.Context, url string) error {
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if code, _ := getCode(url); code == http.StatusOK {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	return errors.New(url + " never answered 200")
}

func getCode(url string) (int, error) {
	req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, url, http.NoBody)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	_ = resp.Body.Close()
	return resp.StatusCode, nil
}

func getBody(url string) (string, error) {
	req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, url, http.NoBody)
	if err != nil {
		return "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	return string(body), err
}

func indent(s string) string {
	return "    " + strings.ReplaceAll(strings.TrimSpace(s), "\n", "\n    ")
}

func lastLine(path, containing string) string {
	data, _ := os.ReadFile(path)
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if strings.Contains(lines[i], containing) {
			return lines[i]
		}
	}
	return ""
}

func countLines(path string) int {
	data, _ := os.ReadFile(path)
	return strings.Count(string(data), "\n")
}
