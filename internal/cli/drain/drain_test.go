package drain

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/gridsync/gridsync/api/v1alpha1"
)

// The time given running out while the overlay is being read is the wait
// ending, said as ErrWaiting, not an API error: the loop's error handling
// alone (the API server's behaviour is the drain test of package
// controller's).
func TestADeadlineDuringAReadIsTheWaitEnding(t *testing.T) {
	scheme := runtime.NewScheme()
	require.NoError(t, clientgoscheme.AddToScheme(scheme))
	require.NoError(t, v1alpha1.AddToScheme(scheme))
	network := &v1alpha1.GridNetwork{ObjectMeta: metav1.ObjectMeta{Name: "net"},
		Spec: v1alpha1.GridNetworkSpec{ConsumerGateways: []v1alpha1.ConsumerGateway{{Name: "edge", Namespace: "gw"}}}}
	provider := &v1alpha1.InferenceProvider{ObjectMeta: metav1.ObjectMeta{Name: "p"}, Spec: v1alpha1.InferenceProviderSpec{GridNetworkRef: "net"}}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(network, provider).WithInterceptorFuncs(interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if _, overlay := obj.(*corev1.ConfigMap); overlay {
				<-ctx.Done() // a read the deadline overtakes
				return ctx.Err()
			}
			return c.Get(ctx, key, obj, opts...)
		},
	}).Build()
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	err := Run(ctx, c, Options{Provider: "p", Poll: 10 * time.Millisecond})
	require.Error(t, err)
	assert.True(t, errors.Is(err, ErrWaiting), "%v", err)
	assert.Contains(t, err.Error(), "no gateway looked at yet")

	// An API error with time left is an error of its own.
	broken := fake.NewClientBuilder().WithScheme(scheme).WithObjects(network, provider).WithInterceptorFuncs(interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if _, overlay := obj.(*corev1.ConfigMap); overlay {
				return errors.New("connection refused")
			}
			return c.Get(ctx, key, obj, opts...)
		},
	}).Build()
	err = Run(t.Context(), broken, Options{Provider: "p", Poll: 10 * time.Millisecond})
	require.Error(t, err)
	assert.False(t, errors.Is(err, ErrWaiting))
	assert.Contains(t, err.Error(), "connection refused")
}
