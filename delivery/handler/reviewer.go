package handler

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/time/rate"
	authnv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// DefaultAudience is the audience of the sidecars' report tokens.
const DefaultAudience = "gridsync-agent"

// The claims the API server puts in a review of a token bound to a pod.
const (
	extraPodName = "authentication.kubernetes.io/pod-name"
	extraPodUID  = "authentication.kubernetes.io/pod-uid"
)

const (
	// maxTokenCache bounds the reviewed tokens remembered. Only tokens
	// the API server accepted are kept here, so a flood of bad tokens
	// never evicts a pod's review.
	maxTokenCache = 50000
	// maxRefusedCache bounds the refused tokens remembered; flushed whole
	// when full (it holds nothing a good caller needs).
	maxRefusedCache = 10000
	// maxCacheLife bounds how long a reviewed token is trusted without a
	// new review, whatever its expiry says.
	maxCacheLife = 10 * time.Minute
	// refusedFor is how long a refused token is remembered, so that a
	// caller repeating it costs no TokenReview.
	refusedFor = 10 * time.Second
	// maxSources bounds the per-source review budgets tracked.
	maxSources = 16384
)

// Identity is who a report token belongs to: a pod of a namespace.
type Identity struct {
	Namespace string
	Pod       string
	PodUID    string
}

// Why a token was refused: each its outcome of
// gridsync_delivery_reports_received_total.
var (
	errRefused      = errors.New("the token was refused")
	errMalformed    = errors.New("the token is not a service account token")
	errExpired      = errors.New("the token has expired")
	errAudience     = errors.New("the token is not for this audience")
	errUnbound      = errors.New("the token is not bound to a pod (use a projected token of the pod)")
	errReviewBudget = errors.New("too many token reviews: try again shortly")
)

// ReviewBudget caps the TokenReviews a caller can cause: every review is a
// request to the API server the controller shares.
type ReviewBudget struct {
	// PerSource is one source address's budget, Total the agent's; both
	// below the client's QPS (50 by default).
	PerSourceRate  float64
	PerSourceBurst int
	TotalRate      float64
	TotalBurst     int
}

// DefaultReviewBudget: a pod reviews its token once per ten minutes or
// rotation; a restart of a thousand pods passes within a minute.
func DefaultReviewBudget() ReviewBudget {
	return ReviewBudget{PerSourceRate: 1, PerSourceBurst: 5, TotalRate: 20, TotalBurst: 200}
}

// Reviewer authenticates report tokens with TokenReviews, after checking
// locally what can be checked without the API server (the shape of a
// service account JWT, its expiry, its audience, its pod binding), within
// a budget per source and in total.
type Reviewer struct {
	Client   kubernetes.Interface
	Audience string
	Budget   ReviewBudget
	Now      func() time.Time

	mu      sync.Mutex
	valid   map[[32]byte]review
	refused map[[32]byte]time.Time
	sources map[netip.Addr]*sourceBudget
	total   *rate.Limiter
}

type review struct {
	id    Identity
	until time.Time
}

type sourceBudget struct {
	lim  *rate.Limiter
	seen time.Time
}

