package overlaysync_test

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gridsync/gridsync/shared/overlaysync"
	"github.com/gridsync/gridsync/test/controlplane"
)

// fastRetry keeps outage tests short: the production backoff starts at 1s.
func fastRetry(opts overlaysync.Options) overlaysync.Options {
	opts.BackoffMin, opts.BackoffMax = 50*time.Millisecond, 200*time.Millisecond
	return opts
}

func TestCatchesUpAfterKubeAPIServerRestartWithoutRestarting(t *testing.T) {
	g := newGateway(t)
	r := g.start(fastRetry(g.options()))
	doc, _ := g.envelopeFor(1)
	r.waitObserved(t, g.putEnvelope(doc))

	require.NoError(t, cp.StopAPIServer())
	st := r.waitStatus(t, "degraded while the API is down", func(st overlaysync.Status) bool {
		return st.DegradedReason == overlaysync.ReasonAPIUnreachable
	})
	assert.True(t, st.Ready, "the last-known-good keeps serving")
	assert.Equal(t, overlaysync.StateReadyDegraded, st.State)

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	require.NoError(t, cp.StartAPIServer(ctx))

	next, revision := g.envelopeFor(2)
	st = r.waitObserved(t, g.putEnvelope(next))
	assert.Equal(t, overlaysync.StateReady, st.State)
	assert.Equal(t, revision, st.WrittenRevision)
	assert.Equal(t, string(next), readOutput(t, g.output()))
	assert.Positive(t, r.metric(t, "grid_overlay_sync_watch_restarts_total", "reason", "watch_error"))
}

func TestNoticesChangesAndADeletionMadeWhileDisconnected(t *testing.T) {
	g := newGateway(t)
	proxy := newProxy(t)
	r := g.start(fastRetry(g.options()), proxy.Config(g.saConfig))
	first, firstRevision := g.envelopeFor(1)
	r.waitObserved(t, g.putEnvelope(first))

	// Changed while the sidecar is cut off: the change must arrive.
	proxy.Cut()
	r.waitStatus(t, "cut off", func(st overlaysync.Status) bool { return st.DegradedReason == overlaysync.ReasonAPIUnreachable })
	second, secondRevision := g.envelopeFor(2)
	g.putEnvelope(second)
	proxy.Restore()
	st := r.waitStatus(t, "change made while cut off delivered", func(st overlaysync.Status) bool { return st.WrittenRevision == secondRevision })
	assert.Equal(t, overlaysync.StateReady, st.State)
	assert.NotEqual(t, firstRevision, secondRevision)

	// Deleted while cut off: noticed after reconnecting, file kept.
	proxy.Cut()
	r.waitStatus(t, "cut off again", func(st overlaysync.Status) bool { return st.DegradedReason == overlaysync.ReasonAPIUnreachable })
	g.delete()
	proxy.Restore()
	st = r.waitStatus(t, "deletion noticed", func(st overlaysync.Status) bool { return st.DegradedReason == overlaysync.ReasonDeleted })
	assert.True(t, st.Ready)
	assert.Equal(t, string(second), readOutput(t, g.output()))
}

// After etcd compaction and a kube-apiserver restart (its watch cache
// starts afresh), resuming the watch from the old resourceVersion gets
// 410 Gone: the sidecar must relist and catch up.
func TestRelistsAfterCompactionAnswers410Gone(t *testing.T) {
	g := newGateway(t)
	proxy := newProxy(t)
	lists := &listLog{}
	cfg := proxy.Config(g.saConfig)
	cfg.Wrap(lists.wrap)
	r := g.start(fastRetry(g.options()), cfg)
	first, _ := g.envelopeFor(1)
	seen := g.putEnvelope(first)
	r.waitObserved(t, seen)

	proxy.Cut()
	r.waitStatus(t, "cut off", func(st overlaysync.Status) bool { return st.DegradedReason == overlaysync.ReasonAPIUnreachable })
	second, secondRevision := g.envelopeFor(2)
	g.putEnvelope(second)
	churn(t, g.namespace, 20)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := cp.CompactEtcd(ctx)
	require.NoError(t, err)
	require.NoError(t, cp.StopAPIServer())
	require.NoError(t, cp.StartAPIServer(ctx))
	proxy.Restore()

	st := r.waitStatus(t, "caught up after 410", func(st overlaysync.Status) bool { return st.WrittenRevision == secondRevision })
	assert.Equal(t, overlaysync.StateReady, st.State)
	assert.Equal(t, string(second), readOutput(t, g.output()))
	assert.Positive(t, r.metric(t, "grid_overlay_sync_watch_restarts_total", "reason", "expired"), "the watch must have been answered 410 Gone")

	// The first list is a consistent read; the relist asks for any state
	// not older than what the sidecar had seen, which the API server
	// serves from its watch cache and which never goes back in time.
	queries := lists.queries()
	require.GreaterOrEqual(t, len(queries), 2)
	assert.Empty(t, queries[0].Get("resourceVersion"))
	relist := queries[len(queries)-1]
	assert.Equal(t, "NotOlderThan", relist.Get("resourceVersionMatch"))
	assert.NotEmpty(t, relist.Get("resourceVersion"))
	assert.GreaterOrEqual(t, rvNumber(t, relist.Get("resourceVersion")), rvNumber(t, seen))
	// One watch per pod: HTTP/1.1, which costs the API server half the
	// CPU per watcher of HTTP/2.
	lists.mu.Lock()
	assert.Equal(t, map[string]bool{"HTTP/1.1": true}, lists.protos)
	lists.mu.Unlock()
}

