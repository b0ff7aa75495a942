package report

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"

	"github.com/gridsync/gridsync/shared/h3fallback"
)

// Defaults of ReporterOptions.
const (
	DefaultInterval = 30 * time.Second
	DefaultTimeout  = 5 * time.Second
	// fallbackFor is how long HTTPS is used after HTTP/3 failed, before
	// HTTP/3 is tried again.
	fallbackFor   = time.Minute
	maxTokenBytes = 16 << 10
)

// ReporterOptions configure a Reporter.
type ReporterOptions struct {
	// URL is the agent's listener, https://host:port.
	URL string
	// TokenFile is the projected ServiceAccount token, read at every send
	// (the kubelet rotates it).
	TokenFile string
	// CAFile verifies the agent's certificate; read when a connection is
	// made, so a rotated bundle is picked up.
	CAFile string
	// ServerName is the name the agent's certificate must carry.
	ServerName string
	// Interval between reports of an unchanged state (a heartbeat, so
	// that the agent tells a silent pod from a steady one).
	Interval time.Duration
	// Timeout bounds one send.
	Timeout time.Duration
	// Snapshot returns the state to report now.
	Snapshot func() Report
	// Dial and DialQUIC, when set, make the connections to the agent
	// over TCP and QUIC (the WAN benchmark's sockets live in a network
	// namespace of their own); the system's dialers when nil.
	Dial       func(ctx context.Context, network, addr string) (net.Conn, error)
	DialQUIC   func(ctx context.Context, addr string, tlsCfg *tls.Config, cfg *quic.Config) (*quic.Conn, error)
	Logger     *slog.Logger
	Registerer prometheus.Registerer
}

// Reporter sends the sidecar's delivery state to the agent, off the
// delivery path: Notify never blocks, the latest state wins, failures are
// counted and logged once per streak.
type Reporter struct {
	opts ReporterOptions
	kick chan struct{}

	mu            sync.Mutex
	h3, https     *http.Client
	h3Transport   *http3.Transport
	httpTransport *http.Transport
	// fallback is the agent's, under one key: HTTPS alone for a while
	// after HTTP/3 failed.
	fallback h3fallback.Memory

	sent   *prometheus.CounterVec
	failed bool
	stream *stream // Run's goroutine only
	// lost: the open stream ended without this side ending it.
	lost atomic.Bool
}

// NewReporter checks the options; Run sends.
func NewReporter(opts ReporterOptions) (*Reporter, error) {
	if !strings.HasPrefix(opts.URL, "https://") {
		return nil, errors.New("report target must be an https:// URL")
	}
	if opts.TokenFile == "" || opts.Snapshot == nil {
		return nil, errors.New("report: a token file and a snapshot are required")
	}
	if opts.Interval <= 0 {
		opts.Interval = DefaultInterval
	}
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultTimeout
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	r := &Reporter{opts: opts, kick: make(chan struct{}, 1), fallback: h3fallback.Memory{For: fallbackFor}}
	r.sent = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "gridsync_delivery_reports_total",
		Help: "Delivery reports sent to the agent, by transport (h3, https) and outcome (accepted, refused, failed).",
	}, []string{"transport", "outcome"})
	for _, tr := range []string{h3fallback.H3, h3fallback.HTTPS} {
		for _, o := range []string{"accepted", "refused", "failed"} {
			r.sent.WithLabelValues(tr, o)
		}
	}
	if opts.Registerer != nil {
		opts.Registerer.MustRegister(r.sent)
	}
	return r, nil
}

// Notify says the state changed; it never blocks.
func (r *Reporter) Notify() {
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

// Run reports at once (a restarted sidecar is known at once), then on
// every change and every Interval, until ctx is done. After a failure it
// retries with a backoff (1 s doubling to Interval), sending whatever the
// state is by then.
func (r *Reporter) Run(ctx context.Context) {
	defer r.close()
	var last *Report
	var lastSent, lastAttempt time.Time
	var backoff time.Duration
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.kick:
		case <-timer.C:
		}
		now := time.Now()
		var wait time.Duration
		rep := r.opts.Snapshot()
		lost := r.lost.Swap(false)
		switch {
		case backoff > 0 && now.Before(lastAttempt.Add(backoff)):
			wait = lastAttempt.Add(backoff).Sub(now)
		case lost || backoff > 0 || last == nil || !sameState(*last, rep) || now.Sub(lastSent) >= r.opts.Interval:
			lastAttempt = now
			if err := r.send(ctx, rep); err != nil {
				backoff = min(max(2*backoff, time.Second), r.opts.Interval)
				wait = backoff
				r.streak(err)
				break
			}
			backoff, last, lastSent, wait = 0, &rep, now, r.opts.Interval
			r.recovered()
		default:
			wait = r.opts.Interval - now.Sub(lastSent)
		}
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
		timer.Reset(max(wait, 10*time.Millisecond))
	}
}

