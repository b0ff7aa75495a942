package testnode

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// PodReady tells whether the pod's Ready condition is true.
func PodReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// GetJSON reads http://podIP:port/path from inside the node's network
// namespace, as the kubelet's probes reach a pod, and decodes it into out.
func (n *Node) GetJSON(ctx context.Context, podIP string, port int, path string, out any) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	url := "http://" + net.JoinHostPort(podIP, strconv.Itoa(port)) + path
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, http.NoBody)
	if err != nil {
		return err
	}
	resp, err := n.HTTPClient().Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return json.NewDecoder(resp.Body).Decode(out)
}

// GatewayState is what the stand-in gateway of a pod has read, as its
// GET /state answers (the stand-in's own State, seen from a client).
type GatewayState struct {
	Revision     string    `json:"revision"`
	Reads        int64     `json:"reads"`
	Invalid      int64     `json:"invalid"`
	Identity     string    `json:"identity"`
	IdentityTorn int64     `json:"identityTorn"`
	ReadySince   time.Time `json:"readySince"`
}

// gatewayPort is where the stand-in gateway listens in the chart's pods.
const gatewayPort = 8080

// GatewayState asks the stand-in gateway of the pod at podIP what it reads.
func (n *Node) GatewayState(ctx context.Context, podIP string) (GatewayState, error) {
	var st GatewayState
	err := n.GetJSON(ctx, podIP, gatewayPort, "/state", &st)
	return st, err
}

// VolumeFile is a file of one of a pod's volumes as the node holds it, in
// the kubelet's folder of the pod: plugin is the volume's kind as the
// kubelet names its folder (kubernetes.io~empty-dir,
// kubernetes.io~projected...).
func (n *Node) VolumeFile(p *corev1.Pod, plugin, volume, file string) string {
	return n.path("kubelet", "pods", string(p.UID), "volumes", plugin, volume, file)
}

// ContainerLogFiles are the kubelet's log files of one of a pod's
// containers, one per run, oldest first.
func (n *Node) ContainerLogFiles(p *corev1.Pod, container string) []string {
	files, _ := filepath.Glob(n.path("logs", p.Namespace+"_"+p.Name+"_"+string(p.UID), container, "*.log"))
	return files
}

// KillContainer kills the process of a pod's container with SIGKILL
// through containerd, as an OOM kill or a crash would end it.
func (n *Node) KillContainer(ctx context.Context, p *corev1.Pod, container string) error {
	for _, list := range [][]corev1.ContainerStatus{p.Status.InitContainerStatuses, p.Status.ContainerStatuses} {
		for _, st := range list {
			if st.Name != container {
				continue
			}
			if _, err := n.ctr(ctx, "tasks", "kill", "--signal", "SIGKILL", strings.TrimPrefix(st.ContainerID, "containerd://")); err != nil {
				return fmt.Errorf("kill %s: %w", container, err)
			}
			return nil
		}
	}
	return fmt.Errorf("pod %s has no container %s", p.Name, container)
}

// DescribePods says, for a failed test's log, what each pod of namespace
// is: its phase, readiness and address, and each container's state with
// the end of its log. Each pod's line starts with prefix.
func (n *Node) DescribePods(ctx context.Context, namespace, prefix string) string {
	var b strings.Builder
	list, err := n.cp.AdminClient().CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err.Error()
	}
	for i := range list.Items {
		p := &list.Items[i]
		fmt.Fprintf(&b, "--- %spod %s %s ready=%v ip=%s\n", prefix, p.Name, p.Status.Phase, PodReady(p), p.Status.PodIP)
		for _, st := range append(p.Status.InitContainerStatuses, p.Status.ContainerStatuses...) {
			fmt.Fprintf(&b, "    container %s ready=%v restarts=%d state=%+v\n", st.Name, st.Ready, st.RestartCount, st.State)
			files := n.ContainerLogFiles(p, st.Name)
			if len(files) == 0 {
				continue
			}
			data, _ := os.ReadFile(files[len(files)-1])
			lines := strings.Split(strings.TrimSpace(string(data)), "\n")
			if len(lines) > 12 {
				lines = lines[len(lines)-12:]
			}
			for _, l := range lines {
				fmt.Fprintf(&b, "      %s\n", l)
			}
		}
	}
	return b.String()
}
