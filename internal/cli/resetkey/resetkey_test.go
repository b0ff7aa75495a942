package resetkey

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/gridsync/gridsync/api/v1alpha1"
)

// The command adds the site to the network's reset annotation (keeping
// the sites named already, never naming one twice), says which key the
// status holds the site to, and waits until the agent took the site off
// the annotation; a network with a grid CA is refused.
func TestResetSiteKeyAsksAndWaits(t *testing.T) {
	scheme := runtime.NewScheme()
	require.NoError(t, clientgoscheme.AddToScheme(scheme))
	require.NoError(t, v1alpha1.AddToScheme(scheme))
	fp := strings.Repeat("ab", 32)
	open := &v1alpha1.GridNetwork{ObjectMeta: metav1.ObjectMeta{Name: "open", Annotations: map[string]string{v1alpha1.ResetSiteKeyAnnotation: "site-x"}},
		Status: v1alpha1.GridNetworkStatus{SiteKeys: []v1alpha1.SiteKeyBinding{{Site: "site-c", Fingerprint: fp, Since: metav1.Now()}}}}
	signed := &v1alpha1.GridNetwork{ObjectMeta: metav1.ObjectMeta{Name: "signed"},
		Spec: v1alpha1.GridNetworkSpec{TLS: &v1alpha1.GridTLS{CASecretRef: &v1alpha1.NamespacedName{Name: "ca", Namespace: "ns"}}}}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(open, signed).WithStatusSubresource(open).Build()
	ctx := t.Context()
	annotation := func() string {
		var n v1alpha1.GridNetwork
		require.NoError(t, c.Get(ctx, types.NamespacedName{Name: "open"}, &n))
		return n.Annotations[v1alpha1.ResetSiteKeyAnnotation]
	}

	var out bytes.Buffer
	require.NoError(t, Run(ctx, c, Options{Network: "open", Site: "site-c", NoWait: true, Out: &out}))
	require.Equal(t, "site-x,site-c", annotation())
	require.Contains(t, out.String(), "held here to key "+fp)
	require.NoError(t, Run(ctx, c, Options{Network: "open", Site: "site-c", NoWait: true, Out: &out}))
	require.Equal(t, "site-x,site-c", annotation(), "a site named already is not named twice")

	// The agent applies it: the annotation goes, whenever it names the
	// site (so whether the command's write comes first or not).
	applied := make(chan struct{})
	agent := make(chan struct{})
	go func() {
		defer close(agent)
		for {
			select {
			case <-applied:
				return
			case <-time.After(10 * time.Millisecond):
			}
			var n v1alpha1.GridNetwork
			if c.Get(context.Background(), types.NamespacedName{Name: "open"}, &n) != nil || !strings.Contains(n.Annotations[v1alpha1.ResetSiteKeyAnnotation], "site-c") {
				continue
			}
			orig := n.DeepCopy()
			delete(n.Annotations, v1alpha1.ResetSiteKeyAnnotation)
			_ = c.Patch(context.Background(), &n, client.MergeFrom(orig))
		}
	}()
	out.Reset()
	waitCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	require.NoError(t, Run(waitCtx, c, Options{Network: "open", Site: "site-c", Out: &out, Poll: 10 * time.Millisecond}))
	close(applied)
	<-agent
	require.Contains(t, out.String(), "site site-c's key is reset here")

	err := Run(ctx, c, Options{Network: "signed", Site: "site-c", Out: &out})
	require.ErrorContains(t, err, "has a grid CA")
	require.Error(t, Run(ctx, c, Options{Network: "open", Site: "Not A Site", Out: &out}), "not a site name")
}
