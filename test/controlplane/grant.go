package controlplane

import (
	"context"
	"fmt"
	"strings"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// ConfigMapReaderConfig gives the ServiceAccount namespace/serviceAccount
// the overlay sidecar's least-privilege Role (get, list and watch on the
// one ConfigMap configMap) and returns a client configuration with its
// token. It returns once the authorizer enforces the binding.
func (cp *ControlPlane) ConfigMapReaderConfig(ctx context.Context, namespace, serviceAccount, configMap string) (*rest.Config, error) {
	if err := cp.EnsureNamespace(ctx, namespace); err != nil {
		return nil, err
	}
	admin := cp.AdminClient()
	name := serviceAccount + "-overlay-reader"
	_, err := admin.RbacV1().Roles(namespace).Create(ctx, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Rules: []rbacv1.PolicyRule{{
			APIGroups:     []string{""},
			Resources:     []string{"configmaps"},
			ResourceNames: []string{configMap},
			Verbs:         []string{"get", "list", "watch"},
		}},
	}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, fmt.Errorf("create role: %w", err)
	}
	_, err = admin.RbacV1().RoleBindings(namespace).Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: serviceAccount, Namespace: namespace}},
	}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, fmt.Errorf("create role binding: %w", err)
	}
	cfg, err := cp.ServiceAccountConfig(ctx, namespace, serviceAccount)
	if err != nil {
		return nil, err
	}
	// The authorizer learns of new bindings asynchronously.
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := client.CoreV1().ConfigMaps(namespace).Get(ctx, configMap, metav1.GetOptions{})
		if err == nil || apierrors.IsNotFound(err) {
			return cfg, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("role binding for %s/%s not in effect: %w", namespace, serviceAccount, err)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// WriteKubeconfig writes a kubeconfig file for a token configuration (as
// returned by ServiceAccountConfig), for binaries run with --kubeconfig.
func WriteKubeconfig(cfg *rest.Config, path string) error {
	kc := clientcmdapi.NewConfig()
	kc.Clusters["gridsync-test"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["gridsync-test"] = &clientcmdapi.AuthInfo{Token: cfg.BearerToken, ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData}
	kc.Contexts["gridsync-test"] = &clientcmdapi.Context{Cluster: "gridsync-test", AuthInfo: "gridsync-test"}
	kc.CurrentContext = "gridsync-test"
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		return fmt.Errorf("write kubeconfig: %w", err)
	}
	return nil
}

// Grant binds rules to the ServiceAccount saNamespace/serviceAccount under
// name: as a Role and RoleBinding in namespace, or as a ClusterRole and
// ClusterRoleBinding when namespace is empty. It returns once the
// authorizer allows the first verb of every rule.
func (cp *ControlPlane) Grant(ctx context.Context, saNamespace, serviceAccount, name, namespace string, rules []rbacv1.PolicyRule) error {
	admin := cp.AdminClient()
	subject := []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: serviceAccount, Namespace: saNamespace}}
	var err error
	if namespace == "" {
		_, err = admin.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: rules}, metav1.CreateOptions{})
		if err == nil || apierrors.IsAlreadyExists(err) {
			_, err = admin.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
				ObjectMeta: metav1.ObjectMeta{Name: name},
				RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name},
				Subjects:   subject,
			}, metav1.CreateOptions{})
		}
	} else {
		if err := cp.EnsureNamespace(ctx, namespace); err != nil {
			return err
		}
		_, err = admin.RbacV1().Roles(namespace).Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: rules}, metav1.CreateOptions{})
		if err == nil || apierrors.IsAlreadyExists(err) {
			_, err = admin.RbacV1().RoleBindings(namespace).Create(ctx, &rbacv1.RoleBinding{
				ObjectMeta: metav1.ObjectMeta{Name: name},
				RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name},
				Subjects:   subject,
			}, metav1.CreateOptions{})
		}
	}
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("grant %s to %s/%s: %w", name, saNamespace, serviceAccount, err)
	}
	user := "system:serviceaccount:" + saNamespace + ":" + serviceAccount
	for _, rule := range rules {
		if len(rule.Resources) == 0 {
			continue // a non-resource URL: nothing here to wait on
		}
		attrs := &authorizationv1.ResourceAttributes{Namespace: namespace, Verb: rule.Verbs[0], Group: rule.APIGroups[0]}
		attrs.Resource, attrs.Subresource, _ = strings.Cut(rule.Resources[0], "/")
		if len(rule.ResourceNames) > 0 {
			attrs.Name = rule.ResourceNames[0]
		}
		if err := cp.waitAllowed(ctx, user, attrs); err != nil {
			return err
		}
	}
	return nil
}

// waitAllowed waits until the authorizer allows user what attrs describe:
// it learns of new bindings asynchronously.
func (cp *ControlPlane) waitAllowed(ctx context.Context, user string, attrs *authorizationv1.ResourceAttributes) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		sar, err := cp.AdminClient().AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{
			Spec: authorizationv1.SubjectAccessReviewSpec{User: user, ResourceAttributes: attrs},
		}, metav1.CreateOptions{})
		if err == nil && sar.Status.Allowed {
			return nil
		}
		if time.Now().After(deadline) {
			if err != nil {
				return fmt.Errorf("review access of %s: %w", user, err)
			}
			return fmt.Errorf("%s is still not allowed to %s %s/%s", user, attrs.Verb, attrs.Group, attrs.Resource)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}
