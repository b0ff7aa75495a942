package testnode

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gridsync/gridsync/hack/images"
	"github.com/gridsync/gridsync/hack/release/kube"
	"github.com/gridsync/gridsync/shared/envelope"
	"github.com/gridsync/gridsync/test/controlplane"
)

// Helm is the pinned Helm binary: $GRIDSYNC_HELM (the Makefile exports
// it), else the newest under .tools/helm of an enclosing folder.
func Helm() (string, error) {
	if path := os.Getenv("GRIDSYNC_HELM"); path != "" {
		return path, nil
	}
	if dir, ok := findUp(".tools/helm"); ok {
		if matches, _ := filepath.Glob(filepath.Join(dir, "*", "helm")); len(matches) > 0 {
			return matches[len(matches)-1], nil
		}
	}
	return "", errors.New("the pinned helm is not built: run `make tools`")
}

// Chart is the path of one of the project's charts: charts/<name> in the
// nearest enclosing folder that has it (a test runs in its package's
// folder, somewhere below the repository's root).
func Chart(name string) string {
	if dir, ok := findUp(filepath.Join("charts", name)); ok {
		return dir
	}
	return filepath.Join("charts", name)
}

// findUp finds rel in the working folder or the nearest enclosing one.
func findUp(rel string) (string, bool) {
	wd, err := os.Getwd()
	if err != nil {
		return "", false
	}
	for dir := wd; ; dir = filepath.Dir(dir) {
		if _, err := os.Stat(filepath.Join(dir, rel)); err == nil {
			return filepath.Join(dir, rel), true
		}
		if filepath.Dir(dir) == dir {
			return "", false
		}
	}
}

// Render runs helm template for chart with the values files and values
// (the later win) and returns the objects.
func Render(ctx context.Context, chart, release, namespace string, valueFiles []string, values map[string]any) ([]*unstructured.Unstructured, error) {
	return render(ctx, chart, release, namespace, valueFiles, values, "--skip-tests")
}

// RenderTests renders the chart's `helm test` objects alone (those with
// the helm.sh/hook: test annotation), to be applied once the release runs.
func RenderTests(ctx context.Context, chart, release, namespace string, values map[string]any) ([]*unstructured.Unstructured, error) {
	objs, err := render(ctx, chart, release, namespace, nil, values)
	if err != nil {
		return nil, err
	}
	var tests []*unstructured.Unstructured
	for _, o := range objs {
		if o.GetAnnotations()["helm.sh/hook"] == "test" {
			tests = append(tests, o)
		}
	}
	return tests, nil
}

func render(ctx context.Context, chart, release, namespace string, valueFiles []string, values map[string]any, extra ...string) ([]*unstructured.Unstructured, error) {
	helm, err := Helm()
	if err != nil {
		return nil, err
	}
	args := append([]string{"template", release, chart, "--namespace", namespace, "--kube-version", kube.Version}, extra...)
	for _, f := range valueFiles {
		args = append(args, "--values", f)
	}
	out, err := runHelm(ctx, helm, values, args...)
	if err != nil {
		return nil, err
	}
	decoder := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(out), 4096)
	var objs []*unstructured.Unstructured
	for {
		obj := &unstructured.Unstructured{}
		err := decoder.Decode(&obj.Object)
		if errors.Is(err, io.EOF) {
			return objs, nil
		}
		if err != nil {
			return nil, err
		}
		if len(obj.Object) > 0 {
			objs = append(objs, obj)
		}
	}
}

// runHelm runs helm with args and values (as a values file, which wins
// over the files args name) and returns its output.
func runHelm(ctx context.Context, helm string, values map[string]any, args ...string) ([]byte, error) {
	if values != nil {
		data, err := json.Marshal(values) // JSON is YAML
		if err != nil {
			return nil, err
		}
		tmp, err := os.CreateTemp("", "gridsync-values-*.json")
		if err != nil {
			return nil, err
		}
		defer os.Remove(tmp.Name())
		if _, err := tmp.Write(data); err != nil {
			return nil, err
		}
		_ = tmp.Close()
		args = append(args, "--values", tmp.Name())
	}
	var out, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, helm, args...)
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("helm %s: %w\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return out.Bytes(), nil
}

// Release is a chart installed by helm itself (helm install, helm
// upgrade) as an admin of the control plane: what Helm's three-way merge
// does to objects that others changed is only seen this way.
type Release struct {
	Name, Namespace, Chart string
	dir                    string   // holds the kubeconfig
	chartArgs              []string // of where the chart comes from
}

// Install runs helm install of chart (a folder, or a reference such as
// oci://host/repo with chartArgs such as --version and --ca-file) as
// release in namespace with values.
func Install(ctx context.Context, cp *controlplane.ControlPlane, chart, release, namespace string, values map[string]any, chartArgs ...string) (*Release, error) {
	dir, err := os.MkdirTemp("", "gridsync-helm-")
	if err != nil {
		return nil, err
	}
	r := &Release{Name: release, Namespace: namespace, Chart: chart, dir: dir, chartArgs: chartArgs}
	if err := controlplane.WriteKubeconfig(cp.AdminConfig(), filepath.Join(dir, "kubeconfig")); err != nil {
		return nil, err
	}
	return r, r.run(ctx, "install", values)
}

