package controller_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gridsync/gridsync/api/v1alpha1"
	crds "github.com/gridsync/gridsync/charts/gridsync-agent/files/crds"
	"github.com/gridsync/gridsync/shared/envelope"
	"github.com/gridsync/gridsync/test/controlplane"
)

// gridKinds are the cluster-scoped Grid resources. Every agent a test
// starts reads all of them, so an object one test leaves behind is
// reconciled by the agents of every later test, without the RBAC of its
// namespaces: errors that slow the package and count in the metrics the
// tests assert on.
var gridKinds = []string{"GridNetwork", "InferenceProvider", "GridSite"}

// gridObjects lists the metadata of every Grid object in the cluster.
func gridObjects(ctx context.Context, c client.Client) ([]metav1.PartialObjectMetadata, error) {
	var out []metav1.PartialObjectMetadata
	for _, kind := range gridKinds {
		list := &metav1.PartialObjectMetadataList{}
		list.SetGroupVersionKind(v1alpha1.GroupVersion.WithKind(kind + "List"))
		if err := c.List(ctx, list); err != nil {
			return nil, fmt.Errorf("list %s: %w", kind, err)
		}
		for _, o := range list.Items {
			o.SetGroupVersionKind(v1alpha1.GroupVersion.WithKind(kind))
			out = append(out, o)
		}
	}
	return out, nil
}

func describe(objs []metav1.PartialObjectMetadata) string {
	names := make([]string, len(objs))
	for i, o := range objs {
		names[i] = o.Kind + " " + o.Name
		if o.DeletionTimestamp != nil {
			names[i] += fmt.Sprintf(" (deleted, held by %v)", o.Finalizers)
		}
	}
	return strings.Join(names, ", ")
}

// removeGridObjects deletes objs and waits until they are gone. Their
// finalizers are taken off: the agent that would run its own (withdrawing
// the network's overlays) has stopped with the test, and no other test
// reads those overlays' namespaces.
func removeGridObjects(ctx context.Context, c client.Client, objs []metav1.PartialObjectMetadata) error {
	for i := range objs {
		if err := c.Delete(ctx, &objs[i]); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("delete %s %s: %w", objs[i].Kind, objs[i].Name, err)
		}
	}
	for {
		var left []metav1.PartialObjectMetadata
		for i := range objs {
			o := objs[i].DeepCopy()
			err := c.Get(ctx, client.ObjectKeyFromObject(o), o)
			if apierrors.IsNotFound(err) {
				continue
			}
			if err != nil {
				return fmt.Errorf("read %s %s: %w", o.Kind, o.Name, err)
			}
			if len(o.Finalizers) > 0 {
				patch := client.MergeFrom(o.DeepCopy())
				o.Finalizers = nil
				if err := c.Patch(ctx, o, patch); err != nil && !apierrors.IsNotFound(err) {
					return fmt.Errorf("remove the finalizers of %s %s: %w", o.Kind, o.Name, err)
				}
			}
			left = append(left, *o)
		}
		if len(left) == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("still there: %s", describe(left))
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// deleteGridObjects removes the test's cluster-scoped objects (those
// labelled with its id, and the GridSites its agents made for its
// networks) and waits until they are gone, so that the next test's agent
// does not see them. A control plane serves one test at a time: a Grid
// object with no test label that is still there was left by this test,
// which fails.
func (e *env) deleteGridObjects() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	all, err := gridObjects(ctx, e.admin)
	if err != nil {
		e.t.Errorf("list the Grid objects: %v", err)
		return
	}
	networks := map[string]string{} // name: test label
	for _, o := range all {
		if o.Kind == "GridNetwork" {
			networks[o.Name] = o.Labels["test"]
		}
	}
	var remove, unlabelled []metav1.PartialObjectMetadata
	for _, o := range all {
		made := o.Labels[envelope.LabelManagedBy] != "" // by an agent, for a network
		network, exists := networks[o.Labels[envelope.LabelNetwork]]
		switch {
		case o.Labels["test"] == e.id, made && (network == e.id || !exists):
			remove = append(remove, o)
		case o.Labels["test"] == "" && !made:
			unlabelled = append(unlabelled, o)
		}
	}
	if len(unlabelled) > 0 {
		e.t.Errorf("Grid objects left behind without a test label (env.label gives one, and the test's cleanup then deletes them): %s", describe(unlabelled))
		remove = append(remove, unlabelled...)
	}
	if err := removeGridObjects(ctx, e.admin, remove); err != nil {
		e.t.Errorf("delete the test's Grid objects: %v", err)
	}
}

// label marks obj as the test's: its cleanup deletes it.
func (e *env) label(obj client.Object) {
	labels := obj.GetLabels()
	if labels == nil {
		labels = map[string]string{}
	}
	labels["test"] = e.id
	obj.SetLabels(labels)
}

// lendPlanes installs the CRDs in each control plane, lends them to the
// package's tests (planes), then fails the package if any Grid object is
// still in one: a test that leaves one behind without running into its
// own cleanup's check (one without an env) is found here.
type lendPlanes struct {
	m      *testing.M
	planes []**controlplane.ControlPlane
}

func (r lendPlanes) Run() int {
	planes = make(chan *controlplane.ControlPlane, len(r.planes))
	for _, p := range r.planes {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		err := (*p).InstallCRDsFS(ctx, crds.Manifests)
		cancel()
		if err != nil {
			fmt.Fprintf(os.Stderr, "FAIL: install the CRDs: %v\n", err)
			return 1
		}
		planes <- *p
	}
	code := r.m.Run()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, p := range r.planes {
		c, err := client.New((*p).AdminConfig(), client.Options{})
		if err == nil {
			var left []metav1.PartialObjectMetadata
			if left, err = gridObjects(ctx, c); err == nil && len(left) > 0 {
				err = fmt.Errorf("the tests left Grid objects behind: %s", describe(left))
			}
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "FAIL: %v\n", err)
			code = 1
		}
	}
	return code
}