func (r *Reporter) streak(err error) {
	if !r.failed {
		r.failed = true
		r.opts.Logger.Warn("report_failed", "error", err)
		return
	}
	r.opts.Logger.Debug("report_failed", "error", err)
}

func (r *Reporter) recovered() {
	if r.failed {
		r.failed = false
		r.opts.Logger.Info("report_delivered")
	}
}

// errRefused is an answer of the agent, not a transport failure: no
// fallback to HTTPS helps.
type errRefused struct{ status int }

func (e errRefused) Error() string { return fmt.Sprintf("the agent refused the report: %d", e.status) }

// maxStreamAge bounds one report stream: a new one starts after it (the
// agent closes connections older than five minutes anyway).
const maxStreamAge = 4 * time.Minute

// stream is one open request carrying reports, a line each.
type stream struct {
	transport string
	token     string
	opened    time.Time
	pw        *io.PipeWriter
	done      chan struct{} // closed when the request has ended
	err       error         // why it ended; set before done is closed
	// closing: this side ended it (a new token, its age, a failed
	// write); otherwise its end is a loss, reported at once.
	closing atomic.Bool
}

func (st *stream) ended() bool {
	select {
	case <-st.done:
		return true
	default:
		return false
	}
}

// send writes one report on the open stream, opening one (over HTTP/3
// unless it failed lately, then HTTPS) when there is none, the token
// changed or the last one ended. A report the agent refused ends the
// stream with the refusal, seen at the next send.
func (r *Reporter) send(ctx context.Context, rep Report) error {
	token, err := readToken(r.opts.TokenFile)
	if err != nil {
		return err
	}
	line, err := json.Marshal(rep)
	if err != nil {
		return err
	}
	line = append(line, '\n')
	if st := r.stream; st != nil && st.ended() {
		r.stream = nil
		var refused errRefused
		if errors.As(st.err, &refused) {
			r.sent.WithLabelValues(st.transport, "refused").Inc()
			return st.err // a new stream for this report after the backoff
		}
	}
	h3Failed := false
	for range 2 {
		st := r.stream
		if st != nil && (st.token != token || time.Since(st.opened) > maxStreamAge) {
			r.closeStream()
			st = nil
		}
		if st == nil {
			if st, err = r.openStream(ctx, r.fallback.First("", time.Now()), token); err != nil {
				return err
			}
			r.stream = st
		}
		if err = r.write(st, line); err == nil {
			r.sent.WithLabelValues(st.transport, "accepted").Inc()
			return nil
		}
		r.sent.WithLabelValues(st.transport, "failed").Inc()
		r.closeStream()
		var refused errRefused
		if errors.As(err, &refused) {
			return err
		}
		if st.transport == h3fallback.H3 {
			r.fallback.Failed("", time.Now())
			h3Failed = true
		} else if h3Failed {
			// HTTPS failed right after HTTP/3: the agent is unreachable,
			// not QUIC. Back, it is reported to over HTTP/3 first.
			r.fallback.Clear("")
		}
		r.reset(st.transport)
	}
	return err
}

// write hands one line to the stream's request, bounded by Timeout.
func (r *Reporter) write(st *stream, line []byte) error {
	t := time.AfterFunc(r.opts.Timeout, func() { _ = st.pw.CloseWithError(errors.New("report write timed out")) })
	_, err := st.pw.Write(line)
	if !t.Stop() && err == nil {
		err = errors.New("report write timed out")
	}
	if err != nil && st.ended() && st.err != nil {
		return st.err
	}
	return err
}

