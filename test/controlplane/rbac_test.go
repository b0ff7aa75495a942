package controlplane_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
)

// The sidecar's least-privilege Role: get/list/watch on one named
// ConfigMap. These tests pin down what kube-apiserver actually allows with
// resourceNames, because the sidecar's watch depends on it.
func TestServiceAccountRestrictedToOneNamedConfigMap(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const allowed, other = "grid-overlay-net-gw", "another-configmap"
	ns := uniqueNamespace(t, "rbac")

	admin := cp.AdminClient()
	for _, name := range []string{allowed, other} {
		_, err := admin.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Data:       map[string]string{"k": "v"},
		}, metav1.CreateOptions{})
		require.NoError(t, err)
	}
	_, err := admin.RbacV1().Roles(ns).Create(ctx, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "overlay-reader"},
		Rules: []rbacv1.PolicyRule{{
			APIGroups:     []string{""},
			Resources:     []string{"configmaps"},
			ResourceNames: []string{allowed},
			Verbs:         []string{"get", "list", "watch"},
		}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = admin.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "overlay-reader"},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "overlay-reader"},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: "sidecar", Namespace: ns}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)

	cfg, err := cp.ServiceAccountConfig(ctx, ns, "sidecar")
	require.NoError(t, err)
	sa, err := kubernetes.NewForConfig(cfg)
	require.NoError(t, err)
	configMaps := sa.CoreV1().ConfigMaps(ns)
	byName := func(name string) metav1.ListOptions {
		return metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", name).String()}
	}

	// RBAC bindings take effect asynchronously in the authorizer's cache.
	require.Eventually(t, func() bool {
		_, err := configMaps.Get(ctx, allowed, metav1.GetOptions{})
		return err == nil
	}, 10*time.Second, 50*time.Millisecond, "the named ConfigMap must be readable")

	list, err := configMaps.List(ctx, byName(allowed))
	require.NoError(t, err, "list with metadata.name selector")
	require.Len(t, list.Items, 1)
	assert.Equal(t, allowed, list.Items[0].Name)

	fromList := byName(allowed)
	fromList.ResourceVersion = list.ResourceVersion
	w, err := configMaps.Watch(ctx, fromList)
	require.NoError(t, err, "watch with metadata.name selector")
	defer w.Stop()
	_, err = admin.CoreV1().ConfigMaps(ns).Update(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: allowed},
		Data:       map[string]string{"k": "changed"},
	}, metav1.UpdateOptions{})
	require.NoError(t, err)
	select {
	case ev := <-w.ResultChan():
		require.Equal(t, watch.Modified, ev.Type)
		assert.Equal(t, "changed", ev.Object.(*corev1.ConfigMap).Data["k"])
	case <-ctx.Done():
		t.Fatal("no watch event for the named ConfigMap")
	}

	forbidden := map[string]func() error{
		"get another ConfigMap": func() error {
			_, err := configMaps.Get(ctx, other, metav1.GetOptions{})
			return err
		},
		"list without a selector": func() error {
			_, err := configMaps.List(ctx, metav1.ListOptions{})
			return err
		},
		"list another name": func() error {
			_, err := configMaps.List(ctx, byName(other))
			return err
		},
		"watch without a selector": func() error {
			_, err := configMaps.Watch(ctx, metav1.ListOptions{})
			return err
		},
		"list in another namespace": func() error {
			_, err := sa.CoreV1().ConfigMaps("default").List(ctx, byName(allowed))
			return err
		},
		"read a Secret": func() error {
			_, err := sa.CoreV1().Secrets(ns).List(ctx, metav1.ListOptions{})
			return err
		},
		"update the named ConfigMap": func() error {
			_, err := configMaps.Update(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: allowed}}, metav1.UpdateOptions{})
			return err
		},
	}
	for name, call := range forbidden {
		t.Run(name, func(t *testing.T) {
			err := call()
			assert.True(t, apierrors.IsForbidden(err), "want Forbidden, got %v", err)
		})
	}
}

func TestServiceAccountConfigAuthenticatesAsTheServiceAccount(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ns := uniqueNamespace(t, "who-am-i")
	cfg, err := cp.ServiceAccountConfig(ctx, ns, "probe")
	require.NoError(t, err)
	client, err := kubernetes.NewForConfig(cfg)
	require.NoError(t, err)
	review, err := client.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	require.NoError(t, err)
	assert.Equal(t, "system:serviceaccount:"+ns+":probe", review.Status.UserInfo.Username)
}
