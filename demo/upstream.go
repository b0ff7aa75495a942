package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gridsync/gridsync/api/v1alpha1"
	"github.com/gridsync/gridsync/shared/envelope"
)

// upstreamNetwork is a network and its provider as upstream's earlier
// releases write them: their API group, their field names, null for what
// is absent, fields this release does not act on.
const upstreamNetwork = `apiVersion: grid.praxis-proxy.io/v1alpha1
kind: GridNetwork
metadata:
  name: upstream-example
spec:
  gridId: ""
  region: us-east-1
  gatewayRefs:
    - name: upstream-gateway
      namespace: %[1]s
      localSiteName: %[2]s
  tls:
    swimKeyRef: null
---
apiVersion: grid.praxis-proxy.io/v1alpha1
kind: InferenceProvider
metadata:
  name: upstream-provider
spec:
  gridNetworkRef: upstream-example
  providerKind: vllm
  backendKind: openai_compatible
  endpoint: https://upstream-provider.example
  routingClusterRef: sim-upstream
  models:
    - name: qwen2-7b
      capabilities: ["text_generation"]
      contextWindow: 32768
  auth:
    strategy: bearer_token
    manual: true
  metricsConfig: null
`

// upstreamManifests converts manifests of upstream's earlier release with
// gridsync-agent convert, applies them under strict field validation, and
// shows the overlay the agent publishes from them; then removes them.
func upstreamManifests(ctx context.Context, c client.Client, binDir string) error {
	step("a network and a provider written for upstream's earlier release (grid.praxis-proxy.io, gatewayRefs, localSiteName, routingClusterRef, manual): gridsync-agent convert, then kubectl-strict apply")
	cmd := exec.CommandContext(ctx, filepath.Join(binDir, "gridsync-agent"), "convert")
	cmd.Stdin = strings.NewReader(fmt.Sprintf(upstreamNetwork, scope.Namespace, scope.LocalSite))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("convert: %w: %s", err, stderr.String())
	}
	for _, line := range strings.Split(string(out), "\n") {
		t := strings.TrimSpace(line)
		for _, keep := range []string{"apiVersion:", "consumerGateways:", "siteName:", "clusterName:", "credentialsManagedExternally:"} {
			if strings.HasPrefix(t, keep) {
				fmt.Println("      " + line)
			}
		}
	}
	docs := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(out), 4096)
	var applied []*unstructured.Unstructured
	for {
		var obj map[string]any
		if err := docs.Decode(&obj); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			return err
		}
		if len(obj) == 0 {
			continue
		}
		u := &unstructured.Unstructured{Object: obj}
		if err := c.Create(ctx, u, client.FieldValidation("Strict")); err != nil {
			return fmt.Errorf("apply the converted %s: %w", u.GetKind(), err)
		}
		applied = append(applied, u)
	}
	defer func() {
		for _, u := range applied {
			_ = c.Delete(context.Background(), u)
		}
	}()
	key := types.NamespacedName{Namespace: scope.Namespace, Name: envelope.ConfigMapName("upstream-example", "upstream-gateway")}
	var cm corev1.ConfigMap
	if err := waitFor(ctx, func() bool { return c.Get(ctx, key, &cm) == nil }); err != nil {
		return fmt.Errorf("no overlay for the converted network: %w", err)
	}
	res, err := envelope.Validate([]byte(cm.Data[envelope.DataKeyEnvelope]), envelope.Options{})
	if err != nil {
		return err
	}
	fmt.Printf("    ConfigMap %s: revision %s, %d candidate (cluster sim-upstream)\n", key, short(res.Revision), res.CandidateCount)
	var p v1alpha1.InferenceProvider
	if err := waitFor(ctx, func() bool {
		return c.Get(ctx, types.NamespacedName{Name: "upstream-provider"}, &p) == nil && p.Status.Phase != ""
	}); err != nil {
		return err
	}
	for _, cond := range p.Status.Conditions {
		if cond.Type == "Accepted" {
			fmt.Printf("    upstream-provider %s; Accepted: %s (%s)\n", p.Status.Phase, cond.Reason, cond.Message)
		}
	}
	return nil
}
