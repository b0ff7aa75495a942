package tlsidentity

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Defaults.
const (
	DefaultInterval = 30 * time.Second
	DefaultMaxBytes = 1 << 20 // per file
)

// Options configure a Reloader.
type Options struct {
	CertFile string // leaf first, then the chain
	KeyFile  string
	CAFile   string // optional: the chain must verify to it
	// Interval between polls; 0 means DefaultInterval.
	Interval time.Duration
	// MaxBytes bounds each file; 0 means DefaultMaxBytes.
	MaxBytes int64
	// RequireServerAuth rejects a leaf without server-auth usage.
	RequireServerAuth bool
	// OnChange is called, from the polling goroutine, with every valid new
	// identity, the first included, before it becomes active (to publish
	// it for another container). If it fails the identity does not become
	// active and the next poll tries again.
	OnChange func(*Identity) error
	// Logger receives JSON events; nil discards them.
	Logger *slog.Logger
	// Registerer receives the metrics; nil registers nothing.
	Registerer prometheus.Registerer
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Reloader holds the active identity and replaces it with each valid
// candidate a poll finds.
type Reloader struct {
	opts    Options
	active  atomic.Pointer[Identity]
	metrics *metrics

	mu          sync.Mutex
	lastFailure *Rejection // the failure last logged and counted
}

// New loads the identity once. Invalid initial material is an error: a
// process must not start serving without a valid identity.
func New(opts Options) (*Reloader, error) {
	if opts.CertFile == "" || opts.KeyFile == "" {
		return nil, errors.New("tls identity: certificate and key files are required")
	}
	if opts.Interval <= 0 {
		opts.Interval = DefaultInterval
	}
	if opts.MaxBytes <= 0 {
		opts.MaxBytes = DefaultMaxBytes
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	r := &Reloader{opts: opts}
	r.metrics = newMetrics()
	id, rej := r.load()
	if rej != nil {
		return nil, fmt.Errorf("tls identity from %s and %s: %w", opts.CertFile, opts.KeyFile, rej)
	}
	if err := r.activate(id); err != nil {
		return nil, err
	}
	r.metrics.register(opts.Registerer, r.Current)
	return r, nil
}

func (r *Reloader) load() (*Identity, *Rejection) {
	m, rej := readMaterial(r.opts.CertFile, r.opts.KeyFile, r.opts.CAFile, r.opts.MaxBytes)
	if rej != nil {
		return nil, rej
	}
	return validate(m, r.opts.Now(), r.opts.RequireServerAuth)
}

// Run polls until ctx is done.
func (r *Reloader) Run(ctx context.Context) error {
	t := time.NewTicker(r.opts.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			r.Poll()
		}
	}
}

// Poll reads the files once and activates a valid candidate that differs
// from the active identity. Run calls it on every tick.
func (r *Reloader) Poll() {
	id, rej := r.load()
	if rej != nil {
		r.failed(rej)
		return
	}
	r.mu.Lock()
	recovered := r.lastFailure != nil
	r.lastFailure = nil
	r.mu.Unlock()
	if recovered {
		r.opts.Logger.Info("identity_recovered", "fingerprint", id.Fingerprint)
	}
	if id.same(r.active.Load()) {
		return
	}
	_ = r.activate(id) // logged; the next poll retries
}

// failed counts and logs a rejection once for as long as it repeats.
func (r *Reloader) failed(rej *Rejection) {
	r.mu.Lock()
	repeat := r.lastFailure != nil && *r.lastFailure == *rej
	r.lastFailure = rej
	r.mu.Unlock()
	if repeat {
		return
	}
	r.metrics.reloads.WithLabelValues(string(rej.Material), resultRejected).Inc()
	active := r.active.Load()
	r.opts.Logger.Warn("identity_rejected", "material", rej.Material, "reason", rej.Reason, "detail", rej.Detail,
		"serving_fingerprint", active.Fingerprint, "serving_not_after", active.NotAfter)
}

func (r *Reloader) activate(id *Identity) error {
	if r.opts.OnChange != nil {
		if err := r.opts.OnChange(id); err != nil {
			r.opts.Logger.Error("identity_publish_failed", "fingerprint", id.Fingerprint, "error", err)
			return fmt.Errorf("publish tls identity: %w", err)
		}
	}
	previous := r.active.Swap(id)
	r.metrics.reloads.WithLabelValues(string(MaterialCertificate), resultSuccess).Inc()
	if id.CAPEM != nil && (previous == nil || string(previous.CAPEM) != string(id.CAPEM)) {
		r.metrics.reloads.WithLabelValues(string(MaterialCABundle), resultSuccess).Inc()
	}
	r.opts.Logger.Info("identity_activated", "fingerprint", id.Fingerprint, "not_after", id.NotAfter,
		"generation", id.Generation, "subject", id.Certificate.Leaf.Subject.String())
	return nil
}

// Current returns the active identity; never nil after New.
func (r *Reloader) Current() *Identity { return r.active.Load() }

// GetCertificate hands every new handshake the active identity; set it as
// tls.Config.GetCertificate. Established connections keep theirs.
func (r *Reloader) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	return &r.Current().Certificate, nil
}

// Ready is false once the active identity has expired and no valid
// replacement arrived.
func (r *Reloader) Ready() (bool, string) {
	id := r.Current()
	if now := r.opts.Now(); now.After(id.NotAfter) {
		return false, fmt.Sprintf("TLS identity expired at %s and no valid replacement arrived", id.NotAfter.UTC().Format(time.RFC3339))
	}
	return true, ""
}

// Status is the identity part of /status.
type Status struct {
	Fingerprint         string    `json:"fingerprint"`
	Subject             string    `json:"subject"`
	NotAfter            time.Time `json:"not_after"`
	CANotAfter          time.Time `json:"ca_not_after,omitzero"`
	Generation          string    `json:"generation,omitempty"`
	LastRejection       Reason    `json:"last_rejection_reason,omitempty"`
	LastRejectionDetail string    `json:"last_rejection_detail,omitempty"`
}

// Status reports the active identity and the standing rejection, if any.
func (r *Reloader) Status() Status {
	id := r.Current()
	st := Status{Fingerprint: id.Fingerprint, Subject: id.Certificate.Leaf.Subject.String(), NotAfter: id.NotAfter, CANotAfter: id.CANotAfter, Generation: id.Generation}
	r.mu.Lock()
	if r.lastFailure != nil {
		st.LastRejection, st.LastRejectionDetail = r.lastFailure.Reason, r.lastFailure.Detail
	}
	r.mu.Unlock()
	return st
}
