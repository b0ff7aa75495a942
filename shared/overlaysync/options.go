package overlaysync

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gridsync/gridsync/shared/envelope"
	"github.com/gridsync/gridsync/shared/publish"
)

// Options configure a Syncer. The zero values of the optional fields are
// the defaults documented on each.
type Options struct {
	Namespace string // the ConfigMap's namespace
	ConfigMap string // the ConfigMap's name
	DataKey   string // the data key holding the envelope
	Output    string // the file to publish, in the shared volume

	// Expect is the scope this gateway serves; empty fields are not checked.
	Expect envelope.Scope
	// MaxBytes bounds an envelope; 0 means envelope.DefaultMaxBytes.
	MaxBytes int
	// AcceptLegacy delivers a bare overlay without an envelope.
	AcceptLegacy bool
	// FileMode of the published file; 0 means 0644, readable by a gateway
	// that runs as another user.
	FileMode fs.FileMode
	// Fsync says when a publication is fsynced; "" means publish.SyncAuto
	// (not in an emptyDir or on tmpfs).
	Fsync publish.SyncMode

	// ExpireAfter withdraws readiness when the source has not been
	// confirmed (a successful list, watch start or watch event) for longer
	// than this. 0 disables it: the last-known-good then serves for ever.
	ExpireAfter time.Duration
	// WatchIdleTimeout restarts a watch that has delivered nothing, not
	// even a bookmark, for this long; 0 means 3 minutes. The API server
	// sends a bookmark about once a minute to a watch that asks for them.
	WatchIdleTimeout time.Duration
	// BackoffMin and BackoffMax bound the delay between attempts while
	// the API server is unreachable; 0 means 1s and 30s.
	BackoffMin, BackoffMax time.Duration
	// RetryWrite is how soon a failed file write is retried; 0 means 1s.
	RetryWrite time.Duration

	// Once makes Run return after the first valid overlay is on disk (the
	// init container, and the sidecar's --once).
	Once bool

	// Notify, when set, is called after every change of what the Syncer
	// serves or says (a write, a rejection, the source gone, the API lost
	// or back). It must not block: delivery waits for it.
	Notify func()

	// Logger receives JSON events; nil discards them.
	Logger *slog.Logger
	// Registerer receives the metrics; nil registers nothing.
	Registerer prometheus.Registerer
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

func (o *Options) defaults() {
	if o.MaxBytes <= 0 {
		o.MaxBytes = envelope.DefaultMaxBytes
	}
	if o.FileMode == 0 {
		o.FileMode = 0o644
	}
	if o.WatchIdleTimeout <= 0 {
		o.WatchIdleTimeout = 3 * time.Minute
	}
	if o.BackoffMin <= 0 {
		o.BackoffMin = time.Second
	}
	if o.BackoffMax <= 0 {
		o.BackoffMax = 30 * time.Second
	}
	if o.RetryWrite <= 0 {
		o.RetryWrite = time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
}

func (o *Options) validate() error {
	var errs []error
	if o.Namespace == "" {
		errs = append(errs, errors.New("namespace is empty"))
	}
	if o.ConfigMap == "" {
		errs = append(errs, errors.New("config map name is empty"))
	}
	if o.DataKey == "" {
		errs = append(errs, errors.New("data key is empty"))
	}
	if o.Output == "" {
		errs = append(errs, errors.New("output path is empty"))
	}
	if o.BackoffMin > o.BackoffMax {
		errs = append(errs, fmt.Errorf("backoff minimum %s exceeds maximum %s", o.BackoffMin, o.BackoffMax))
	}
	return errors.Join(errs...)
}
