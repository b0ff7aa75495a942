// Package testnode runs a real Kubernetes node for tests: a kubelet of the
// same pinned k8s.io/kubernetes as the API server, containerd 2.x with
// runc, kube-controller-manager (Deployments, ReplicaSets, ServiceAccounts,
// kube-root-ca.crt, garbage collection) and kube-scheduler, against a
// control plane of package controlplane. The images it runs are the
// project's, built without a container engine (package images) and loaded
// into containerd under their own names (gridsync.local): nothing is
// pulled, but for a node given a registry mirror (Options.Mirrors), which
// pulls from it what a chart names under the mirrored registry, as a
// user's node pulls a release.
//
// Everything of the node lives in a network namespace the test creates:
// containerd and the kubelet are started inside it, the pods' bridge and
// addresses exist only there, and the kubernetes Service's cluster IP
// (10.96.0.1) is an address of that namespace where the harness forwards
// to the API server on the host's loopback. That forward is the one
// test-only piece: in a cluster kube-proxy routes the Service IP; here no
// packet leaves loopback and the test's own namespaces. Pods get their
// in-cluster configuration exactly as in a cluster.
//
// A node needs root, cgroup v1 or v2 hierarchies it may write, overlayfs,
// runc, ip (iproute2) and nsenter (util-linux); Start says which is
// missing. Everything it made (processes, mounts, cgroups, the namespace)
// is removed by Stop, and by the next Start when a test binary died
// without stopping it.
package testnode

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/gridsync/gridsync/test/controlplane"
	"github.com/gridsync/gridsync/test/testbin"
	"github.com/gridsync/gridsync/test/testnetns"
)

const (
	folderPrefix = "gridsync-node-"
	nameFile     = "name"
	stopGrace    = 10 * time.Second
	// ImageTag is the tag the project's images are loaded under.
	ImageTag = "test"
)

// Node is one running node and the cluster controllers it needs.
type Node struct {
	// Name is the node's name (and of its namespace and cgroup).
	Name string

	cp      *controlplane.ControlPlane
	dir     string
	binDir  string
	forward *controlplane.Proxy
	mirrors []*controlplane.Proxy // the registries' addresses in the namespace

	steps []string // of Start, with their durations

	mu        sync.Mutex
	processes []*controlplane.Process // in start order
}

// Start starts a node against cp and returns once the Node is Ready and
// the project's images are loaded. Stop it with Stop.
func Start(ctx context.Context, cp *controlplane.ControlPlane) (*Node, error) {
	return StartWith(ctx, cp, Options{})
}

// StartWith starts a node as Start does, with opts.
func StartWith(ctx context.Context, cp *controlplane.ControlPlane, opts Options) (*Node, error) {
	binDir, err := controlplane.BinDir()
	if err != nil {
		return nil, err
	}
	if err := Check(binDir); err != nil {
		return nil, err
	}
	// A node whose test binary died left its containers, mounts and
	// namespace behind, not only its folder.
	controlplane.RemoveAbandoned(folderPrefix, func(dir string) {
		name, _ := os.ReadFile(filepath.Join(dir, nameFile))
		_ = teardown(dir, strings.TrimSpace(string(name)))
	})
	dir, err := controlplane.OwnedTempDir(folderPrefix)
	if err != nil {
		return nil, err
	}
	suffix := make([]byte, 4)
	_, _ = rand.Read(suffix)
	n := &Node{Name: "gsn-" + hex.EncodeToString(suffix), cp: cp, dir: dir, binDir: binDir}
	if err := os.WriteFile(filepath.Join(dir, nameFile), []byte(n.Name), 0o600); err != nil {
		return nil, err
	}
	if err := n.start(ctx, opts); err != nil {
		return nil, errors.Join(err, n.Stop())
	}
	return n, nil
}

