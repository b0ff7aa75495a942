package node

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gridsync/gridsync/test/testnode"
)

// The sync containers' API token is the kubelet's projected, rotating
// ServiceAccount token: the sidecar must follow the file, not keep the
// token it started with. Here the first token stops being valid at once:
// its ServiceAccount is replaced (deleted and created again under the same
// name: the token names the old one's UID, and the API server refuses it).
// Then the kubelet is restarted: it keeps its tokens in memory, and a new
// kubelet requests a new one for the pod and swaps it into the volume, as
// it does at 80 % of a token's lifetime (the same request, the same atomic
// writer; waiting for that would take at least eight minutes). A minute
// later every connection to the API server is cut, and an update after
// that must still reach the gateway: the sidecar came back with the new
// token, without a restart.
//
// The kubelet restart and the cut are why this test is not parallel: the
// other tests' pods would lose their kubelet and their connections. Go
// runs it on its own, before the parallel tests start.
func TestSidecarFollowsTheRotatedProjectedToken(t *testing.T) {
	ns := namespace(t, "token")
	gw := installGateway(t, ns, sidecarValues(nil))
	doc1, _ := gw.Envelope(1)
	gw.Put(doc1)
	pod := waitPod(t, ns, 60*time.Second, "Ready", testnode.PodReady)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the pod at the end: %s", describe(pod))
		}
	})
	tokenFile := node.VolumeFile(pod, "kubernetes.io~projected", "overlay-sync-token", "token")
	first := readFile(tokenFile)
	require.NotEmpty(t, first, "no projected token at %s", tokenFile)
	require.True(t, authenticated(t, first), "the first token does not authenticate")

	replaceServiceAccount(t, ns, pod.Spec.ServiceAccountName)
	eventually(t, 30*time.Second, "the API refuses the first token", func() bool { return !authenticated(t, first) })

	restarted := time.Now()
	require.NoError(t, node.RestartKubelet(t.Context()))
	eventually(t, 60*time.Second, "the kubelet writes a new token", func() bool {
		current := readFile(tokenFile)
		return current != "" && current != first
	})
	rotated := readFile(tokenFile)
	t.Logf("the restarted kubelet wrote a new token %s after the restart began", time.Since(restarted).Round(time.Millisecond))
	assert.True(t, authenticated(t, rotated), "the rotated token does not authenticate")

	// client-go reads a token file again on the first request a minute
	// after it last read it (10 s before, in fact), not on a refusal: a
	// client that read the first token just before the new one came
	// presents it for up to that long. The kubelet rotates at 80 % of the
	// lifetime, leaving at least two minutes before the old token expires,
	// so that every client has read the new one by then. Here the first
	// token is refused at once: the cut comes once that minute has passed.
	time.Sleep(tokenReread)

	// The sidecar, made to connect again, can only do so with the new one.
	node.CutAPI()
	cut := time.Now()
	doc2, rev2 := gw.Envelope(2)
	gw.Put(doc2)
	eventually(t, 60*time.Second, "the update reaches the gateway after the reconnection", func() bool {
		return stateOfGateway(t, pod).Revision == rev2
	})
	t.Logf("the update reached the gateway %s after the cut", time.Since(cut).Round(time.Millisecond))
	st := statusOfSidecar(t, pod)
	assert.False(t, st.Degraded, "the sidecar is degraded: %s", st.DegradedDetail)
	pod = waitPod(t, ns, 30*time.Second, "Ready", testnode.PodReady)
	assert.Zero(t, containerStatus(pod, "overlay-sync").RestartCount, "the sidecar restarted to pick the token up")
}

// tokenReread is how long client-go may keep presenting a token it read
// from a file (k8s.io/client-go/transport NewCachedFileTokenSource: a
// minute, read again 10 s before).
const tokenReread = time.Minute

// replaceServiceAccount deletes the ServiceAccount and creates it again
// under the same name (the RoleBindings name it, so its rights stay), as
// reinstalling it would: the new one has a new UID.
func replaceServiceAccount(t *testing.T, ns, name string) {
	t.Helper()
	accounts := cp.AdminClient().CoreV1().ServiceAccounts(ns)
	old, err := accounts.Get(t.Context(), name, metav1.GetOptions{})
	require.NoError(t, err)
	require.NoError(t, accounts.Delete(t.Context(), name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &old.UID}}))
	eventually(t, 30*time.Second, "the ServiceAccount is gone", func() bool {
		_, err := accounts.Get(t.Context(), name, metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	})
	created, err := accounts.Create(t.Context(), &corev1.ServiceAccount{
		ObjectMeta:                   metav1.ObjectMeta{Name: name, Namespace: ns, Labels: old.Labels, Annotations: old.Annotations},
		AutomountServiceAccountToken: old.AutomountServiceAccountToken,
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	require.NotEqual(t, old.UID, created.UID)
}

// authenticated asks the API server whether token authenticates.
func authenticated(t *testing.T, token string) bool {
	t.Helper()
	review, err := cp.AdminClient().AuthenticationV1().TokenReviews().Create(t.Context(),
		&authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: strings.TrimSpace(token)}}, metav1.CreateOptions{})
	require.NoError(t, err)
	return review.Status.Authenticated
}