// Close forgets the release's admin kubeconfig.
func (r *Release) Close() error { return os.RemoveAll(r.dir) }

// Upgrade runs helm upgrade of the release with values (the whole set,
// as a user's values file would be).
func (r *Release) Upgrade(ctx context.Context, values map[string]any) error {
	return r.run(ctx, "upgrade", values)
}

func (r *Release) run(ctx context.Context, verb string, values map[string]any) error {
	helm, err := Helm()
	if err != nil {
		return err
	}
	args := append([]string{verb, r.Name, r.Chart, "--namespace", r.Namespace, "--kubeconfig", filepath.Join(r.dir, "kubeconfig")}, r.chartArgs...)
	_, err = runHelm(ctx, helm, values, args...)
	return err
}

// Apply applies objs server-side as an admin of cp, as
// `kubectl apply --server-side` does; a namespaced object without a
// namespace of its own goes to namespace.
func Apply(ctx context.Context, cp *controlplane.ControlPlane, namespace string, objs []*unstructured.Unstructured) error {
	c, err := client.New(cp.AdminConfig(), client.Options{})
	if err != nil {
		return err
	}
	for _, o := range objs {
		obj := o.DeepCopy()
		if obj.GetNamespace() == "" {
			isNamespaced, err := c.IsObjectNamespaced(obj)
			if err != nil {
				return fmt.Errorf("%s %s: %w", obj.GetKind(), obj.GetName(), err)
			}
			if isNamespaced {
				obj.SetNamespace(namespace)
			}
		}
		err := c.Patch(ctx, obj, client.Apply, client.FieldOwner("gridsync-node-test"), client.ForceOwnership) //nolint:staticcheck // unstructured objects have no apply configuration
		if err != nil {
			return fmt.Errorf("apply %s %s/%s: %w", obj.GetKind(), obj.GetNamespace(), obj.GetName(), err)
		}
	}
	return nil
}

// ImageValues are the values that point a chart's images at the project's
// images loaded on the node, never pulled: the gateway chart's sidecar and
// its gateway (the stand-in), and the agent chart's agent.
func ImageValues(chart string) map[string]any {
	image := func(s images.Spec) map[string]any {
		return map[string]any{"repository": images.Registry + "/" + s.Name, "tag": ImageTag, "pullPolicy": "Never"}
	}
	switch chart {
	case "praxis-gateway":
		return map[string]any{
			"image":   image(images.Gateway),
			"overlay": map[string]any{"sidecar": map[string]any{"image": image(images.Sidecar)}},
		}
	case "gridsync-agent":
		return map[string]any{"image": image(images.Agent)}
	}
	return nil
}

// SidecarGatewayValues are the gateway chart's values for a release named
// after scope's gateway with the overlay sidecar for scope, on the node's
// images, merged with extra (which wins).
func SidecarGatewayValues(scope envelope.Scope, extra map[string]any) map[string]any {
	return Merge(ImageValues("praxis-gateway"), sidecarValues(scope), extra)
}

// ReleasedSidecarGatewayValues are SidecarGatewayValues for the chart a
// release published: the sidecar's image is the one the chart pins (pulled
// by its digest), the gateway the stand-in loaded on the node.
func ReleasedSidecarGatewayValues(scope envelope.Scope, extra map[string]any) map[string]any {
	return Merge(map[string]any{"image": ImageValues("praxis-gateway")["image"]}, sidecarValues(scope), extra)
}

func sidecarValues(scope envelope.Scope) map[string]any {
	return map[string]any{
		"fullnameOverride": scope.Gateway,
		"overlay": map[string]any{"sidecar": map[string]any{
			"enabled":           true,
			"expectedNetwork":   scope.Network,
			"expectedLocalSite": scope.LocalSite,
			"expectedGateway":   scope.Gateway,
		}},
	}
}

// Merge merges values maps, the later winning, maps merged key by key.
func Merge(maps ...map[string]any) map[string]any {
	out := map[string]any{}
	for _, m := range maps {
		for k, v := range m {
			if vm, ok := v.(map[string]any); ok {
				if om, ok := out[k].(map[string]any); ok {
					out[k] = Merge(om, vm)
					continue
				}
			}
			out[k] = v
		}
	}
	return out
}

// KustomizeBuild builds a platform's own kustomization (its text), in a
// folder of its own, with the pinned kustomize (beside the servers), as a
// platform vendors the agent's kustomize base or a flavour: "DEPLOY/" in
// it stands for deploy/kustomize, found from the folder deployDir names.
func KustomizeBuild(ctx context.Context, deployDir, kustomization string) ([]byte, error) {
	binDir, err := controlplane.BinDir()
	if err != nil {
		return nil, err
	}
	bin := filepath.Join(binDir, "kustomize")
	if _, err := os.Stat(bin); err != nil {
		return nil, fmt.Errorf("the pinned kustomize is not built (run make tools): %w", err)
	}
	root, err := filepath.Abs(deployDir)
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "gridsync-kustomization-*")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	rel, err := filepath.Rel(dir, root)
	if err != nil {
		return nil, err
	}
	kustomization = strings.ReplaceAll(kustomization, "DEPLOY/", filepath.ToSlash(rel)+"/")
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(kustomization), 0o600); err != nil {
		return nil, err
	}
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, bin, "build", dir)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("kustomize build: %w\n%s", err, stderr.String())
	}
	return out, nil
}