// openStream starts the request that carries the reports; it ends when
// the stream is closed, the connection goes, or the agent refuses one.
func (r *Reporter) openStream(ctx context.Context, transport, token string) (*stream, error) {
	client, err := r.client(transport)
	if err != nil {
		r.sent.WithLabelValues(transport, "failed").Inc()
		return nil, err
	}
	pr, pw := io.Pipe()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimSuffix(r.opts.URL, "/")+Path, pr)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", StreamContentType)
	req.Header.Set("Authorization", "Bearer "+token)
	st := &stream{transport: transport, token: token, opened: time.Now(), pw: pw, done: make(chan struct{})}
	go func() {
		defer close(st.done)
		resp, err := client.Do(req)
		if err != nil {
			st.err = fmt.Errorf("report over %s: %w", transport, err)
		} else {
			_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10))
			_ = resp.Body.Close()
			if resp.StatusCode != http.StatusAccepted {
				st.err = errRefused{status: resp.StatusCode}
			} else {
				st.err = io.EOF
			}
		}
		_ = pr.CloseWithError(st.err)
		var refused errRefused
		if !st.closing.Load() && !errors.As(st.err, &refused) && ctx.Err() == nil && time.Since(st.opened) >= time.Second {
			// The agent or the network ended the stream (an idle
			// timeout, the agent's restart, its connection age): the
			// latest state goes on a new one at once, not at the next
			// heartbeat. (A stream that ended within a second of its
			// opening waits for the usual schedule: no loop of them.)
			r.lost.Store(true)
			r.Notify()
		}
	}()
	return st, nil
}

// closeStream ends the open stream: the agent answers the whole of it.
func (r *Reporter) closeStream() {
	if r.stream != nil {
		r.stream.closing.Store(true)
		_ = r.stream.pw.Close()
		r.stream = nil
	}
}

// client returns the transport's client, building it (and reading the CA
// bundle) when there is none.
func (r *Reporter) client(transport string) (*http.Client, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if transport == h3fallback.H3 && r.h3 != nil {
		return r.h3, nil
	}
	if transport == h3fallback.HTTPS && r.https != nil {
		return r.https, nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS13, ServerName: r.opts.ServerName}
	if r.opts.CAFile != "" {
		pem, err := os.ReadFile(r.opts.CAFile)
		if err != nil {
			return nil, fmt.Errorf("report CA bundle: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, errors.New("report CA bundle holds no certificate")
		}
		cfg.RootCAs = pool
	}
	if transport == h3fallback.H3 {
		r.h3Transport = &http3.Transport{TLSClientConfig: cfg, QUICConfig: &quic.Config{
			// The heartbeat keeps the connection alive; a few missed
			// beats on a loaded machine must not end it.
			HandshakeIdleTimeout: r.opts.Timeout, MaxIdleTimeout: max(3*r.opts.Interval, 30*time.Second), KeepAlivePeriod: 0,
		}, Dial: r.opts.DialQUIC}
		r.h3 = &http.Client{Transport: r.h3Transport}
		return r.h3, nil
	}
	r.httpTransport = &http.Transport{TLSClientConfig: cfg, ForceAttemptHTTP2: true, IdleConnTimeout: 2 * r.opts.Interval, DialContext: r.opts.Dial}
	r.https = &http.Client{Transport: r.httpTransport}
	return r.https, nil
}

// reset drops a transport after a failure: the next send dials anew, and
// reads the CA bundle again.
func (r *Reporter) reset(transport string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if transport == h3fallback.H3 && r.h3Transport != nil {
		_ = r.h3Transport.Close()
		r.h3, r.h3Transport = nil, nil
	}
	if transport == h3fallback.HTTPS && r.httpTransport != nil {
		r.httpTransport.CloseIdleConnections()
		r.https, r.httpTransport = nil, nil
	}
}

func (r *Reporter) close() {
	r.closeStream()
	r.reset(h3fallback.H3)
	r.reset(h3fallback.HTTPS)
}

func readToken(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("report token: %w", err)
	}
	defer func() { _ = f.Close() }()
	b, err := io.ReadAll(io.LimitReader(f, maxTokenBytes+1))
	if err != nil {
		return "", fmt.Errorf("report token: %w", err)
	}
	if len(b) > maxTokenBytes {
		return "", errors.New("report token: file too large")
	}
	t := strings.TrimSpace(string(b))
	if t == "" {
		return "", errors.New("report token: empty")
	}
	return t, nil
}
