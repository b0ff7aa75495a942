package handler

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
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
	rollout "github.com/gridsync/gridsync/delivery/fold"
	deliveryreport "github.com/gridsync/gridsync/delivery/report"
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
	h       *Handler
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
	f.h = h
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	f.url = srv.URL + deliveryreport.Path
	return f
}

// token is the projected token of pod edge-1 of namespace, for audience.
func (f *fixture) token(namespace, audience string) string {
	return f.podToken(namespace, "edge-1", audience)
}

// podToken is the projected token of a pod (ServiceAccount gateway) of
// namespace, for audience.
func (f *fixture) podToken(namespace, pod, audience string) string {
	tok, err := cp.PodToken(f.t.Context(), namespace, "gateway", pod, audience)
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

// A token of another audience (the API server's own, say) is refused from
// its own claims: it costs no TokenReview at all.
func TestATokenOfAnotherAudienceIsRefusedOnce(t *testing.T) {
	f := newFixture(t)
	tok := f.token(f.ns, "https://kubernetes.default.svc")
	for range 3 {
		code, text := f.post(http.MethodPost, tok, "application/json", f.report("edge-1", revA))
		assert.Equal(t, http.StatusUnauthorized, code, text)
		assert.Contains(t, text, "not for this audience")
	}
	assert.Zero(t, f.reviews.Load(), "refused from the token itself: no review")
	assert.Empty(t, f.revisionOf("edge-1"))
}

// A stream is taken line by line until a bad line, which ends it with
// its answer: the lines before it stand, none after it is read.
func TestAStreamEndsAtItsFirstBadReport(t *testing.T) {
	f := newFixture(t)
	tok := f.token(f.ns, DefaultAudience)
	body := f.report("edge-1", revA) + "\n\n" + f.report("edge-1", revB) + "\n" + `{"namespace": 1}` + "\n" + f.report("edge-1", revA) + "\n"
	code, text := f.post(http.MethodPost, tok, deliveryreport.StreamContentType, body)
	assert.Equal(t, http.StatusBadRequest, code, text)
	assert.Equal(t, revB, f.revisionOf("edge-1"), "the lines before the bad one stand, nothing after it")

	tok2 := f.podToken(f.ns, "edge-2", DefaultAudience)
	long := f.report("edge-2", revB) + strings.Repeat(" ", deliveryreport.MaxBytes)
	code, _ = f.post(http.MethodPost, tok2, deliveryreport.StreamContentType, f.report("edge-2", revA)+"\n"+long+"\n")
	assert.Equal(t, http.StatusRequestEntityTooLarge, code)
	assert.Equal(t, revA, f.revisionOf("edge-2"))
}

// A token reports for its own pod only: a report naming another pod is
// refused with its own outcome, and a token bound to no pod is refused
// before any review (the first round: one ServiceAccount's token turned
// DELIVERED 0/3 into 50/50 with invented pod names).
func TestATokenReportsForItsOwnPodOnly(t *testing.T) {
	f := newFixture(t)
	tok := f.podToken(f.ns, "edge-1", DefaultAudience)
	code, text := f.post(http.MethodPost, tok, "application/json", f.report("edge-1", revA))
	require.Equal(t, http.StatusAccepted, code, text)
	for i := range 50 {
		code, text = f.post(http.MethodPost, tok, "application/json", f.report(fmt.Sprintf("invented-%d", i), revB))
		require.Equal(t, http.StatusForbidden, code, text)
		require.Contains(t, text, "the pod it is bound to")
	}
	for i := range 50 {
		assert.Empty(t, f.revisionOf(fmt.Sprintf("invented-%d", i)))
	}
	assert.Equal(t, revA, f.revisionOf("edge-1"))

	unbound, err := cp.ServiceAccountToken(t.Context(), f.ns, "gateway", DefaultAudience)
	require.NoError(t, err)
	before := f.reviews.Load()
	code, text = f.post(http.MethodPost, unbound, "application/json", f.report("edge-1", revB))
	assert.Equal(t, http.StatusUnauthorized, code, text)
	assert.Contains(t, text, "not bound to a pod")
	assert.Equal(t, before, f.reviews.Load(), "refused from its claims, before any review")
	assert.Equal(t, revA, f.revisionOf("edge-1"))
}

// Tokens that cannot succeed cost no review, a source's reviews are
// budgeted, and no flood of bad tokens evicts a pod's cached review (the
// first round: 1,500 random tokens made 1,501 TokenReviews at the
// client's QPS, and an honest report waited 2 s).
func TestReviewsAreBudgetedAndBadTokensCostNone(t *testing.T) {
	f := newFixture(t)
	good := f.token(f.ns, DefaultAudience)
	code, _ := f.post(http.MethodPost, good, "application/json", f.report("edge-1", revA))
	require.Equal(t, http.StatusAccepted, code)
	require.EqualValues(t, 1, f.reviews.Load())

	jwt := func(claims string) string {
		return base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"RS256"}`)) + "." + base64.RawURLEncoding.EncodeToString([]byte(claims)) + ".c2ln"
	}
	exp := time.Now().Add(time.Hour).Unix()
	start := time.Now()
	for i := range 1500 {
		var tok string
		switch i % 4 {
		case 0:
			tok = fmt.Sprintf("random-%d", i)
		case 1:
			tok = jwt(fmt.Sprintf(`{"exp":%d,"aud":["%s"],"n":%d}`, time.Now().Add(-time.Hour).Unix(), DefaultAudience, i)) // expired
		case 2:
			tok = jwt(fmt.Sprintf(`{"exp":%d,"aud":["elsewhere"],"n":%d}`, exp, i))
		case 3:
			tok = jwt(fmt.Sprintf(`{"exp":%d,"aud":["%s"],"n":%d}`, exp, DefaultAudience, i)) // no pod
		}
		code, _ := f.post(http.MethodPost, tok, "application/json", f.report("edge-1", revB))
		require.Equal(t, http.StatusUnauthorized, code)
	}
	assert.EqualValues(t, 1, f.reviews.Load(), "none of 1,500 bad tokens was reviewed")

	// Well-formed forgeries (a pod claim, a bad signature) are reviewed,
	// within the source's budget.
	budgeted := 0
	for i := range 30 {
		tok := jwt(fmt.Sprintf(`{"exp":%d,"aud":["%s"],"kubernetes.io":{"pod":{"name":"p%d","uid":"u"}}}`, exp, DefaultAudience, i))
		code, _ := f.post(http.MethodPost, tok, "application/json", f.report("edge-1", revB))
		if code == http.StatusTooManyRequests {
			budgeted++
		}
	}
	t.Logf("bad_tokens=1530 reviews=%d over_budget=%d took_ms=%d", f.reviews.Load(), budgeted, time.Since(start).Milliseconds())
	assert.LessOrEqual(t, f.reviews.Load(), int64(1+DefaultReviewBudget().PerSourceBurst+2))
	assert.Positive(t, budgeted)

	// The honest pod's review is still cached: its report costs nothing.
	before := f.reviews.Load()
	code, text := f.post(http.MethodPost, good, "application/json", f.report("edge-1", revB))
	require.Equal(t, http.StatusAccepted, code, text)
	assert.Equal(t, before, f.reviews.Load())
	assert.Equal(t, revB, f.revisionOf("edge-1"))
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

// The local check reads a token's shape, expiry, audience and pod claim.
func TestPrecheck(t *testing.T) {
	jwt := func(header, claims string) string {
		return base64.RawURLEncoding.EncodeToString([]byte(header)) + "." + base64.RawURLEncoding.EncodeToString([]byte(claims)) + ".sig"
	}
	now := time.Unix(1_800_000_000, 0)
	const pod = `"kubernetes.io":{"pod":{"name":"edge-1","uid":"u-1"}}`
	good := jwt(`{"alg":"RS256"}`, `{"exp":1900000000,"aud":["gridsync-agent"],`+pod+`}`)
	c, err := precheck(good, DefaultAudience, now)
	require.NoError(t, err)
	assert.Equal(t, time.Unix(1900000000, 0), c.exp)
	assert.Equal(t, "edge-1", c.pod)
	_, err = precheck(jwt(`{"alg":"RS256"}`, `{"exp":1900000000,"aud":"gridsync-agent",`+pod+`}`), DefaultAudience, now)
	assert.NoError(t, err, "a single audience string")
	for tok, want := range map[string]error{
		"two.parts": errMalformed,
		"a.!!!.c":   errMalformed,
		jwt(`{}`, `{"exp":1900000000,"aud":["gridsync-agent"],`+pod+`}`):              errMalformed,
		jwt(`{"alg":"none"}`, `{"exp":1900000000,"aud":["gridsync-agent"],`+pod+`}`):  errMalformed,
		jwt(`{"alg":"RS256"}`, `{"aud":["gridsync-agent"],`+pod+`}`):                  errMalformed,
		jwt(`{"alg":"RS256"}`, `{"exp":1700000000,"aud":["gridsync-agent"],`+pod+`}`): errExpired,
		jwt(`{"alg":"RS256"}`, `{"exp":1900000000,"aud":["other"],`+pod+`}`):          errAudience,
		jwt(`{"alg":"RS256"}`, `{"exp":1900000000,"aud":["gridsync-agent"]}`):         errUnbound,
		strings.Repeat("x", maxTokenBytes+1):                                          errMalformed,
	} {
		_, err := precheck(tok, DefaultAudience, now)
		assert.ErrorIs(t, err, want, tok[:min(len(tok), 40)])
	}
}

// The cache trusts a review no longer than the token lives: a token
// reviewed a minute before its exp claim is reviewed again after it.
func TestAReviewIsNotTrustedPastTheTokensExpiry(t *testing.T) {
	f := newFixture(t)
	tok := f.token(f.ns, DefaultAudience)
	c, err := precheck(tok, DefaultAudience, time.Now())
	require.NoError(t, err)
	exp := c.exp
	now := exp.Add(-time.Minute)
	cfg, err := cp.ServiceAccountConfig(t.Context(), f.ns+"-agent", "gridsync-agent")
	require.NoError(t, err)
	client, err := kubernetes.NewForConfig(cfg)
	require.NoError(t, err)
	r := &Reviewer{Client: client, Audience: DefaultAudience, Now: func() time.Time { return now }}
	id, err := r.Review(context.Background(), tok, netip.MustParseAddr("127.0.0.1"))
	require.NoError(t, err)
	assert.Equal(t, Identity{Namespace: f.ns, Pod: "edge-1", PodUID: id.PodUID}, id)
	assert.NotEmpty(t, id.PodUID)
	assert.Equal(t, exp, r.valid[sha256.Sum256([]byte(tok))].until, "trusted until the token's expiry, not for maxCacheLife")
}

// A stream whose reports stop coming is ended with its own answer, the
// reports before it standing: a body that never comes does not hold a
// connection (the first round held 4,096 such streams).
func TestAStreamThatGoesQuietIsEnded(t *testing.T) {
	f := newFixture(t)
	f.h.FirstLine, f.h.BetweenLines = 300*time.Millisecond, 600*time.Millisecond
	tok := f.token(f.ns, DefaultAudience)
	for _, first := range []bool{false, true} {
		pr, pw := io.Pipe()
		req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, f.url, pr)
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+tok)
		req.Header.Set("Content-Type", deliveryreport.StreamContentType)
		go func() {
			if first {
				_, _ = io.WriteString(pw, f.report("edge-1", revB)+"\n")
			}
			<-t.Context().Done()
			pw.Close()
		}()
		start := time.Now()
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		assert.Equal(t, http.StatusRequestTimeout, resp.StatusCode)
		assert.Less(t, time.Since(start), 3*time.Second)
	}
	assert.Equal(t, revB, f.revisionOf("edge-1"), "the report before the silence stands")
}
