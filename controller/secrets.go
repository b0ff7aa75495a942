package controller

import (
	"context"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gridsync/gridsync/controller/assess"
	"github.com/gridsync/gridsync/controller/probe"
)

// A Secret in the controller's cache keeps its keys, each with one of
// these markers instead of its value: the cache never holds a token.
const (
	usableValue   = "1"
	unusableValue = "0"
)

// secretShape is the cache transform for Secrets. Annotations go too:
// kubectl's last-applied-configuration annotation holds the data.
func secretShape(obj any) (any, error) {
	s, ok := obj.(*corev1.Secret)
	if !ok {
		return obj, nil // a tombstone or another type: nothing to strip
	}
	shaped := &corev1.Secret{
		TypeMeta: s.TypeMeta,
		ObjectMeta: metav1.ObjectMeta{
			Name: s.Name, Namespace: s.Namespace, UID: s.UID,
			ResourceVersion: s.ResourceVersion, Generation: s.Generation,
			CreationTimestamp: s.CreationTimestamp, DeletionTimestamp: s.DeletionTimestamp,
		},
		Type: s.Type,
		Data: make(map[string][]byte, len(s.Data)),
	}
	for k, v := range s.Data {
		if len(v) > 0 && utf8.Valid(v) {
			shaped.Data[k] = []byte(usableValue)
		} else {
			shaped.Data[k] = []byte(unusableValue)
		}
	}
	return shaped, nil
}

// cachedSecrets answers assess.Secrets from the shaped cache.
type cachedSecrets struct {
	ctx    context.Context
	reader client.Reader
}

func (c cachedSecrets) SecretShape(namespace, name string) (assess.SecretShape, bool, error) {
	var s corev1.Secret
	err := c.reader.Get(c.ctx, types.NamespacedName{Namespace: namespace, Name: name}, &s)
	if apierrors.IsNotFound(err) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	shape := make(assess.SecretShape, len(s.Data))
	for k, v := range s.Data {
		shape[k] = string(v) == usableValue
	}
	return shape, true, nil
}

// readToken reads a bearer token straight from the API server, for a
// health probe: the cache has no values. With a selector, a Secret whose
// labels do not match gives no token (probe.ErrTokenWithheld): a cluster
// owner who does not trust every InferenceProvider writer marks the
// Secrets that may be sent.
func readToken(reader client.Reader, namespace, name, key string, selector labels.Selector) func(context.Context) (string, error) {
	return func(ctx context.Context) (string, error) {
		var s corev1.Secret
		if err := reader.Get(ctx, types.NamespacedName{Namespace: namespace, Name: name}, &s); err != nil {
			return "", err
		}
		if selector != nil && !selector.Matches(labels.Set(s.Labels)) {
			return "", probe.ErrTokenWithheld
		}
		v := s.Data[key]
		if len(v) == 0 || !utf8.Valid(v) {
			return "", nil
		}
		return string(v), nil
	}
}
