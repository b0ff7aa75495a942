package controlplane

import (
	"context"
	"fmt"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
)

// EnsureNamespace creates a namespace unless it exists.
func (cp *ControlPlane) EnsureNamespace(ctx context.Context, name string) error {
	_, err := cp.AdminClient().CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create namespace %s: %w", name, err)
	}
	return nil
}

// ServiceAccountConfig returns a client configuration that authenticates as
// the ServiceAccount namespace/name with a token from the TokenRequest API,
// exactly as a pod's projected token does. The namespace and ServiceAccount
// are created when missing. Nothing is granted: RBAC decides.
func (cp *ControlPlane) ServiceAccountConfig(ctx context.Context, namespace, name string) (*rest.Config, error) {
	if err := cp.EnsureNamespace(ctx, namespace); err != nil {
		return nil, err
	}
	admin := cp.AdminClient()
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace}}
	if _, err := admin.CoreV1().ServiceAccounts(namespace).Create(ctx, sa, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, fmt.Errorf("create service account %s/%s: %w", namespace, name, err)
	}
	expiry := int64(3600)
	token, err := admin.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, name, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &expiry},
	}, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("request token for %s/%s: %w", namespace, name, err)
	}
	return &rest.Config{
		Host:            cp.host,
		BearerToken:     token.Status.Token,
		TLSClientConfig: rest.TLSClientConfig{CAData: cp.pki.caPEM},
		QPS:             -1,
		Burst:           -1,
	}, nil
}

// ServiceAccountToken returns a token of the ServiceAccount namespace/name
// for audience, as a projected token volume with that audience holds it.
// The namespace and ServiceAccount are created when missing.
func (cp *ControlPlane) ServiceAccountToken(ctx context.Context, namespace, name, audience string) (string, error) {
	if err := cp.EnsureNamespace(ctx, namespace); err != nil {
		return "", err
	}
	admin := cp.AdminClient()
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace}}
	if _, err := admin.CoreV1().ServiceAccounts(namespace).Create(ctx, sa, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return "", fmt.Errorf("create service account %s/%s: %w", namespace, name, err)
	}
	expiry := int64(3600)
	token, err := admin.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, name, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &expiry, Audiences: []string{audience}},
	}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("request token for %s/%s: %w", namespace, name, err)
	}
	return token.Status.Token, nil
}

// PodToken returns a token of the ServiceAccount namespace/serviceAccount
// bound to pod namespace/pod, for audience: what the kubelet projects
// into that pod. The pod object is created when missing (no node runs it:
// a bound token needs the object, not a running container), and so are
// the namespace and ServiceAccount.
func (cp *ControlPlane) PodToken(ctx context.Context, namespace, serviceAccount, pod, audience string) (string, error) {
	if _, err := cp.ServiceAccountToken(ctx, namespace, serviceAccount, audience); err != nil {
		return "", err
	}
	admin := cp.AdminClient()
	p, err := admin.CoreV1().Pods(namespace).Get(ctx, pod, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		p, err = admin.CoreV1().Pods(namespace).Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: pod, Namespace: namespace},
			Spec: corev1.PodSpec{
				ServiceAccountName: serviceAccount,
				Containers:         []corev1.Container{{Name: "gateway", Image: "registry.invalid/gateway:none"}},
			},
		}, metav1.CreateOptions{})
	}
	if err != nil {
		return "", fmt.Errorf("pod %s/%s: %w", namespace, pod, err)
	}
	expiry := int64(3600)
	token, err := admin.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, serviceAccount, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{
			ExpirationSeconds: &expiry,
			Audiences:         []string{audience},
			BoundObjectRef:    &authenticationv1.BoundObjectReference{APIVersion: "v1", Kind: "Pod", Name: p.Name, UID: p.UID},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("request a token of %s/%s bound to pod %s: %w", namespace, serviceAccount, pod, err)
	}
	return token.Status.Token, nil
}
