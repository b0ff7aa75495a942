package reports

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/gridsync/gridsync/controller/rbac"
	"github.com/gridsync/gridsync/controller/rollout"
	"github.com/gridsync/gridsync/shared/deliveryreport"
	"github.com/gridsync/gridsync/test/controlplane"
)

// cp is the real API server the reports' tokens are reviewed by.
var cp *controlplane.ControlPlane

func TestMain(m *testing.M) {
	os.Exit(controlplane.RunTests(m, &cp))
}

// countingTransport counts the TokenReviews the reviewer makes.
type countingTransport struct {
	next    http.RoundTripper
	reviews *atomic.Int64
}

func (c countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if strings.HasSuffix(r.URL.Path, "/tokenreviews") {
		c.reviews.Add(1)
	}
	return c.next.RoundTrip(r)
}

// fixture is a handler reviewing tokens as the agent does (its own
// ServiceAccount, granted exactly the chart's TokenReview rule), folding
// reports into an aggregator that knows gateway "edge" of namespace ns.
type fixture struct {
	t       *testing.T
	ns      string
	url     string
	agg     *rollout.Aggregator
	reviews atomic.Int64
}

const revA = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
const revB = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"

func newFixture(t *testing.T) *fixture {
	ctx := t.Context()
	f := &fixture{t: t, ns: fmt.Sprintf("reports-%d", time.Now().UnixNano()%1000000)}
	agentNS := f.ns + "-agent"
	require.NoError(t, cp.Grant(ctx, agentNS, "gridsync-agent", "gridsync-agent-tokenreview-"+f.ns, "", rbac.TokenReviewRules()))
	cfg, err := cp.ServiceAccountConfig(ctx, agentNS, "gridsync-agent")
	require.NoError(t, err)
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper { return countingTransport{next: rt, reviews: &f.reviews} }
	client, err := kubernetes.NewForConfig(cfg)
	require.NoError(t, err)
	f.agg = rollout.New(rollout.Options{})
	f.agg.SetGateways("net", []types.NamespacedName{{Namespace: f.ns, Name: "edge"}})
	h := NewHandler(&Reviewer{Client: client, Audience: DefaultAudience}, f.agg, nil, nil)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	f.url = srv.URL + deliveryreport.Path
	return f
}

// token is a projected-style token of namespace/gateway for audience.
func (f *fixture) token(namespace, audience string) string {
	tok, err := cp.ServiceAccountToken(f.t.Context(), namespace, "gateway", audience)
	require.NoError(f.t, err)
	return tok
}

func (f *fixture) report(pod, revision string) string {
	b, err := json.Marshal(deliveryreport.Report{Namespace: f.ns, Gateway: "edge", Pod: pod, Revision: revision, ContentDigest: revision, State: deliveryreport.StateReady})
	require.NoError(f.t, err)
	return string(b)
}

// post sends body and returns the status and the answer's text.
func (f *fixture) post(method, token, contentType, body string) (int, string) {
	req, err := http.NewRequestWithContext(f.t.Context(), method, f.url, strings.NewReader(body))
	require.NoError(f.t, err)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(f.t, err)
	defer func() { _ = resp.Body.Close() }()
	text, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, strings.TrimSpace(string(text))
}

// revisionOf is the revision the aggregator holds for pod ("" when none).
func (f *fixture) revisionOf(pod string) string {
	d := f.agg.Summary(f.ns, "edge", "c"+revA[1:], time.Time{}) // nobody is on this one: every pod lags, with its revision
	if d == nil {
		return ""
	}
	for _, l := range d.Lagging {
		if l.Pod == pod {
			return l.Revision
		}
	}
	return ""
}

// A report with a good token is taken, and the token's review is cached:
// a second report costs no TokenReview.
func TestReportsAreTakenWithOneReviewPerToken(t *testing.T) {
	f := newFixture(t)
	tok := f.token(f.ns, DefaultAudience)
	code, text := f.post(http.MethodPost, tok, "application/json", f.report("edge-1", revA))
	require.Equal(t, http.StatusAccepted, code, text)
	assert.Equal(t, revA, f.revisionOf("edge-1"))
	code, _ = f.post(http.MethodPost, tok, "application/json", f.report("edge-1", revB))
	require.Equal(t, http.StatusAccepted, code)
	assert.Equal(t, revB, f.revisionOf("edge-1"))
	assert.Equal(t, int64(1), f.reviews.Load(), "the second report is checked from the cache")
}

