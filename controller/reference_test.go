package controller_test

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// readManifests decodes a multi-document YAML file.
func readManifests(t *testing.T, path string) []*unstructured.Unstructured {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	dec := yaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	var out []*unstructured.Unstructured
	for {
		var obj map[string]any
		if err := dec.Decode(&obj); errors.Is(err, io.EOF) {
			return out
		} else {
			require.NoError(t, err)
		}
		if len(obj) > 0 {
			out = append(out, &unstructured.Unstructured{Object: obj})
		}
	}
}

// missingFields lists the paths of want that got lacks or holds
// differently: a pruned or rewritten field.
func missingFields(path string, want, got any) []string {
	switch w := want.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok {
			return []string{path}
		}
		var out []string
		for k, v := range w {
			out = append(out, missingFields(path+"."+k, v, g[k])...)
		}
		return out
	case []any:
		g, ok := got.([]any)
		if !ok || len(g) != len(w) {
			return []string{path}
		}
		var out []string
		for i := range w {
			out = append(out, missingFields(fmt.Sprintf("%s[%d]", path, i), w[i], g[i])...)
		}
		return out
	default:
		if !reflect.DeepEqual(fmt.Sprint(want), fmt.Sprint(got)) {
			return []string{path}
		}
		return nil
	}
}

// Every manifest and snippet of the Grid reference documents applies
// unchanged under strict field validation (what kubectl apply does) and
// reads back with every field intact; the shape the reference says is no
// longer accepted is refused, not pruned.
func TestTheReferenceManifestsApplyUnchanged(t *testing.T) {
	e := newEnv(t)
	require.NoError(t, e.cp.EnsureNamespace(e.ctx, "praxis-system"))
	// No controller manager runs to create the namespace's default
	// ServiceAccount, which the Pod needs.
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: "praxis-system"}}
	if err := e.admin.Create(e.ctx, sa); err != nil && !apierrors.IsAlreadyExists(err) {
		require.NoError(t, err)
	}
	strict := client.FieldValidation("Strict")

	for _, obj := range readManifests(t, "testdata/reference-manifests.yaml") {
		what := obj.GetKind() + " " + obj.GetName()
		want := obj.DeepCopy()
		err := e.admin.Create(e.ctx, obj, strict)
		require.NoError(t, err, what)
		t.Cleanup(func() { _ = e.admin.Delete(e.ctx, obj) })

		got := &unstructured.Unstructured{}
		got.SetGroupVersionKind(obj.GroupVersionKind())
		require.NoError(t, e.admin.Get(e.ctx, client.ObjectKeyFromObject(obj), got), what)
		spec := want.Object
		if want.GetKind() == "Secret" {
			// stringData is write-only: it reads back as data.
			for k, v := range want.Object["stringData"].(map[string]any) {
				assert.Equal(t, base64.StdEncoding.EncodeToString([]byte(v.(string))), got.Object["data"].(map[string]any)[k], what)
			}
			delete(spec, "stringData")
		}
		assert.Empty(t, missingFields(what, spec, got.Object), "fields pruned or changed")
	}

	for _, obj := range readManifests(t, "testdata/reference-refused.yaml") {
		err := e.admin.Create(e.ctx, obj, strict)
		require.Error(t, err, "%s %s must be refused", obj.GetKind(), obj.GetName())
		assert.True(t, apierrors.IsBadRequest(err) || apierrors.IsInvalid(err), "%v", err)
		assert.Contains(t, err.Error(), map[string]string{"GridNetwork": "sni", "GridSite": "canonicalFingerprints"}[obj.GetKind()])
	}
}
