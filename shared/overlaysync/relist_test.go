package overlaysync_test

import (
	"context"
	"encoding/json"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/gridsync/gridsync/shared/envelope"
	"github.com/gridsync/gridsync/shared/overlaysync"
)

// A relist asks for any state not older than the resourceVersion already
// seen; a server that cannot reach it in time (an etcd restored from an
// older backup) answers "too large resource version", and the Syncer then
// reads consistently instead of failing for ever. The server is scripted:
// no real one can be made to give that answer on demand. The relist on a
// real API server is TestRelistsAfterCompactionAnswers410Gone.
func TestRelistFallsBackToAConsistentReadWhenTheVersionIsTooLarge(t *testing.T) {
	scope := envelope.Scope{Network: "net", Gateway: "gw", Namespace: "ns", LocalSite: "east"}
	doc, revision := buildEnvelope(t, scope, 1, 0)
	var mu sync.Mutex
	var requests []string
	watches := 0
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		mu.Lock()
		requests = append(requests, q.Get("watch")+"|"+q.Get("resourceVersion")+"|"+q.Get("resourceVersionMatch"))
		watches += map[bool]int{true: 1}[q.Get("watch") == "true"]
		first := watches == 1
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		switch {
		case q.Get("watch") == "true" && first:
			// The watch is answered 410 Gone: the Syncer must relist.
			_ = json.NewEncoder(w).Encode(map[string]any{"type": "ERROR", "object": metav1.Status{
				TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}, Status: metav1.StatusFailure,
				Code: http.StatusGone, Reason: metav1.StatusReasonExpired, Message: "too old resource version",
			}})
		case q.Get("watch") == "true":
			<-r.Context().Done()
		case q.Get("resourceVersionMatch") == string(metav1.ResourceVersionMatchNotOlderThan):
			w.WriteHeader(http.StatusGatewayTimeout)
			_ = json.NewEncoder(w).Encode(metav1.Status{
				TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}, Status: metav1.StatusFailure,
				Code: http.StatusGatewayTimeout, Reason: metav1.StatusReasonTimeout, Message: "Too large resource version",
				Details: &metav1.StatusDetails{Causes: []metav1.StatusCause{{Type: metav1.CauseTypeResourceVersionTooLarge}}},
			})
		default:
			_ = json.NewEncoder(w).Encode(corev1.ConfigMapList{
				TypeMeta: metav1.TypeMeta{Kind: "ConfigMapList", APIVersion: "v1"},
				ListMeta: metav1.ListMeta{ResourceVersion: "7"},
				Items: []corev1.ConfigMap{{
					ObjectMeta: metav1.ObjectMeta{Name: "cm", Namespace: "ns", ResourceVersion: "7"},
					Data:       map[string]string{envelope.DataKeyEnvelope: string(doc)},
				}},
			})
		}
	}))
	t.Cleanup(srv.Close)
	cfg := &rest.Config{Host: srv.URL, TLSClientConfig: rest.TLSClientConfig{
		CAData: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}),
	}}
	s, err := overlaysync.New(cfg, overlaysync.Options{
		Namespace: "ns", ConfigMap: "cm", DataKey: envelope.DataKeyEnvelope,
		Output: filepath.Join(t.TempDir(), "routing-overlay.json"), Expect: scope,
		BackoffMin: 10 * time.Millisecond, BackoffMax: 20 * time.Millisecond,
	})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		assert.NoError(t, <-done)
	})

	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return watches >= 2
	}, 10*time.Second, 10*time.Millisecond)
	mu.Lock()
	got := append([]string(nil), requests[:5]...)
	mu.Unlock()
	assert.Equal(t, []string{
		"||",              // the first list: a consistent read
		"true|7|",         // the watch from what it returned, answered 410 Gone
		"|7|NotOlderThan", // the relist: from the watch cache, not older than 7
		"||",              // too large: a consistent read instead
		"true|7|",         // and the watch again
	}, got)
	assert.Equal(t, revision, s.Status().WrittenRevision)
}