// Review returns the pod the token belongs to, or why it is refused.
func (r *Reviewer) Review(ctx context.Context, token string, source netip.Addr) (Identity, error) {
	now := r.now()
	key := sha256.Sum256([]byte(token))
	r.mu.Lock()
	if c, ok := r.valid[key]; ok && now.Before(c.until) {
		r.mu.Unlock()
		return c.id, nil
	}
	if until, ok := r.refused[key]; ok && now.Before(until) {
		r.mu.Unlock()
		return Identity{}, errRefused
	}
	r.mu.Unlock()

	claims, err := precheck(token, r.Audience, now)
	if err != nil {
		return Identity{}, err
	}
	if !r.spend(source, now) {
		return Identity{}, errReviewBudget
	}
	tr, err := r.Client.AuthenticationV1().TokenReviews().Create(ctx, &authnv1.TokenReview{
		Spec: authnv1.TokenReviewSpec{Token: token, Audiences: []string{r.Audience}},
	}, metav1.CreateOptions{})
	if err != nil {
		return Identity{}, fmt.Errorf("token review: %w", err)
	}
	var id Identity
	if tr.Status.Authenticated && slices.Contains(tr.Status.Audiences, r.Audience) {
		id = Identity{
			Namespace: serviceAccountNamespace(tr.Status.User.Username),
			Pod:       single(tr.Status.User.Extra[extraPodName]),
			PodUID:    single(tr.Status.User.Extra[extraPodUID]),
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if id.Namespace == "" || id.Pod == "" || id.Pod != claims.pod {
		if r.refused == nil || len(r.refused) >= maxRefusedCache {
			r.refused = map[[32]byte]time.Time{}
		}
		r.refused[key] = now.Add(refusedFor)
		if id.Namespace != "" && id.Pod == "" {
			return Identity{}, errUnbound
		}
		return Identity{}, errRefused
	}
	until := now.Add(maxCacheLife)
	if claims.exp.Before(until) {
		until = claims.exp
	}
	if r.valid == nil {
		r.valid = map[[32]byte]review{}
	}
	if len(r.valid) >= maxTokenCache {
		for k, c := range r.valid {
			if !now.Before(c.until) {
				delete(r.valid, k)
			}
		}
	}
	if len(r.valid) < maxTokenCache {
		r.valid[key] = review{id: id, until: until}
	}
	return id, nil
}

func single(v authnv1.ExtraValue) string {
	if len(v) != 1 {
		return ""
	}
	return v[0]
}

func (r *Reviewer) now() time.Time {
	if r.Now != nil {
		return r.Now()
	}
	return time.Now()
}

// spend takes one review from the source's budget and the agent's.
func (r *Reviewer) spend(source netip.Addr, now time.Time) bool {
	b := r.Budget
	if b == (ReviewBudget{}) {
		b = DefaultReviewBudget()
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.total == nil {
		r.total = rate.NewLimiter(rate.Limit(b.TotalRate), b.TotalBurst)
		r.sources = map[netip.Addr]*sourceBudget{}
	}
	s := r.sources[source]
	if s == nil {
		if len(r.sources) >= maxSources {
			idle := time.Duration(float64(b.PerSourceBurst) / b.PerSourceRate * float64(time.Second))
			for a, sb := range r.sources {
				if now.Sub(sb.seen) > idle {
					delete(r.sources, a)
				}
			}
			if len(r.sources) >= maxSources {
				return false
			}
		}
		s = &sourceBudget{lim: rate.NewLimiter(rate.Limit(b.PerSourceRate), b.PerSourceBurst)}
		r.sources[source] = s
	}
	s.seen = now
	// The source's token first: a source over its budget does not spend
	// the agent's.
	if !s.lim.AllowN(now, 1) {
		return false
	}
	return r.total.AllowN(now, 1)
}

// serviceAccountNamespace reads system:serviceaccount:<ns>:<name>.
func serviceAccountNamespace(username string) string {
	parts := strings.Split(username, ":")
	if len(parts) != 4 || parts[0] != "system" || parts[1] != "serviceaccount" || parts[2] == "" || parts[3] == "" {
		return ""
	}
	return parts[2]
}

// tokenClaims are what precheck reads of a token.
type tokenClaims struct {
	exp time.Time
	pod string
}

// maxTokenBytes: a service account JWT is about a kilobyte.
const maxTokenBytes = 16 << 10

// precheck refuses, without asking the API server, a token that cannot
// be a pod's projected service account token for this audience: not a
// JWT, expired, for another audience, or bound to no pod. Its claims are
// not trusted (the signature is the API server's to check); they only
// spare a review that could never succeed.
func precheck(token, audience string, now time.Time) (tokenClaims, error) {
	if len(token) > maxTokenBytes {
		return tokenClaims{}, errMalformed
	}
	parts := strings.Split(token, ".")
	if len(parts) != 3 || parts[2] == "" {
		return tokenClaims{}, errMalformed
	}
	var header struct {
		Alg string `json:"alg"`
	}
	if err := decodeSegment(parts[0], &header); err != nil || header.Alg == "" || strings.EqualFold(header.Alg, "none") {
		return tokenClaims{}, errMalformed
	}
	var claims struct {
		Exp int64           `json:"exp"`
		Aud json.RawMessage `json:"aud"`
		K8s struct {
			Pod struct {
				Name string `json:"name"`
				UID  string `json:"uid"`
			} `json:"pod"`
		} `json:"kubernetes.io"`
	}
	if err := decodeSegment(parts[1], &claims); err != nil || claims.Exp == 0 {
		return tokenClaims{}, errMalformed
	}
	exp := time.Unix(claims.Exp, 0)
	if !now.Before(exp) {
		return tokenClaims{}, errExpired
	}
	var auds []string
	if err := json.Unmarshal(claims.Aud, &auds); err != nil {
		var one string
		if json.Unmarshal(claims.Aud, &one) != nil {
			return tokenClaims{}, errAudience
		}
		auds = []string{one}
	}
	if !slices.Contains(auds, audience) {
		return tokenClaims{}, errAudience
	}
	if claims.K8s.Pod.Name == "" || claims.K8s.Pod.UID == "" {
		return tokenClaims{}, errUnbound
	}
	return tokenClaims{exp: exp, pod: claims.K8s.Pod.Name}, nil
}

func decodeSegment(seg string, v any) error {
	b, err := base64.RawURLEncoding.DecodeString(seg)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}
