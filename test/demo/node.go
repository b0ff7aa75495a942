package main

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gridsync/gridsync/shared/envelope"
	"github.com/gridsync/gridsync/test/controlplane"
	"github.com/gridsync/gridsync/test/testnode"
)

// onANode runs the gateway chart's pod on a real node: a kubelet with
// containerd and runc, the images built without a container engine. The
// init container holds the gateway until the overlay exists; an update
// reaches the gateway's file through the pod's emptyDir.
func onANode(ctx context.Context, cp *controlplane.ControlPlane) error {
	step("a real node: a kubelet with containerd and runc, in a network namespace of its own")
	bin, err := controlplane.BinDir()
	if err != nil {
		return err
	}
	if err := testnode.Check(bin); err != nil {
		fmt.Printf("    skipped: %v\n", err)
		return nil
	}
	began := time.Now()
	node, err := testnode.Start(ctx, cp)
	if err != nil {
		return err
	}
	defer func() { _ = node.Stop() }()
	fmt.Printf("    node %s Ready after %s, the project's images loaded (nothing pulled)\n", node.Name, time.Since(began).Round(time.Millisecond))

	const ns = "praxis-node"
	if err := cp.EnsureNamespace(ctx, ns); err != nil {
		return err
	}
	nodeScope := scope
	nodeScope.Namespace = ns
	step("the praxis-gateway chart, rendered by Helm and applied, with the sidecar: no overlay yet")
	values := testnode.SidecarGatewayValues(nodeScope, nil)
	objs, err := testnode.Render(ctx, testnode.Chart("praxis-gateway"), scope.Gateway, ns, nil, values)
	if err != nil {
		return err
	}
	applied := time.Now()
	if err := testnode.Apply(ctx, cp, ns, objs); err != nil {
		return err
	}
	pod, err := waitNodePod(ctx, cp, ns, func(p *corev1.Pod) bool { return containerRunning(p, "overlay-init") })
	if err != nil {
		return err
	}
	time.Sleep(2 * time.Second)
	fmt.Printf("    pod %s: init container overlay-init running, gateway container waiting (PodInitializing)\n", pod.Name)

	step("the overlay is published: the gate opens, the kubelet's probes make the pod Ready")
	doc, _, err := envelope.Build(demoOverlay(1), nodeScope, envelope.Provenance{Producer: "gridsync-demo", RenderedAt: time.Now()})
	if err != nil {
		return err
	}
	if err := putIn(ctx, cp.AdminClient(), ns, configMapName(), doc); err != nil {
		return err
	}
	pod, err = waitNodePod(ctx, cp, ns, testnode.PodReady)
	if err != nil {
		return err
	}
	fmt.Printf("    pod Ready %s after the apply; the gateway reads revision %s\n", time.Since(applied).Round(time.Millisecond), short(gatewayRevision(ctx, node, pod)))

	step("an update reaches the gateway's file through the pod's emptyDir")
	doc, revision, err := envelope.Build(demoOverlay(2), nodeScope, envelope.Provenance{Producer: "gridsync-demo", RenderedAt: time.Now()})
	if err != nil {
		return err
	}
	written := time.Now()
	if err := putIn(ctx, cp.AdminClient(), ns, configMapName(), doc); err != nil {
		return err
	}
	for gatewayRevision(ctx, node, pod) != revision {
		if time.Since(written) > 30*time.Second {
			return fmt.Errorf("the update did not reach the gateway in the pod")
		}
		time.Sleep(5 * time.Millisecond)
	}
	fmt.Printf("    the gateway in the pod reads %s %s after the write\n", short(revision), time.Since(written).Round(time.Millisecond))
	return nil
}

func demoOverlay(variant int) envelope.Overlay {
	rank := int64(variant)
	return envelope.Overlay{
		Network: scope.Network, LocalSite: scope.LocalSite,
		Candidates: []envelope.Candidate{{
			Kind: envelope.CandidateKindInferenceModel, Name: "llama-3-70b", Site: "east-provider",
			Cluster: "sim-east", Fresh: true, Rank: &rank,
		}},
	}
}

func waitNodePod(ctx context.Context, cp *controlplane.ControlPlane, ns string, ok func(*corev1.Pod) bool) (*corev1.Pod, error) {
	deadline := time.Now().Add(90 * time.Second)
	for time.Now().Before(deadline) {
		list, err := cp.AdminClient().CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err == nil {
			for i := range list.Items {
				if ok(&list.Items[i]) {
					return &list.Items[i], nil
				}
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	return nil, fmt.Errorf("no pod in %s as expected within 90 s", ns)
}

func containerRunning(p *corev1.Pod, name string) bool {
	for _, st := range p.Status.InitContainerStatuses {
		if st.Name == name && st.State.Running != nil {
			return true
		}
	}
	return false
}

// gatewayRevision asks the stand-in gateway in the pod what it reads.
func gatewayRevision(ctx context.Context, node *testnode.Node, pod *corev1.Pod) string {
	st, _ := node.GatewayState(ctx, pod.Status.PodIP)
	return st.Revision
}
