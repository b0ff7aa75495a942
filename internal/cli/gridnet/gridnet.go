// Package gridnet is what the operator's commands do with a GridNetwork:
// change it without losing another writer's change, then wait for the
// agent to say, in its status, that the change took effect.
package gridnet

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gridsync/gridsync/api/v1alpha1"
)

// ErrChanging: the network changed under every write tried.
var ErrChanging = errors.New("the network kept changing under the write: try again")

// Change reads the network, lets change edit it, and patches what it
// changed on the version read (so another writer's change is never
// lost), again on a conflict (a few times); the operator needs get and
// patch. change reports whether it changed anything: nothing is written
// when not. It returns the network as written (or read).
func Change(ctx context.Context, c client.Client, name, owner string, change func(*v1alpha1.GridNetwork) (bool, error)) (*v1alpha1.GridNetwork, bool, error) {
	for range 5 {
		var n v1alpha1.GridNetwork
		if err := c.Get(ctx, types.NamespacedName{Name: name}, &n); err != nil {
			return nil, false, err
		}
		orig := n.DeepCopy()
		changed, err := change(&n)
		if err != nil || !changed {
			return &n, false, err
		}
		err = c.Patch(ctx, &n, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{}), client.FieldOwner(owner))
		if apierrors.IsConflict(err) {
			continue
		}
		return &n, err == nil, err
	}
	return nil, false, ErrChanging
}

// Until reads the network every poll (a second when zero) until done
// says it reached the state waited for, or ctx ends (its error then,
// with the network last read).
func Until(ctx context.Context, c client.Reader, name string, poll time.Duration, done func(*v1alpha1.GridNetwork) bool) (*v1alpha1.GridNetwork, error) {
	if poll <= 0 {
		poll = time.Second
	}
	var n v1alpha1.GridNetwork
	for {
		if err := c.Get(ctx, types.NamespacedName{Name: name}, &n); err != nil {
			return &n, err
		}
		if done(&n) {
			return &n, nil
		}
		select {
		case <-ctx.Done():
			return &n, ctx.Err()
		case <-time.After(poll):
		}
	}
}

// ErrCAKeyElsewhere: the grid CA Secret holds no key here; the command
// that needs it runs at the issuing site's cluster.
var ErrCAKeyElsewhere = errors.New("the grid CA's key is not in this cluster's Secret")

// CASecretWithKey reads a network's grid CA Secret (spec.tls.caSecretRef,
// ref) and wants its key in it: an error of the read is returned as it is
// (a Secret not found, a refusal), a Secret without the key is
// ErrCAKeyElsewhere.
func CASecretWithKey(ctx context.Context, c client.Reader, ref *v1alpha1.NamespacedName) (*corev1.Secret, error) {
	key := types.NamespacedName{Namespace: ref.Namespace, Name: ref.Name}
	var s corev1.Secret
	if err := c.Get(ctx, key, &s); err != nil {
		return nil, fmt.Errorf("the grid CA Secret %s: %w", key, err)
	}
	if len(s.Data[corev1.TLSPrivateKeyKey]) == 0 {
		return nil, fmt.Errorf("%w %s", ErrCAKeyElsewhere, key)
	}
	return &s, nil
}