// Every bad request gets its own clear answer and changes nothing: the
// pod's last good report stands.
func TestBadReportsAreRefusedAndLoseNothing(t *testing.T) {
	f := newFixture(t)
	tok := f.token(f.ns, DefaultAudience)
	code, _ := f.post(http.MethodPost, tok, "application/json", f.report("edge-1", revA))
	require.Equal(t, http.StatusAccepted, code)

	other := f.token(f.ns+"-other", DefaultAudience)
	for _, c := range []struct {
		name, method, token, body string
		code                      int
		says                      string
	}{
		{"not a POST", http.MethodGet, tok, "", http.StatusMethodNotAllowed, "POST only"},
		{"no token", http.MethodPost, "", f.report("edge-1", revB), http.StatusUnauthorized, "bearer token is required"},
		{"not JSON", http.MethodPost, tok, `{"namespace": `, http.StatusBadRequest, "not JSON of the report's shape"},
		{"an unknown field", http.MethodPost, tok, strings.Replace(f.report("edge-1", revB), `{`, `{"payload":"x",`, 1), http.StatusBadRequest, "not JSON of the report's shape"},
		{"a bad revision", http.MethodPost, tok, f.report("edge-1", "not-hex"), http.StatusBadRequest, "revision is not 64 lowercase hex"},
		{"too large", http.MethodPost, tok, f.report("edge-1", revB) + strings.Repeat(" ", deliveryreport.MaxBytes), http.StatusRequestEntityTooLarge, "too large"},
		{"another namespace's token", http.MethodPost, other, f.report("edge-1", revB), http.StatusForbidden, "own namespace"},
		{"an unknown gateway", http.MethodPost, tok, strings.Replace(f.report("edge-1", revB), `"edge"`, `"elsewhere"`, 1), http.StatusNotFound, "no network has this gateway"},
	} {
		t.Run(c.name, func(t *testing.T) {
			code, text := f.post(c.method, c.token, "application/json", c.body)
			assert.Equal(t, c.code, code, text)
			assert.Contains(t, text, c.says)
			assert.Equal(t, revA, f.revisionOf("edge-1"), "the last good report stands")
		})
	}
}

// A token of another audience (the API server's own, say) is refused,
// and the refusal is remembered: repeating it costs no new TokenReview.
func TestATokenOfAnotherAudienceIsRefusedOnce(t *testing.T) {
	f := newFixture(t)
	tok := f.token(f.ns, "https://kubernetes.default.svc")
	for range 3 {
		code, text := f.post(http.MethodPost, tok, "application/json", f.report("edge-1", revA))
		assert.Equal(t, http.StatusUnauthorized, code, text)
		assert.Contains(t, text, "token was refused")
	}
	assert.Equal(t, int64(1), f.reviews.Load())
	assert.Empty(t, f.revisionOf("edge-1"))
}

// A stream is taken line by line until a bad line, which ends it with
// its answer: the lines before it stand, none after it is read.
func TestAStreamEndsAtItsFirstBadReport(t *testing.T) {
	f := newFixture(t)
	tok := f.token(f.ns, DefaultAudience)
	body := f.report("edge-1", revA) + "\n\n" + f.report("edge-2", revA) + "\n" + `{"namespace": 1}` + "\n" + f.report("edge-3", revA) + "\n"
	code, text := f.post(http.MethodPost, tok, deliveryreport.StreamContentType, body)
	assert.Equal(t, http.StatusBadRequest, code, text)
	assert.Equal(t, revA, f.revisionOf("edge-1"))
	assert.Equal(t, revA, f.revisionOf("edge-2"))
	assert.Empty(t, f.revisionOf("edge-3"), "nothing after the bad line")

	long := f.report("edge-4", revA) + strings.Repeat(" ", deliveryreport.MaxBytes)
	code, _ = f.post(http.MethodPost, tok, deliveryreport.StreamContentType, f.report("edge-5", revA)+"\n"+long+"\n")
	assert.Equal(t, http.StatusRequestEntityTooLarge, code)
	assert.Equal(t, revA, f.revisionOf("edge-5"))
	assert.Empty(t, f.revisionOf("edge-4"))
}

func TestServiceAccountNamespace(t *testing.T) {
	for user, want := range map[string]string{
		"system:serviceaccount:edge-ns:gateway": "edge-ns",
		"system:serviceaccount::gateway":        "",
		"system:serviceaccount:edge-ns:":        "",
		"system:serviceaccount:edge-ns":         "",
		"system:node:worker-1":                  "",
		"alice":                                 "",
		"system:serviceaccount:a:b:c":           "",
	} {
		assert.Equal(t, want, serviceAccountNamespace(user), user)
	}
}

// A reviewed token is trusted until its exp claim at the latest.
func TestExpiryReadsTheExpClaim(t *testing.T) {
	jwt := func(claims string) string {
		return "e30." + base64.RawURLEncoding.EncodeToString([]byte(claims)) + ".sig"
	}
	got, ok := expiry(jwt(`{"exp": 1900000000}`))
	require.True(t, ok)
	assert.Equal(t, time.Unix(1900000000, 0), got)
	for _, tok := range []string{jwt(`{}`), jwt(`not json`), "two.parts", "a.!!!.c"} {
		_, ok := expiry(tok)
		assert.False(t, ok, tok)
	}
}

// The cache trusts a review no longer than the token lives: a token
// reviewed a minute before its exp claim is reviewed again after it.
func TestAReviewIsNotTrustedPastTheTokensExpiry(t *testing.T) {
	f := newFixture(t)
	tok := f.token(f.ns, DefaultAudience)
	exp, ok := expiry(tok)
	require.True(t, ok)
	now := exp.Add(-time.Minute)
	cfg, err := cp.ServiceAccountConfig(t.Context(), f.ns+"-agent", "gridsync-agent")
	require.NoError(t, err)
	client, err := kubernetes.NewForConfig(cfg)
	require.NoError(t, err)
	r := &Reviewer{Client: client, Audience: DefaultAudience, Now: func() time.Time { return now }}
	ns, err := r.Namespace(context.Background(), tok)
	require.NoError(t, err)
	assert.Equal(t, f.ns, ns)
	assert.Equal(t, exp, r.cache[sha256.Sum256([]byte(tok))].until, "trusted until the token's expiry, not for maxCacheLife")
}
