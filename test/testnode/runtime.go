package testnode

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/gridsync/gridsync/hack/images"
	"github.com/gridsync/gridsync/test/controlplane"
)

// Check says what a node needs that this machine lacks, nil when nothing.
func Check(binDir string) error {
	var missing []string
	if os.Geteuid() != 0 {
		missing = append(missing, "root (the kubelet and containerd mount, create cgroups and network namespaces)")
	}
	for _, tool := range []string{"kubelet", "kube-controller-manager", "kube-scheduler", "containerd", "containerd-shim-runc-v2", "ctr", "cni/bridge", "cni/host-local"} {
		if _, err := os.Stat(filepath.Join(binDir, tool)); err != nil {
			missing = append(missing, tool+" in "+binDir+" (run `make tools`)")
		}
	}
	for _, tool := range []string{"runc", "ip", "nsenter"} {
		if _, err := exec.LookPath(tool); err != nil {
			missing = append(missing, tool+" on PATH (Debian packages runc, iproute2, util-linux)")
		}
	}
	if _, err := hierarchies(); err != nil {
		missing = append(missing, "cgroup hierarchies ("+err.Error()+")")
	}
	if !filesystemKnown("overlay") {
		missing = append(missing, "overlayfs (containerd's snapshotter)")
	}
	if len(missing) > 0 {
		return errors.New("a test node cannot start on this machine; it lacks:\n  " + strings.Join(missing, "\n  "))
	}
	return nil
}

func filesystemKnown(fs string) bool {
	data, err := os.ReadFile("/proc/filesystems")
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(data), "\n") {
		if strings.TrimSpace(strings.TrimPrefix(line, "nodev")) == fs {
			return true
		}
	}
	return false
}

// containerdConfig is containerd's configuration: everything under the
// node's folder (the registries' hosts.toml too), nothing read from /etc, the CRI's sandbox image the
// project's own pause image, pod network namespaces under the node's
// folder (so that teardown finds them), OOM scores only raised, and the
// bridge network of the node's namespace.
const containerdConfig = `version = 4
root = '{{dir}}/containerd/root'
state = '{{dir}}/containerd/state'
imports = []
disabled_plugins = [
  'io.containerd.nri.v1.nri',
  'io.containerd.snapshotter.v1.zfs',
  'io.containerd.snapshotter.v1.devmapper',
  'io.containerd.snapshotter.v1.blockfile',
  'io.containerd.snapshotter.v1.erofs',
  'io.containerd.differ.v1.erofs',
  'io.containerd.tracing.processor.v1.otlp',
  'io.containerd.internal.v1.tracing',
]

[plugins]
  [plugins.'io.containerd.server.v1.grpc']
    address = '{{dir}}/containerd.sock'
  [plugins.'io.containerd.server.v1.ttrpc']
    address = '{{dir}}/containerd.sock.ttrpc'
  [plugins.'io.containerd.cri.v1.images']
    snapshotter = 'overlayfs'
    [plugins.'io.containerd.cri.v1.images'.registry]
      config_path = '{{hosts}}'
    [plugins.'io.containerd.cri.v1.images'.pinned_images]
      sandbox = '{{pause}}'
  [plugins.'io.containerd.cri.v1.runtime']
    cdi_spec_dirs = []
    netns_mounts_under_state_dir = true
    disable_apparmor = true
    # No lower OOM score than containerd's own: lowering one needs
    # CAP_SYS_RESOURCE, which a sandboxed test machine may not grant.
    restrict_oom_score_adj = true
    [plugins.'io.containerd.cri.v1.runtime'.containerd]
      default_runtime_name = 'runc'
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
        runtime_type = 'io.containerd.runc.v2'
        [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
          BinaryName = '{{runc}}'
          Root = '{{dir}}/runc'
          SystemdCgroup = false
    [plugins.'io.containerd.cri.v1.runtime'.cni]
      bin_dirs = ['{{bin}}/cni']
      conf_dir = '{{dir}}/cni'
      use_internal_loopback = true
`