// listLog records the query of every list request a client makes.
type listLog struct {
	mu     sync.Mutex
	list   []url.Values
	protos map[string]bool // the protocols of the responses
}

func (l *listLog) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(req *http.Request) (*http.Response, error) {
		if q := req.URL.Query(); q.Get("watch") != "true" && strings.HasSuffix(req.URL.Path, "/configmaps") {
			l.mu.Lock()
			l.list = append(l.list, q)
			l.mu.Unlock()
		}
		resp, err := rt.RoundTrip(req)
		if err == nil {
			l.mu.Lock()
			if l.protos == nil {
				l.protos = map[string]bool{}
			}
			l.protos[resp.Proto] = true
			l.mu.Unlock()
		}
		return resp, err
	})
}

func (l *listLog) queries() []url.Values {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.list)
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func rvNumber(t *testing.T, rv string) uint64 {
	t.Helper()
	n, err := strconv.ParseUint(rv, 10, 64)
	require.NoError(t, err, "resourceVersion %q", rv)
	return n
}

// churn writes other ConfigMaps so that the store moves on.
func churn(t *testing.T, namespace string, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	admin := cp.AdminClient()
	for i := range n {
		_, err := admin.CoreV1().ConfigMaps(namespace).Create(ctx, &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("churn-%d", i)},
		}, metav1.CreateOptions{})
		require.NoError(t, err)
	}
}

func TestExpireAfterWithdrawsReadinessWhenTheSourceGoesUnconfirmed(t *testing.T) {
	g := newGateway(t)
	proxy := newProxy(t)
	opts := fastRetry(g.options())
	opts.ExpireAfter = time.Second
	r := g.start(opts, proxy.Config(g.saConfig))
	doc, _ := g.envelopeFor(1)
	r.waitObserved(t, g.putEnvelope(doc))
	assert.True(t, r.Status().Ready)

	proxy.Cut()
	st := r.waitStatus(t, "stale after expire-after", func(st overlaysync.Status) bool { return st.State == overlaysync.StateStale })
	assert.False(t, st.Ready)
	assert.Contains(t, st.NotReadyReason, "not confirmed")
	assert.Zero(t, r.metric(t, "grid_overlay_sync_ready"), "the ready gauge follows /readyz")
	assert.True(t, r.Started(), "the overlay is still on disk")

	proxy.Restore()
	r.waitStatus(t, "ready again", func(st overlaysync.Status) bool { return st.Ready })
	assert.Equal(t, 1.0, r.metric(t, "grid_overlay_sync_ready"))
}

func TestIdleWatchIsRestarted(t *testing.T) {
	g := newGateway(t)
	opts := g.options()
	opts.WatchIdleTimeout = 300 * time.Millisecond
	r := g.start(opts)
	doc, _ := g.envelopeFor(1)
	r.waitObserved(t, g.putEnvelope(doc))
	require.Eventually(t, func() bool {
		return r.metric(t, "grid_overlay_sync_watch_restarts_total", "reason", "idle") >= 2
	}, 10*time.Second, 20*time.Millisecond)

	next, revision := g.envelopeFor(2)
	st := r.waitObserved(t, g.putEnvelope(next))
	assert.Equal(t, revision, st.WrittenRevision)
}

var _ = controlplane.BinDirEnv

func TestARoleThatDoesNotMatchIsReportedAsForbidden(t *testing.T) {
	g := newGateway(t)
	opts := fastRetry(g.options())
	opts.ConfigMap = "not-the-granted-one" // the Role names g.configMap only
	r := g.start(opts)
	st := r.waitStatus(t, "forbidden", func(st overlaysync.Status) bool { return st.DegradedReason == overlaysync.ReasonAPIForbidden })
	assert.Equal(t, overlaysync.StateCold, st.State)
}
