// Package reports takes the delivery reports of gateway pods' sidecars
// on the signals listener: each is authenticated by the pod's projected
// ServiceAccount token (a TokenReview, cached for the token's life),
// accepted only for a gateway in the token's namespace, validated, and
// handed to the rollout aggregator.
package reports

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	authnv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/gridsync/gridsync/controller/rollout"
	"github.com/gridsync/gridsync/shared/deliveryreport"
)

// DefaultAudience is the audience of the sidecars' report tokens.
const DefaultAudience = "gridsync-agent"

const (
	// maxTokenCache bounds the tokens remembered.
	maxTokenCache = 50000
	// maxCacheLife bounds how long a reviewed token is trusted without a
	// new review, whatever its expiry says.
	maxCacheLife = 10 * time.Minute
	// refusedFor is how long a refused token is remembered, so that a
	// caller repeating it costs no TokenReview.
	refusedFor = 10 * time.Second
)

// Reviewer authenticates report tokens with TokenReviews.
type Reviewer struct {
	Client   kubernetes.Interface
	Audience string
	Now      func() time.Time

	mu    sync.Mutex
	cache map[[32]byte]review
}

type review struct {
	namespace string // "" when refused
	until     time.Time
}

var errRefused = errors.New("token refused")

// Namespace returns the namespace of the ServiceAccount the token belongs
// to, or errRefused.
func (r *Reviewer) Namespace(ctx context.Context, token string) (string, error) {
	now := r.now()
	key := sha256.Sum256([]byte(token))
	r.mu.Lock()
	if c, ok := r.cache[key]; ok && now.Before(c.until) {
		r.mu.Unlock()
		if c.namespace == "" {
			return "", errRefused
		}
		return c.namespace, nil
	}
	r.mu.Unlock()

	tr, err := r.Client.AuthenticationV1().TokenReviews().Create(ctx, &authnv1.TokenReview{
		Spec: authnv1.TokenReviewSpec{Token: token, Audiences: []string{r.Audience}},
	}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("token review: %w", err)
	}
	ns := ""
	if tr.Status.Authenticated && slices.Contains(tr.Status.Audiences, r.Audience) {
		ns = serviceAccountNamespace(tr.Status.User.Username)
	}
	until := now.Add(refusedFor)
	if ns != "" {
		until = now.Add(maxCacheLife)
		if exp, ok := expiry(token); ok && exp.Before(until) {
			until = exp
		}
	}
	r.mu.Lock()
	if r.cache == nil || len(r.cache) >= maxTokenCache {
		r.cache = map[[32]byte]review{} // start over rather than grow
	}
	r.cache[key] = review{namespace: ns, until: until}
	r.mu.Unlock()
	if ns == "" {
		return "", errRefused
	}
	return ns, nil
}

func (r *Reviewer) now() time.Time {
	if r.Now != nil {
		return r.Now()
	}
	return time.Now()
}

// serviceAccountNamespace reads system:serviceaccount:<ns>:<name>.
func serviceAccountNamespace(username string) string {
	parts := strings.Split(username, ":")
	if len(parts) != 4 || parts[0] != "system" || parts[1] != "serviceaccount" || parts[2] == "" || parts[3] == "" {
		return ""
	}
	return parts[2]
}

// expiry reads a JWT's exp claim. The token has been reviewed; the claim
// only bounds how long the review is trusted.
func expiry(token string) (time.Time, bool) {
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return time.Time{}, false
	}
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return time.Time{}, false
	}
	var claims struct {
		Exp int64 `json:"exp"`
	}
	if json.Unmarshal(payload, &claims) != nil || claims.Exp == 0 {
		return time.Time{}, false
	}
	return time.Unix(claims.Exp, 0), true
}

// Handler serves POST /v1/site/deliveries.
type Handler struct {
	Reviewer   *Reviewer
	Aggregator *rollout.Aggregator
	Logger     *slog.Logger
	metrics    *prometheus.CounterVec
}