func (n *Node) start(ctx context.Context, opts Options) error {
	last := time.Now()
	step := func(name string) {
		now := time.Now()
		n.steps = append(n.steps, name+" "+now.Sub(last).Round(time.Millisecond).String())
		last = now
	}
	if err := createCgroup(n.cgroup()); err != nil {
		return err
	}
	if err := createNetns(ctx, n.Name, controlplane.KubernetesServiceIP); err != nil {
		return err
	}
	ln, err := testnetns.Listen(testnetns.Path(n.Name), net.JoinHostPort(controlplane.KubernetesServiceIP, "443"))
	if err != nil {
		return fmt.Errorf("listen for the kubernetes Service in the node's namespace: %w", err)
	}
	n.forward = controlplane.NewProxyOn(ln, n.cp.APIAddr())
	if err := n.startMirrors(opts.Mirrors); err != nil {
		return err
	}
	if err := n.startContainerd(ctx); err != nil {
		return err
	}
	step("namespace and containerd")
	bins, err := testbin.Dir(ctx, testbin.All()...)
	if err != nil {
		return err
	}
	step("binaries")
	if err := n.loadImages(ctx, bins); err != nil {
		return err
	}
	step("images")
	if err := n.startControllers(); err != nil {
		return err
	}
	if _, err := n.startKubelet(); err != nil {
		return err
	}
	if err := n.waitReady(ctx, time.Time{}); err != nil {
		return err
	}
	step("controllers and kubelet to Ready")
	return nil
}

// Steps says how long each step of Start took: where a run's setup time
// goes.
func (n *Node) Steps() string { return strings.Join(n.steps, ", ") }

// cgroup is the node's cgroup: containerd, the kubelet and every pod.
func (n *Node) cgroup() string { return "/" + n.Name }

func (n *Node) path(elem ...string) string { return filepath.Join(append([]string{n.dir}, elem...)...) }

