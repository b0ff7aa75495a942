package node

import (
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gridsync/gridsync/test/testnode"
)

// The sync containers' API token is the kubelet's projected, rotating
// ServiceAccount token. With the shortest lifetime the API accepts (10
// minutes) the kubelet replaces it after about 8; once the first token has
// expired and the API refuses it, every connection to the API server is
// cut, and the sidecar must come back with the token the kubelet rotated
// in: an update after that still reaches the gateway. The test takes about
// 11 minutes and runs beside the others.
func TestSidecarFollowsTheRotatedProjectedToken(t *testing.T) {
	t.Parallel()
	const lifetime = 600 // seconds: the API's minimum for a projected token
	ns := namespace(t, "token")
	gw := installGateway(t, ns, sidecarValues(map[string]any{
		"overlay": map[string]any{"sidecar": map[string]any{"tokenExpirationSeconds": lifetime}},
	}))
	doc1, _ := gw.Envelope(1)
	gw.Put(doc1)
	pod := waitPod(t, ns, 60*time.Second, "Ready", testnode.PodReady)
	tokenFile := node.VolumeFile(pod, "kubernetes.io~projected", "overlay-sync-token", "token")
	first := readFile(tokenFile)
	require.NotEmpty(t, first, "no projected token at %s", tokenFile)
	expiry := expiryOf(t, first)
	require.WithinDuration(t, time.Now().Add(lifetime*time.Second), expiry, time.Minute, "the token's lifetime")

	// The kubelet rotates the token at 80% of its lifetime.
	eventually(t, lifetime*time.Second, "the kubelet rotates the token", func() bool {
		return readFile(tokenFile) != first
	})
	rotated := readFile(tokenFile)
	t.Logf("the kubelet rotated the token %s before the first expired", time.Until(expiry).Round(time.Second))

	// Once the first token has expired (and the API server's minute of
	// leeway for clock skew has passed), the API refuses it...
	time.Sleep(time.Until(expiry))
	eventually(t, 90*time.Second, "the API refuses the expired token", func() bool { return !authenticated(t, first) })
	assert.True(t, authenticated(t, rotated), "the rotated token does not authenticate")

	// ...and the sidecar, made to connect again, uses the rotated one.
	node.CutAPI()
	doc2, rev2 := gw.Envelope(2)
	gw.Put(doc2)
	eventually(t, 60*time.Second, "the update reaches the gateway after the reconnection", func() bool {
		return stateOfGateway(t, pod).Revision == rev2
	})
	st := statusOfSidecar(t, pod)
	assert.False(t, st.Degraded, "the sidecar is degraded: %s", st.DegradedDetail)
	pod = waitPod(t, ns, time.Second, "Ready", testnode.PodReady)
	assert.Zero(t, containerStatus(pod, "overlay-sync").RestartCount, "the sidecar restarted to pick the token up")
}

// expiryOf reads a JWT's exp claim (the test has the token; it does not
// need its signature checked here, the API server does that).
func expiryOf(t *testing.T, token string) time.Time {
	t.Helper()
	parts := strings.Split(strings.TrimSpace(token), ".")
	require.Len(t, parts, 3)
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	require.NoError(t, err)
	var claims struct {
		Exp int64 `json:"exp"`
	}
	require.NoError(t, json.Unmarshal(payload, &claims))
	return time.Unix(claims.Exp, 0)
}

// authenticated asks the API server whether token authenticates.
func authenticated(t *testing.T, token string) bool {
	t.Helper()
	review, err := cp.AdminClient().AuthenticationV1().TokenReviews().Create(t.Context(),
		&authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: strings.TrimSpace(token)}}, metav1.CreateOptions{})
	require.NoError(t, err)
	return review.Status.Authenticated
}
