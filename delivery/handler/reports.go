// Package handler takes the delivery reports of gateway pods' sidecars
// on the signals listener: each is authenticated by the pod's projected
// ServiceAccount token (checked locally, then by a TokenReview within a
// budget, cached for the token's life), accepted only for the pod the
// token is bound to and a gateway of its namespace, validated, and handed
// to the rollout aggregator.
package handler

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	rollout "github.com/gridsync/gridsync/delivery/fold"
	deliveryreport "github.com/gridsync/gridsync/delivery/report"
)

// Handler serves POST /v1/site/deliveries.
type Handler struct {
	Reviewer   *Reviewer
	Aggregator *rollout.Aggregator
	Logger     *slog.Logger
	// FirstLine and BetweenLines bound how long a report stream may keep
	// the agent waiting for a report: a stream whose body never comes
	// does not hold its connection.
	FirstLine    time.Duration
	BetweenLines time.Duration
	metrics      *prometheus.CounterVec
}

// Defaults of the stream's read deadlines: a sidecar sends its first
// report at once and one at least every 30 s (its heartbeat).
const (
	DefaultFirstLine    = 10 * time.Second
	DefaultBetweenLines = 90 * time.Second
)

// NewHandler makes the handler and registers its metric.
func NewHandler(reviewer *Reviewer, agg *rollout.Aggregator, logger *slog.Logger, reg prometheus.Registerer) *Handler {
	h := &Handler{Reviewer: reviewer, Aggregator: agg, Logger: logger, FirstLine: DefaultFirstLine, BetweenLines: DefaultBetweenLines}
	h.metrics = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "gridsync_delivery_reports_received_total",
		Help: "Delivery reports received on the signals listener, by outcome (accepted, unauthenticated, unbound_token, review_budget, wrong_namespace, wrong_pod, invalid, unknown_gateway, full, review_failed, stream_timeout).",
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
	// The token is checked from the headers, before a byte of the body is
	// read or a stream is held open for it.
	if _, ok := h.identity(w, r, token); !ok {
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
	rc := http.NewResponseController(w)
	wait := h.FirstLine
	for {
		_ = rc.SetReadDeadline(time.Now().Add(wait))
		if !lines.Scan() {
			break
		}
		wait = h.BetweenLines
		if len(bytes.TrimSpace(lines.Bytes())) == 0 {
			continue
		}
		if !h.take(w, r, token, lines.Bytes()) {
			return // answered; the stream ends
		}
	}
	var ne net.Error
	switch err := lines.Err(); {
	case errors.Is(err, bufio.ErrTooLong):
		h.refuse(w, "invalid", http.StatusRequestEntityTooLarge, "a report is too large")
		return
	case errors.As(err, &ne) && ne.Timeout(), errors.Is(err, os.ErrDeadlineExceeded):
		h.refuse(w, "stream_timeout", http.StatusRequestTimeout, "no report came in time: the stream ends")
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
	id, ok := h.identity(w, r, token)
	if !ok {
		return false
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
	if rep.Namespace != id.Namespace {
		return refuse("wrong_namespace", http.StatusForbidden, "a token reports only for gateways of its own namespace")
	}
	if rep.Pod != id.Pod {
		return refuse("wrong_pod", http.StatusForbidden, "a token reports only for the pod it is bound to")
	}
	switch err := h.Aggregator.Observe(rep); {
	case errors.Is(err, rollout.ErrUnknownGateway):
		return refuse("unknown_gateway", http.StatusNotFound, "no network has this gateway")
	case errors.Is(err, rollout.ErrFull):
		return refuse("full", http.StatusServiceUnavailable, "too many pods of this gateway report")
	}
	h.metrics.WithLabelValues("accepted").Inc()
	return true
}

// identity is the pod the token belongs to; false when refused (and the
// refusal answered).
func (h *Handler) identity(w http.ResponseWriter, r *http.Request, token string) (Identity, bool) {
	id, err := h.Reviewer.Review(r.Context(), token, sourceAddr(r))
	switch {
	case err == nil:
		return id, true
	case errors.Is(err, errUnbound):
		h.refuse(w, "unbound_token", http.StatusUnauthorized, err.Error())
	case errors.Is(err, errReviewBudget):
		w.Header().Set("Retry-After", "1")
		h.refuse(w, "review_budget", http.StatusTooManyRequests, err.Error())
	case errors.Is(err, errRefused), errors.Is(err, errMalformed), errors.Is(err, errExpired), errors.Is(err, errAudience):
		h.refuse(w, "unauthenticated", http.StatusUnauthorized, err.Error())
	default:
		h.Logger.Warn("report_review_failed", "error", err)
		h.refuse(w, "review_failed", http.StatusServiceUnavailable, "the token could not be reviewed now")
	}
	return Identity{}, false
}

// sourceAddr is the caller's address, the unit of the review budget.
func sourceAddr(r *http.Request) netip.Addr {
	ap, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil {
		return netip.Addr{}
	}
	return ap.Addr().Unmap()
}

func (h *Handler) refuse(w http.ResponseWriter, outcome string, status int, msg string) {
	h.metrics.WithLabelValues(outcome).Inc()
	http.Error(w, msg, status)
}
