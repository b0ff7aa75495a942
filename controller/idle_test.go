package controller_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gridsync/gridsync/api/v1alpha1"
	"github.com/gridsync/gridsync/shared/envelope"
)

// Once everything is published, an idle cluster sees no write at all from
// the agent: no ConfigMap apply, no status update (upstream's
// unconditional writes once made hundreds per second). A change that
// alters nothing the overlay depends on (a label on the credential
// Secret) makes both reconcilers run during the window; they must still
// write nothing.
func TestIdleClusterSeesNoWritesForTenSeconds(t *testing.T) {
	e := newEnv(t)
	gws := []v1alpha1.ConsumerGateway{e.gateway("edge-a", "east"), e.gateway("edge-b", "west")}
	network := e.network(gws...)
	e.create(network)
	secret := e.secret("token", map[string][]byte{"token": []byte("t")})
	e.create(secret)
	p := e.provider("a", network.Name, "m1", "m2")
	p.Spec.Auth = e.bearer("token", "token")
	e.create(p)
	e.create(e.provider("b", network.Name, "m1"))
	a := e.startAgent()
	for _, gw := range gws {
		e.overlayOf(network, gw, func(r envelope.Result) bool { return r.CandidateCount == 3 })
	}
	e.providerPhase(p, v1alpha1.ProviderAvailable, "Ready")
	e.eventually("network status settled", func() (bool, string) {
		var n v1alpha1.GridNetwork
		require.NoError(t, e.admin.Get(e.ctx, client.ObjectKeyFromObject(network), &n))
		return n.Status.DistributedCount == 2, "not yet"
	})
	time.Sleep(time.Second) // let the reconciles triggered by the last writes finish

	watchList := func(list client.ObjectList, opts ...client.ListOption) watch.Interface {
		w, err := client.NewWithWatch(e.cp.AdminConfig(), client.Options{Scheme: e.admin.Scheme()})
		require.NoError(t, err)
		wi, err := w.Watch(e.ctx, list, opts...)
		require.NoError(t, err)
		t.Cleanup(wi.Stop)
		return wi
	}
	watches := map[string]watch.Interface{
		"ConfigMaps": watchList(&metav1.PartialObjectMetadataList{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMapList"}}, client.InNamespace(e.gwNS)),
		"networks":   watchList(&v1alpha1.GridNetworkList{}, client.MatchingLabels{"test": e.id}),
		"providers":  watchList(&v1alpha1.InferenceProviderList{}, client.MatchingLabels{"test": e.id}),
	}
	before := a.requests.count()
	ctx, cancel := context.WithTimeout(e.ctx, 10*time.Second)
	defer cancel()
	var mu sync.Mutex
	writes := map[string]int{}
	for what, w := range watches {
		go func() {
			for {
				select {
				case ev, ok := <-w.ResultChan():
					if !ok {
						return
					}
					if ev.Type != watch.Added { // a watch starts with the current objects
						mu.Lock()
						writes[what]++
						mu.Unlock()
					}
				case <-ctx.Done():
					return
				}
			}
		}()
	}
	time.Sleep(2 * time.Second)
	update(e, secret, func(s *corev1.Secret) { s.Labels = map[string]string{"touched": "yes"} })
	<-ctx.Done()
	for _, w := range watches {
		w.Stop()
	}
	mu.Lock()
	defer mu.Unlock()
	assert.Empty(t, writes, "objects changed during 10 idle seconds")
	assert.Empty(t, a.requests.since(before), "write requests of the agent during 10 idle seconds")
}
