// Package report is what a gateway pod's sidecar tells the agent
// about the overlay it delivered: the wire shape, its validation, and the
// sidecar's reporter. A report carries revisions, times, states and
// bounded reasons, never envelope content and never a secret.
package report

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/gridsync/gridsync/shared/envelope"
	"github.com/gridsync/gridsync/shared/overlaysync"
)

// Path is where the agent's signals listener takes reports.
const Path = "/v1/site/deliveries"

// MaxBytes bounds a report (a body, or a line of a stream).
const MaxBytes = 4 << 10

// StreamContentType marks a stream of reports, one JSON report a line,
// written as they come on one request that stays open.
const StreamContentType = "application/x-ndjson"

// States a sidecar reports: its /status states.
const (
	StateCold          = "cold"
	StateReady         = "ready"
	StateReadyDegraded = "ready_degraded"
	StateStale         = "stale"
)

// Report is one sidecar's delivery state.
type Report struct {
	Namespace string `json:"namespace"`
	Gateway   string `json:"gateway"`
	Pod       string `json:"pod"`
	// Revision is the overlay revision on disk ("" before the first).
	Revision string `json:"revision,omitempty"`
	// ContentDigest is the SHA-256 of the envelope's canonical content,
	// the same hex as the revision.
	ContentDigest string     `json:"content_digest,omitempty"`
	WrittenAt     *time.Time `json:"written_at,omitempty"`
	State         string     `json:"state"`
	// LastRejectionReason is a reason of the envelope contract's closed
	// set, or a delivery reason (api_unreachable, write_failed...).
	LastRejectionReason string `json:"last_rejection_reason,omitempty"`

	// Reads lists the forms of the overlay ConfigMap the sidecar reads
	// ("plain", "zstd"); a sidecar that predates the compressed form
	// sends none, and is taken to read the plain form only.
	Reads []string `json:"reads,omitempty"`
	// Encoding is the form the pod's configuration asks for: "auto" (the
	// agent decides), "zstd" or "plain".
	Encoding string `json:"encoding,omitempty"`
	// MaxBytes is the largest envelope the sidecar accepts: the agent
	// publishes nothing larger to its gateway.
	MaxBytes int `json:"max_bytes,omitempty"`
}

// The forms a sidecar reads, and the encodings it may ask for.
const (
	FormPlain    = envelope.EncodingPlain
	FormZstd     = envelope.EncodingZstd
	EncodingAuto = envelope.EncodingAuto
)

// maxForms bounds Reads: there are two forms today.
const maxForms = 4

var (
	hexDigest = regexp.MustCompile(`^[0-9a-f]{64}$`)
	reason    = regexp.MustCompile(`^[a-z][a-z0-9_]{0,62}$`)
)

// Validate refuses a report that is not well formed, saying why (without
// quoting it).
func (r Report) Validate() error {
	var problems []error
	for field, v := range map[string]string{"namespace": r.Namespace, "gateway": r.Gateway} {
		if errs := validation.IsDNS1123Label(v); len(errs) > 0 {
			problems = append(problems, fmt.Errorf("%s is not a DNS label", field))
		}
	}
	if errs := validation.IsDNS1123Subdomain(r.Pod); len(errs) > 0 {
		problems = append(problems, errors.New("pod is not a DNS subdomain"))
	}
	if r.Revision != "" && !hexDigest.MatchString(r.Revision) {
		problems = append(problems, errors.New("revision is not 64 lowercase hex"))
	}
	if r.ContentDigest != "" && r.ContentDigest != r.Revision {
		problems = append(problems, errors.New("content_digest differs from revision"))
	}
	switch r.State {
	case StateCold, StateReady, StateReadyDegraded, StateStale:
	default:
		problems = append(problems, errors.New("state is not one of cold, ready, ready_degraded, stale"))
	}
	if r.State != StateCold && r.Revision == "" {
		problems = append(problems, errors.New("a state past cold needs a revision"))
	}
	if r.LastRejectionReason != "" && !reason.MatchString(r.LastRejectionReason) {
		problems = append(problems, errors.New("last_rejection_reason is not a reason"))
	}
	if len(r.Reads) > maxForms {
		problems = append(problems, fmt.Errorf("reads lists more than %d forms", maxForms))
	}
	for _, f := range r.Reads {
		if f != FormPlain && f != FormZstd {
			problems = append(problems, errors.New("reads lists a form that is not plain or zstd"))
			break
		}
	}
	switch r.Encoding {
	case "", EncodingAuto, FormPlain, FormZstd:
	default:
		problems = append(problems, errors.New("encoding is not one of auto, zstd, plain"))
	}
	if r.MaxBytes < 0 || r.MaxBytes > envelope.MaxBytesCeiling {
		problems = append(problems, fmt.Errorf("max_bytes is not between 0 and %d", envelope.MaxBytesCeiling))
	}
	return errors.Join(problems...)
}

// sameState reports whether two reports say the same (a heartbeat of an
// unchanged state is sent on its interval, not on every change check).
func sameState(a, b Report) bool {
	wa, wb := a.WrittenAt, b.WrittenAt
	sameTime := wa == nil && wb == nil || wa != nil && wb != nil && wa.Equal(*wb)
	return sameTime && slices.Equal(a.Reads, b.Reads) &&
		a.Namespace == b.Namespace && a.Gateway == b.Gateway && a.Pod == b.Pod && a.Revision == b.Revision &&
		a.ContentDigest == b.ContentDigest && a.State == b.State && a.LastRejectionReason == b.LastRejectionReason &&
		a.Encoding == b.Encoding && a.MaxBytes == b.MaxBytes
}

// ReadsForm reports whether the sidecar says it reads form; the plain form
// is read by every sidecar, those that say nothing included.
func (r Report) ReadsForm(form string) bool {
	return form == FormPlain || slices.Contains(r.Reads, form)
}

// Of is what a sidecar reports of its state: revisions, times, state and
// reason, nothing of the envelope's content.
func Of(namespace, gateway, pod string, st overlaysync.Status) Report {
	return Report{
		Namespace:           namespace,
		Gateway:             gateway,
		Pod:                 pod,
		Revision:            st.WrittenRevision,
		ContentDigest:       st.WrittenRevision,
		WrittenAt:           st.LastWrittenAt,
		State:               st.State,
		LastRejectionReason: st.LastRejectionReason,
	}
}
