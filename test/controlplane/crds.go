package controlplane

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
)

var crdResource = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// InstallCRDs applies the CustomResourceDefinitions in the given YAML files
// (several documents per file are fine) with server-side apply and waits
// until each is Established and every served version is in discovery, so
// that a test can use the new resources at once.
func (cp *ControlPlane) InstallCRDs(ctx context.Context, paths ...string) error {
	var crds []*unstructured.Unstructured
	for _, path := range paths {
		data, err := os.ReadFile(path)
		if err != nil {
			return fmt.Errorf("read %s: %w", path, err)
		}
		docs, err := decodeYAMLObjects(path, data)
		if err != nil {
			return err
		}
		crds = append(crds, docs...)
	}
	return cp.installCRDs(ctx, crds)
}

// InstallCRDsFS is InstallCRDs for every .yaml file at the root of fsys
// (an embedded set of manifests).
func (cp *ControlPlane) InstallCRDsFS(ctx context.Context, fsys fs.FS) error {
	names, err := fs.Glob(fsys, "*.yaml")
	if err != nil {
		return err
	}
	if len(names) == 0 {
		return errors.New("no CRD manifests")
	}
	var crds []*unstructured.Unstructured
	for _, name := range names {
		data, err := fs.ReadFile(fsys, name)
		if err != nil {
			return err
		}
		docs, err := decodeYAMLObjects(name, data)
		if err != nil {
			return err
		}
		crds = append(crds, docs...)
	}
	return cp.installCRDs(ctx, crds)
}

func (cp *ControlPlane) installCRDs(ctx context.Context, crds []*unstructured.Unstructured) error {
	dyn, err := dynamic.NewForConfig(cp.AdminConfig())
	if err != nil {
		return err
	}
	for _, crd := range crds {
		if crd.GetKind() != "CustomResourceDefinition" {
			return fmt.Errorf("%s %s is not a CustomResourceDefinition", crd.GetKind(), crd.GetName())
		}
		_, err := dyn.Resource(crdResource).Apply(ctx, crd.GetName(), crd, metav1.ApplyOptions{FieldManager: "gridsync-tests", Force: true})
		if err != nil {
			return fmt.Errorf("apply CRD %s: %w", crd.GetName(), err)
		}
	}
	disco, err := discovery.NewDiscoveryClientForConfig(cp.AdminConfig())
	if err != nil {
		return err
	}
	for _, crd := range crds {
		if err := waitCRDServed(ctx, dyn, disco, crd.GetName()); err != nil {
			return err
		}
	}
	return nil
}

func waitCRDServed(ctx context.Context, dyn dynamic.Interface, disco discovery.DiscoveryInterface, name string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var last error
	for {
		last = crdServed(ctx, dyn, disco, name)
		if last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("CRD %s not served: %w", name, last)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func crdServed(ctx context.Context, dyn dynamic.Interface, disco discovery.DiscoveryInterface, name string) error {
	crd, err := dyn.Resource(crdResource).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	conditions, _, _ := unstructured.NestedSlice(crd.Object, "status", "conditions")
	established := false
	for _, c := range conditions {
		cond, _ := c.(map[string]any)
		if cond["type"] == "Established" && cond["status"] == "True" {
			established = true
		}
	}
	if !established {
		return errors.New("not yet Established")
	}
	group, _, _ := unstructured.NestedString(crd.Object, "spec", "group")
	plural, _, _ := unstructured.NestedString(crd.Object, "spec", "names", "plural")
	versions, _, _ := unstructured.NestedSlice(crd.Object, "spec", "versions")
	for _, v := range versions {
		version, _ := v.(map[string]any)
		if served, _ := version["served"].(bool); !served {
			continue
		}
		gv := group + "/" + fmt.Sprint(version["name"])
		list, err := disco.ServerResourcesForGroupVersion(gv)
		if err != nil {
			if apierrors.IsNotFound(err) {
				return fmt.Errorf("%s not yet in discovery", gv)
			}
			return err
		}
		found := false
		for _, r := range list.APIResources {
			found = found || r.Name == plural
		}
		if !found {
			return fmt.Errorf("%s/%s not yet in discovery", gv, plural)
		}
	}
	return nil
}

// decodeYAMLObjects decodes every non-empty YAML document of a file.
func decodeYAMLObjects(path string, data []byte) ([]*unstructured.Unstructured, error) {
	decoder := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	var objects []*unstructured.Unstructured
	for {
		obj := &unstructured.Unstructured{}
		if err := decoder.Decode(&obj.Object); err != nil {
			if errors.Is(err, io.EOF) {
				return objects, nil
			}
			return nil, fmt.Errorf("decode %s: %w", path, err)
		}
		if len(obj.Object) > 0 {
			objects = append(objects, obj)
		}
	}
}