// NewHandler makes the handler and registers its metric.
func NewHandler(reviewer *Reviewer, agg *rollout.Aggregator, logger *slog.Logger, reg prometheus.Registerer) *Handler {
	h := &Handler{Reviewer: reviewer, Aggregator: agg, Logger: logger}
	h.metrics = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "gridsync_delivery_reports_received_total",
		Help: "Delivery reports received on the signals listener, by outcome (accepted, unauthenticated, wrong_namespace, invalid, unknown_gateway, full, review_failed).",
	}, []string{"outcome"})
	if reg != nil {
		reg.MustRegister(h.metrics)
	}
	if h.Logger == nil {
		h.Logger = slog.New(slog.DiscardHandler)
	}
	return h
}

// ServeHTTP takes one report (a JSON body), or a stream of them (an
// NDJSON body, one report a line, read as they come: a sidecar keeps one
// request open and writes a line per report, so a report costs one packet
// rather than a request and its answer). The token is checked for every
// report, from the review cache.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		http.Error(w, "POST only", http.StatusMethodNotAllowed)
		return
	}
	token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || token == "" {
		h.refuse(w, "unauthenticated", http.StatusUnauthorized, "a bearer token is required")
		return
	}
	if r.Header.Get("Content-Type") != deliveryreport.StreamContentType {
		body, err := io.ReadAll(io.LimitReader(r.Body, deliveryreport.MaxBytes+1))
		if err != nil || len(body) > deliveryreport.MaxBytes {
			h.refuse(w, "invalid", http.StatusRequestEntityTooLarge, "the report is too large")
			return
		}
		if h.take(w, r, token, body) {
			w.WriteHeader(http.StatusAccepted)
		}
		return
	}
	lines := bufio.NewScanner(r.Body)
	lines.Buffer(make([]byte, 0, 1024), deliveryreport.MaxBytes)
	for lines.Scan() {
		if len(bytes.TrimSpace(lines.Bytes())) == 0 {
			continue
		}
		if !h.take(w, r, token, lines.Bytes()) {
			return // answered; the stream ends
		}
	}
	if err := lines.Err(); errors.Is(err, bufio.ErrTooLong) {
		h.refuse(w, "invalid", http.StatusRequestEntityTooLarge, "a report is too large")
		return
	}
	w.WriteHeader(http.StatusAccepted)
}

// take checks and folds one report; false when it was refused (and the
// refusal answered).
func (h *Handler) take(w http.ResponseWriter, r *http.Request, token string, body []byte) bool {
	refuse := func(outcome string, status int, msg string) bool {
		h.refuse(w, outcome, status, msg)
		return false
	}
	ns, err := h.Reviewer.Namespace(r.Context(), token)
	switch {
	case errors.Is(err, errRefused):
		return refuse("unauthenticated", http.StatusUnauthorized, "the token was refused")
	case err != nil:
		h.Logger.Warn("report_review_failed", "error", err)
		return refuse("review_failed", http.StatusServiceUnavailable, "the token could not be reviewed now")
	}
	var rep deliveryreport.Report
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&rep); err != nil {
		return refuse("invalid", http.StatusBadRequest, "the report is not JSON of the report's shape")
	}
	if err := rep.Validate(); err != nil {
		return refuse("invalid", http.StatusBadRequest, err.Error())
	}
	if rep.Namespace != ns {
		return refuse("wrong_namespace", http.StatusForbidden, "a token reports only for gateways of its own namespace")
	}
	switch err := h.Aggregator.Observe(rep); {
	case errors.Is(err, rollout.ErrUnknownGateway):
		return refuse("unknown_gateway", http.StatusNotFound, "no network has this gateway")
	case errors.Is(err, rollout.ErrFull):
		return refuse("full", http.StatusServiceUnavailable, "too many pods report")
	}
	h.metrics.WithLabelValues("accepted").Inc()
	return true
}

func (h *Handler) refuse(w http.ResponseWriter, outcome string, status int, msg string) {
	h.metrics.WithLabelValues(outcome).Inc()
	http.Error(w, msg, status)
}