// cniConfig is the pods' network: a bridge in the node's namespace, the
// pods' default route through it (to the kubernetes Service address of
// the namespace's loopback), no masquerading (nothing leaves).
const cniConfig = `{
  "cniVersion": "1.0.0",
  "name": "gridsync-node",
  "plugins": [{
    "type": "bridge",
    "bridge": "cni0",
    "isGateway": true,
    "ipMasq": false,
    "hairpinMode": true,
    "ipam": {
      "type": "host-local",
      "ranges": [[{"subnet": "{{subnet}}", "gateway": "{{gateway}}"}]],
      "routes": [{"dst": "0.0.0.0/0"}],
      "dataDir": "{{dir}}/cni-ipam"
    }
  }]
}
`

func fill(template string, values map[string]string) string {
	for k, v := range values {
		template = strings.ReplaceAll(template, "{{"+k+"}}", v)
	}
	return template
}

func (n *Node) startContainerd(ctx context.Context) error {
	runc, err := exec.LookPath("runc")
	if err != nil {
		return err
	}
	values := map[string]string{
		"dir": n.dir, "bin": n.binDir, "runc": runc, "pause": images.Pause.Ref(ImageTag),
		"subnet": podSubnet, "gateway": podGateway, "hosts": n.registryHostsDir(),
	}
	if err := os.MkdirAll(n.path("cni"), 0o755); err != nil {
		return err
	}
	files := map[string]string{
		n.path("containerd.toml"):             fill(containerdConfig, values),
		n.path("cni", "10-gridsync.conflist"): fill(cniConfig, values),
	}
	for path, data := range files {
		if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
			return err
		}
	}
	// containerd finds its shim on PATH.
	env := []string{"PATH=" + n.binDir + ":" + os.Getenv("PATH")}
	p, err := n.run("containerd", true, env, filepath.Join(n.binDir, "containerd"), "--config", n.path("containerd.toml"))
	if err != nil {
		return err
	}
	err = p.WaitUntil(ctx, 30*time.Second, func() bool {
		conn, err := (&net.Dialer{Timeout: time.Second}).DialContext(ctx, "unix", n.path("containerd.sock"))
		if err != nil {
			return false
		}
		_ = conn.Close()
		return true
	})
	if err != nil {
		return fmt.Errorf("containerd did not serve: %w\n%s", err, p.LogTail())
	}
	return nil
}

// loadImages writes the project's images from the binaries the tests run
// (in the folder bins) and imports them into containerd's CRI namespace.
// They are written by the command `make images` runs, for the node's
// platform only (ctr imports and unpacks an index's image for the node's
// platform), in a process of its own: built without the race detector the
// node tests run under, it writes them in seconds, where compressing the
// layers inside the test binary took half a minute.
func (n *Node) loadImages(ctx context.Context, bins string) error {
	// The command reads each platform's binaries from <bin>/linux-<arch>.
	if err := os.MkdirAll(n.path("bin"), 0o755); err != nil {
		return err
	}
	if err := os.Symlink(bins, n.path("bin", "linux-"+runtime.GOARCH)); err != nil {
		return err
	}
	out, err := exec.CommandContext(ctx, "go", "run", "github.com/gridsync/gridsync/hack/images/build",
		"--bin", n.path("bin"), "--out", n.path("images"), "--platforms", "linux/"+runtime.GOARCH,
		"--tag", ImageTag, "--version", ImageTag, "--test-images").CombinedOutput()
	if err != nil {
		return fmt.Errorf("write the images: %w\n%s", err, out)
	}
	for _, s := range images.All {
		if _, err := n.ctr(ctx, "images", "import", "--snapshotter", "overlayfs", n.path("images", s.Name+".tar")); err != nil {
			return fmt.Errorf("import %s into containerd: %w", s.Name, err)
		}
	}
	return nil
}

// ctr runs containerd's client on the node's containerd, in the
// kubelet's namespace of it.
func (n *Node) ctr(ctx context.Context, args ...string) ([]byte, error) {
	args = append([]string{"--address", n.path("containerd.sock"), "--namespace", "k8s.io"}, args...)
	out, err := exec.CommandContext(ctx, filepath.Join(n.binDir, "ctr"), args...).CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("ctr %s: %w: %s", strings.Join(args[4:], " "), err, out)
	}
	return out, nil
}

