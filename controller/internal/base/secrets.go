package base

import (
	"context"
	"unicode/utf8"

	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gridsync/gridsync/controller/probe"
	assess "github.com/gridsync/gridsync/controller/providerpolicy"
)

// SecretReader answers assess.Secrets with gets straight from the API
// server: the agent never lists, watches or caches Secrets, and keeps
// nothing of a value but whether it is usable. One reader serves one
// reconcile, reading each Secret once.
type SecretReader struct {
	ctx    context.Context
	reader client.Reader
	memo   map[types.NamespacedName]SecretShapeResult
}

type SecretShapeResult struct {
	Shape assess.SecretShape
	Found bool
	Err   error
	// Version is the Secret's resourceVersion: a rotation changes it.
	Version string
}

func NewSecretReader(ctx context.Context, reader client.Reader) *SecretReader {
	return &SecretReader{ctx: ctx, reader: reader, memo: map[types.NamespacedName]SecretShapeResult{}}
}

// prefetchConcurrency bounds the gets in flight when a reconcile reads the
// Secrets of many providers: one at a time, a network of a hundred
// providers waited for a hundred round trips.
const prefetchConcurrency = 8

// Prefetch reads the Secrets at keys concurrently into the memo.
func (r *SecretReader) Prefetch(keys []types.NamespacedName) {
	var todo []types.NamespacedName
	seen := map[types.NamespacedName]bool{}
	for _, key := range keys {
		if _, done := r.memo[key]; !done && !seen[key] {
			seen[key] = true
			todo = append(todo, key)
		}
	}
	results := make([]SecretShapeResult, len(todo))
	var g errgroup.Group
	g.SetLimit(prefetchConcurrency)
	for i, key := range todo {
		g.Go(func() error {
			results[i] = r.get(key) // each goroutine its own slot
			return nil
		})
	}
	_ = g.Wait() // errors live in the results
	for i, key := range todo {
		r.memo[key] = results[i]
	}
}

func (r *SecretReader) SecretShape(namespace, name string) (assess.SecretShape, bool, error) {
	res := r.Read(namespace, name)
	return res.Shape, res.Found, res.Err
}

func (r *SecretReader) Read(namespace, name string) SecretShapeResult {
	key := types.NamespacedName{Namespace: namespace, Name: name}
	if res, ok := r.memo[key]; ok {
		return res
	}
	res := r.get(key)
	r.memo[key] = res
	return res
}

// get reads one Secret's shape from the API server.
func (r *SecretReader) get(key types.NamespacedName) SecretShapeResult {
	var res SecretShapeResult
	var s corev1.Secret
	switch err := r.reader.Get(r.ctx, key, &s); {
	case apierrors.IsNotFound(err):
	case err != nil:
		res.Err = err
	default:
		res.Found, res.Version = true, s.ResourceVersion
		res.Shape = make(assess.SecretShape, len(s.Data))
		for k, v := range s.Data {
			res.Shape[k] = len(v) > 0 && utf8.Valid(v)
		}
	}
	return res
}

// ReadToken reads a bearer token straight from the API server, for a
// health probe: the cache has no values. With a selector, a Secret whose
// labels do not match gives no token (probe.ErrTokenWithheld): a cluster
// owner who does not trust every InferenceProvider writer marks the
// Secrets that may be sent.
func ReadToken(reader client.Reader, namespace, name, key string, selector labels.Selector) func(context.Context) (string, error) {
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