// run starts a process of the node. The node's own (containerd, the
// kubelet) run inside its network namespace and its cgroup; the cluster's
// controllers on the host's loopback.
func (n *Node) run(name string, inNode bool, env []string, binary string, args ...string) (*controlplane.Process, error) {
	if inNode {
		// nsenter enters the network namespace only: the kubelet and
		// containerd must share the host's mount namespace, where the
		// volumes the kubelet mounts are seen by the runtime.
		args = append([]string{"--net=" + testnetns.Path(n.Name), "--", binary}, args...)
		binary = "nsenter"
	}
	cmd := exec.Command(binary, args...) //nolint:noctx // a server lives until Stop
	cmd.Env = append(os.Environ(), env...)
	p, err := controlplane.StartProcess(name, n.path(name+".log"), cmd)
	if err != nil {
		return nil, err
	}
	n.mu.Lock()
	n.processes = append(n.processes, p)
	n.mu.Unlock()
	if inNode {
		if err := joinCgroup(n.cgroup(), p.PID()); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// Run starts a process inside the node's network namespace and cgroup, as
// the node's own are, for a test's server that must reach the pods by
// their addresses (a Prometheus scraping them). Its log is the node's
// <name>.log; Stop stops it with the node's.
func (n *Node) Run(name string, env []string, binary string, args ...string) (*controlplane.Process, error) {
	return n.run(name, true, env, binary, args...)
}

// Stop stops the node: the kubelet and the controllers, then every process
// left in its cgroup (containers, shims, containerd), its mounts, its
// network namespace and its folder. It is safe to call more than once.
func (n *Node) Stop() error {
	n.mu.Lock()
	procs := n.processes
	n.processes = nil
	n.mu.Unlock()
	var errs []error
	for i := len(procs) - 1; i >= 0; i-- {
		errs = append(errs, procs[i].Stop(stopGrace))
	}
	if n.forward != nil {
		errs = append(errs, n.forward.Close())
	}
	for _, m := range n.mirrors {
		errs = append(errs, m.Close())
	}
	errs = append(errs, teardown(n.dir, n.Name))
	return errors.Join(errs...)
}

// teardown removes what a node made, also one whose test binary died.
func teardown(dir, name string) error {
	var errs []error
	if name != "" {
		errs = append(errs, killCgroup("/"+name))
	}
	errs = append(errs, unmountUnder(dir))
	if name != "" {
		if _, err := os.Stat(testnetns.Path(name)); err == nil {
			errs = append(errs, testnetns.Delete(context.Background(), name))
		}
	}
	errs = append(errs, os.RemoveAll(dir))
	return errors.Join(errs...)
}

// HTTPClient is a client whose connections are made inside the node's
// network namespace, to reach pods by their IPs as the kubelet's probes
// do.
func (n *Node) HTTPClient() *http.Client {
	return &http.Client{
		Timeout: 10 * time.Second,
		Transport: &http.Transport{
			DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
				return testnetns.Dial(ctx, testnetns.Path(n.Name), network, addr)
			},
			DisableKeepAlives: true,
		},
	}
}

// CutAPI closes every open connection from the node (the kubelet's and
// the pods') to the API server, as an API server restart would, and
// accepts new ones at once: every client of the node connects again.
func (n *Node) CutAPI() {
	n.forward.Cut()
	n.forward.Restore()
}

// RestartKubelet stops the kubelet and starts it again with the same
// configuration, as a kubelet upgrade or crash does: the pods keep running
// in containerd, and the kubelet begins with none of what it kept in
// memory. Its cache of the pods' ServiceAccount tokens is part of that: it
// requests a new token for every projected token volume, where a running
// kubelet only does so at 80 % of the token's lifetime. It returns once the
// kubelet serves its health check again and the Node is Ready.
func (n *Node) RestartKubelet(ctx context.Context) error {
	n.mu.Lock()
	var old *controlplane.Process
	kept := make([]*controlplane.Process, 0, len(n.processes))
	for _, p := range n.processes {
		if p.Name() == "kubelet" {
			old = p
			continue
		}
		kept = append(kept, p)
	}
	n.processes = kept
	n.mu.Unlock()
	if old == nil {
		return errors.New("restart the kubelet: it is not running")
	}
	stopped := time.Now()
	if err := old.Stop(stopGrace); err != nil {
		return err
	}
	p, err := n.startKubelet()
	if err != nil {
		return err
	}
	healthz := "http://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(kubeletHealthzPort)) + "/healthz"
	err = p.WaitUntil(ctx, 60*time.Second, func() bool {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, healthz, http.NoBody)
		if err != nil {
			return false
		}
		resp, err := n.HTTPClient().Do(req)
		if err != nil {
			return false
		}
		_ = resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	if err != nil {
		return fmt.Errorf("the restarted kubelet is not healthy: %w\n%s", err, p.LogTail())
	}
	return n.waitReady(ctx, stopped)
}

// waitReady waits for the Node object to report Ready and carry no taint
// (the kubelet registers it not-ready; the node lifecycle controller
// lifts that once it is Ready), in a status the kubelet posted after
// since: a restarted kubelet's first, not the one before its restart.
func (n *Node) waitReady(ctx context.Context, since time.Time) error {
	client := n.cp.AdminClient()
	ctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	var last string
	for {
		node, err := client.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
		if err == nil {
			for _, c := range node.Status.Conditions {
				if c.Type == corev1.NodeReady {
					fresh := !c.LastHeartbeatTime.Time.Before(since.Truncate(time.Second))
					if c.Status == corev1.ConditionTrue && len(node.Spec.Taints) == 0 && fresh {
						return nil
					}
					last = fmt.Sprintf("%s: %s; taints %v", c.Reason, c.Message, node.Spec.Taints)
				}
			}
		} else {
			last = err.Error()
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("node %s not Ready within 90 s (%s)\nkubelet:\n%s", n.Name, last, n.LogTail("kubelet"))
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// LogTail is the end of the log of one of the node's processes (kubelet,
// containerd, kube-controller-manager, kube-scheduler), for failures.
func (n *Node) LogTail(name string) string {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, p := range n.processes {
		if p.Name() == name {
			return p.LogTail()
		}
	}
	return "(not started)"
}

// kubeconfig writes a kubeconfig for user (in groups) at server.
func (n *Node) kubeconfig(file, server, user string, groups ...string) (string, error) {
	certPEM, keyPEM, err := n.cp.ClientCertificate(user, groups...)
	if err != nil {
		return "", err
	}
	cfg := &rest.Config{Host: server, TLSClientConfig: rest.TLSClientConfig{
		CAData: n.cp.AdminConfig().CAData, CertData: certPEM, KeyData: keyPEM,
	}}
	path := n.path(file)
	return path, controlplane.WriteKubeconfig(cfg, path)
}