// startControllers starts kube-controller-manager (with the controllers a
// Deployment's pods need) and kube-scheduler, each with its own identity
// as kubeadm gives them, on the host's loopback.
func (n *Node) startControllers() error {
	server := "https://" + n.cp.APIAddr()
	kcm, err := n.kubeconfig("controller-manager.kubeconfig", server, "system:kube-controller-manager")
	if err != nil {
		return err
	}
	sched, err := n.kubeconfig("scheduler.kubeconfig", server, "system:kube-scheduler")
	if err != nil {
		return err
	}
	ports, err := controlplane.FreePorts(2)
	if err != nil {
		return err
	}
	if _, err := n.run("kube-controller-manager", false, nil, filepath.Join(n.binDir, "kube-controller-manager"),
		"--kubeconfig="+kcm,
		"--authentication-kubeconfig="+kcm,
		"--authorization-kubeconfig="+kcm,
		"--controllers=deployment-controller,replicaset-controller,serviceaccount-controller,root-ca-certificate-publisher-controller,namespace-controller,garbage-collector-controller,node-lifecycle-controller",
		"--use-service-account-credentials=true",
		"--root-ca-file="+n.cp.CAFile(),
		"--service-account-private-key-file="+n.cp.ServiceAccountKeyFile(),
		"--leader-elect=false",
		"--bind-address=127.0.0.1",
		"--secure-port="+strconv.Itoa(ports[0]),
		"--cert-dir="+n.path("controller-manager-certs"),
	); err != nil {
		return err
	}
	_, err = n.run("kube-scheduler", false, nil, filepath.Join(n.binDir, "kube-scheduler"),
		"--kubeconfig="+sched,
		"--authentication-kubeconfig="+sched,
		"--authorization-kubeconfig="+sched,
		"--leader-elect=false",
		"--bind-address=127.0.0.1",
		"--secure-port="+strconv.Itoa(ports[1]),
		"--cert-dir="+n.path("scheduler-certs"),
	)
	return err
}

// kubeletConfig is the KubeletConfiguration: cgroup v1 allowed (this
// machine has only v1), the node's own cgroup, nothing of the host's
// kubelet paths, eviction thresholds low enough for a busy test machine.
const kubeletConfig = `apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupRoot: {{cgroup}}
containerRuntimeEndpoint: unix://{{dir}}/containerd.sock
address: {{nodeIP}}
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: {{healthzPort}}
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: false}
  x509: {clientCAFile: {{ca}}}
authorization: {mode: AlwaysAllow}
podLogsDir: {{dir}}/logs
resolvConf: {{dir}}/resolv.conf
failSwapOn: false
syncFrequency: {{sync}}
nodeStatusUpdateFrequency: 5s
evictionHard:
  memory.available: 64Mi
  nodefs.available: "1%"
  nodefs.inodesFree: "1%"
  imagefs.available: "1%"
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
serializeImagePulls: false
makeIPTablesUtilChains: false
protectKernelDefaults: false
enforceNodeAllocatable: [pods]
`

// syncFrequency is how soon a changed Secret or ConfigMap reaches a pod's
// volume: 5 s, where a cluster's default of a minute would have the tests
// wait for it.
const syncFrequency = 5 * time.Second

// kubeletHealthzPort is where the kubelet answers /healthz, on the
// loopback of the node's namespace.
const kubeletHealthzPort = 10248

func (n *Node) startKubelet() (*controlplane.Process, error) {
	values := map[string]string{
		"cgroup": n.cgroup(), "dir": n.dir, "nodeIP": nodeIP, "ca": n.cp.CAFile(), "sync": syncFrequency.String(),
		"healthzPort": strconv.Itoa(kubeletHealthzPort),
	}
	kubeconfig, err := n.kubeconfig("kubelet.kubeconfig", "https://"+net.JoinHostPort(controlplane.KubernetesServiceIP, "443"),
		"system:node:"+n.Name, "system:nodes")
	if err != nil {
		return nil, err
	}
	files := map[string]string{
		n.path("kubelet.yaml"): fill(kubeletConfig, values),
		// Pods resolve nothing: no name server exists in the namespace.
		n.path("resolv.conf"): "nameserver " + nodeIP + "\noptions timeout:1 attempts:1\n",
	}
	for path, data := range files {
		if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
			return nil, err
		}
	}
	return n.run("kubelet", true, nil, filepath.Join(n.binDir, "kubelet"),
		"--config="+n.path("kubelet.yaml"),
		"--kubeconfig="+kubeconfig,
		"--root-dir="+n.path("kubelet"),
		"--cert-dir="+n.path("kubelet", "pki"),
		"--hostname-override="+n.Name,
		"--node-ip="+nodeIP,
		"--v=1",
	)
}
