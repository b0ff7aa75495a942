package charts

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"github.com/gridsync/gridsync/hack/release/kube"
	"github.com/gridsync/gridsync/test/testnode"
)

var update = flag.Bool("update", false, "rewrite the golden files (make golden)")

// kubeVersion is the version charts are rendered for: the pinned API
// server's.
const kubeVersion = kube.Version

// helm returns the pinned Helm binary; the Makefile exports its path.
func helm(t *testing.T) string {
	t.Helper()
	path, err := testnode.Helm()
	if err == nil {
		_, err = os.Stat(path)
	}
	if err != nil {
		t.Fatalf("the pinned helm is not built (%q): run `make tools`: %v", path, err)
	}
	return path
}

// valueCase is one set of values a chart is rendered with.
type valueCase struct {
	name      string // also the golden file's name
	release   string
	namespace string
	values    map[string]any
}

func chartDir(chart string) string { return filepath.Join("..", "..", "charts", chart) }

// runHelm runs helm with a values file written from values.
func runHelm(t *testing.T, values map[string]any, args ...string) (string, error) {
	t.Helper()
	data, err := json.Marshal(values) // JSON is YAML
	require.NoError(t, err)
	file := filepath.Join(t.TempDir(), "values.json")
	require.NoError(t, os.WriteFile(file, data, 0o600))
	cmd := exec.CommandContext(t.Context(), helm(t), append(args, "--values", file)...)
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("helm %s: %w\n%s%s", strings.Join(args, " "), err, stderr.String(), out.String())
	}
	return out.String(), nil
}

func lint(t *testing.T, chart string, c valueCase) {
	t.Helper()
	_, err := runHelm(t, c.values, "lint", chartDir(chart), "--strict", "--kube-version", kubeVersion, "--namespace", c.namespace)
	require.NoError(t, err)
}

func render(t *testing.T, chart string, c valueCase) string {
	t.Helper()
	out, err := runHelm(t, c.values, "template", c.release, chartDir(chart), "--kube-version", kubeVersion, "--namespace", c.namespace)
	require.NoError(t, err)
	return out
}

// checkGolden compares rendered output with its golden file, or rewrites
// the file with -update.
func checkGolden(t *testing.T, chart, name, rendered string) {
	t.Helper()
	path := filepath.Join("testdata", "golden", chart, name+".yaml")
	if *update {
		require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
		require.NoError(t, os.WriteFile(path, []byte(rendered), 0o644))
		return
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err, "no golden file: run make golden and review it")
	if string(want) != rendered {
		t.Errorf("%s renders differently from %s: run make golden and review the diff\n%s", chart, path, firstDifference(string(want), rendered))
	}
}

func firstDifference(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	for i := 0; i < len(w) || i < len(g); i++ {
		var wl, gl string
		if i < len(w) {
			wl = w[i]
		}
		if i < len(g) {
			gl = g[i]
		}
		if wl != gl {
			return fmt.Sprintf("line %d:\n- %s\n+ %s", i+1, wl, gl)
		}
	}
	return ""
}

// objects decodes the rendered documents.
func objects(t *testing.T, rendered string) []*unstructured.Unstructured {
	t.Helper()
	decoder := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(rendered), 4096)
	var out []*unstructured.Unstructured
	for {
		obj := &unstructured.Unstructured{}
		err := decoder.Decode(&obj.Object)
		if errors.Is(err, io.EOF) {
			return out
		}
		require.NoError(t, err)
		if len(obj.Object) > 0 {
			out = append(out, obj)
		}
	}
}

func ofKind(objs []*unstructured.Unstructured, kind string) []*unstructured.Unstructured {
	var out []*unstructured.Unstructured
	for _, o := range objs {
		if o.GetKind() == kind {
			out = append(out, o)
		}
	}
	return out
}

// access is one question for the authorizer and its expected answer.
type access struct {
	allowed bool
	attrs   authorizationv1.ResourceAttributes
}

// assertAccess asks the API server's authorizer, with a
// SubjectAccessReview, what user may do.
func assertAccess(t *testing.T, user string, reviews []access) {
	t.Helper()
	for _, review := range reviews {
		sar, err := cp.AdminClient().AuthorizationV1().SubjectAccessReviews().Create(t.Context(), &authorizationv1.SubjectAccessReview{
			Spec: authorizationv1.SubjectAccessReviewSpec{User: user, ResourceAttributes: &review.attrs},
		}, metav1.CreateOptions{})
		require.NoError(t, err)
		a := review.attrs
		assert.Equal(t, review.allowed, sar.Status.Allowed, "%s may %s %s/%s %s %s in %q", user, a.Verb, a.Group, a.Resource, a.Subresource, a.Name, a.Namespace)
	}
}
