// Package probe runs the health checks of InferenceProviders: one loop per
// provider that has a healthCheck, each GET bounded by a timeout and never
// following a redirect. It reports a provider only when its health level
// changes (healthy, failing, failed), so a provider that keeps failing
// does not cause a status write on every probe.
//
// Probes connect only where Destinations allow, and a failure is reported
// as one of a closed set of outcomes: what a foreign server answered, or
// which internal address refused, never reaches a status.
package probe

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"sync"
	"syscall"
	"time"

	"github.com/gridsync/gridsync/controller/providerpolicy"
	"github.com/gridsync/gridsync/shared/keypolicy"
)

// Target is what to probe for one provider.
type Target struct {
	// URL is the healthCheck endpoint.
	URL string
	// Origin is the provider's spec.endpoint: a token is sent only to an
	// HTTPS health endpoint of the same origin.
	Origin string
	Period time.Duration
	// Timeout bounds one probe; 0, or more than MaxTimeout or the
	// period, is the smaller of those two.
	Timeout time.Duration
	// Token returns the bearer token, or "" for none. It is called for
	// each probe that may carry it, so a rotated Secret is picked up.
	// ErrTokenWithheld probes without a token and says so.
	Token func(ctx context.Context) (string, error)
	// Endpoint, when set, is the health check's own TLS and credential
	// (its token replaces Token's); a probe it cannot be made usable for
	// is not sent, and the provider's health carries the reason.
	Endpoint *Endpoint
}

// ErrTokenWithheld is what a Target's Token returns when the credential
// exists but must not be sent in probes (its Secret does not match the
// agent's probe Secret selector).
var ErrTokenWithheld = errors.New("credential withheld from health probes")

// Outcomes of a failed probe: the closed set that a provider's status
// may carry.
const (
	OutcomeTimeout              = "timeout"
	OutcomeDestinationDenied    = "destination_denied"
	OutcomeDNSError             = "dns_error"
	OutcomeConnectionRefused    = "connection_refused"
	OutcomeConnectionFailed     = "connection_failed"
	OutcomeTLSError             = "tls_error"
	OutcomeRedirect             = "redirect"
	OutcomeClientError          = "status_4xx"
	OutcomeServerError          = "status_5xx"
	OutcomeUnexpectedStatus     = "unexpected_status"
	OutcomeBadEndpoint          = "bad_endpoint"
	OutcomeCredentialUnreadable = "credential_unreadable"
	// OutcomeTooLarge: a scrape's body passed its bound.
	OutcomeTooLarge = "too_large"
)

// Options configure a Prober.
type Options struct {
	// Destinations limit where probes connect.
	Destinations Destinations
	// RootCAs verify probed HTTPS servers; nil means the system's.
	RootCAs *x509.CertPool
	// Notify is called with a provider's name whenever its health level
	// changes.
	Notify func(provider string)
}

// Prober runs the probe loops.
type Prober struct {
	client *http.Client
	dest   Destinations
	notify func(provider string)

	mu      sync.Mutex
	loops   map[string]*loop
	health  map[string]providerpolicy.Health
	clients map[string]*endpointClient
}

type loop struct {
	target Target // guarded by Prober.mu: Ensure replaces its Token
	cancel context.CancelFunc
	done   chan struct{}
}

// MaxTimeout bounds a probe; a shorter period bounds it further.
const MaxTimeout = 5 * time.Second

// New returns a Prober.
func New(opts Options) *Prober {
	p := &Prober{
		dest:    opts.Destinations,
		notify:  opts.Notify,
		loops:   map[string]*loop{},
		health:  map[string]providerpolicy.Health{},
		clients: map[string]*endpointClient{},
	}
	p.client = p.httpClient(p.transport(&tls.Config{RootCAs: opts.RootCAs, MinVersion: tls.VersionTLS12}, true))
	return p
}

// transport is every client's: the destination rule at each dial, no
// proxy, one idle connection per host (a provider is probed or scraped
// once a period, and its connection is kept for the next). http2 offers
// HTTP/2 to HTTPS servers; without it a kept HTTP/1.1 connection serves
// the one small GET a period, at less CPU per request than HTTP/2's
// framing and flow control.
//
// An HTTPS connection is made by keypolicy.DialTLS with tlsConfig: the
// server's chain is judged by its length and keys before any signature
// is checked, then verified as the transport's own TLS would verify it,
// for the host dialled (or tlsConfig's ServerName).
func (p *Prober) transport(tlsConfig *tls.Config, http2 bool) *http.Transport {
	t := &http.Transport{
		// No proxy: a proxy would connect where the rule cannot see.
		Proxy:               nil,
		DialContext:         p.dial,
		TLSClientConfig:     tlsConfig,
		ForceAttemptHTTP2:   http2,
		TLSHandshakeTimeout: MaxTimeout,
		MaxIdleConnsPerHost: 1,
		IdleConnTimeout:     90 * time.Second,
	}
	// TLSClientConfig is read at each dial, not now: with HTTP/2 the
	// transport adds its protocols to it before its first dial.
	t.DialTLSContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		return keypolicy.DialTLS(ctx, p.dial, network, addr, t.TLSClientConfig, t.TLSHandshakeTimeout)
	}
	return t
}

func (p *Prober) httpClient(transport *http.Transport) *http.Client {
	return &http.Client{
		Transport: transport,
		// A redirect is an answer, not a hop to follow: a health
		// endpoint that redirects is misconfigured, and following it
		// could carry the token elsewhere.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// dial connects with the destination rule checked on every address the
// name resolves to, at the moment of connecting.
func (p *Prober) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	return p.dest.Dialer(MaxTimeout)(ctx, network, addr)
}

// Health returns what is known of a provider.
func (p *Prober) Health(provider string) providerpolicy.Health {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.health[provider]
}

// Ensure probes provider with target, restarting its loop when the target
// changed. The loops stop when ctx ends.
func (p *Prober) Ensure(ctx context.Context, provider string, target Target) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if l, ok := p.loops[provider]; ok {
		if l.target.URL == target.URL && l.target.Origin == target.Origin && l.target.Period == target.Period &&
			l.target.Timeout == target.Timeout && endpointKey(l.target.Endpoint) == endpointKey(target.Endpoint) {
			// Read by the loop under p.mu.
			l.target.Token, l.target.Endpoint = target.Token, target.Endpoint
			return
		}
		l.cancel()
		delete(p.health, provider)
		if key := endpointKey(l.target.Endpoint); key != "" && key != endpointKey(target.Endpoint) {
			p.dropClientLocked(key)
		}
	}
	loopCtx, cancel := context.WithCancel(ctx)
	l := &loop{target: target, cancel: cancel, done: make(chan struct{})}
	p.loops[provider] = l
	go p.run(loopCtx, provider, l)
}

// Remove stops probing provider and forgets its health.
func (p *Prober) Remove(provider string) {
	p.mu.Lock()
	l, ok := p.loops[provider]
	delete(p.loops, provider)
	delete(p.health, provider)
	p.mu.Unlock()
	if ok {
		l.cancel()
		<-l.done
		if key := endpointKey(l.target.Endpoint); key != "" {
			p.DropClient(key)
		}
	}
}

func endpointKey(e *Endpoint) string {
	if e == nil {
		return ""
	}
	return e.Key
}

func (p *Prober) run(ctx context.Context, provider string, l *loop) {
	defer close(l.done)
	ticker := time.NewTicker(l.target.Period)
	defer ticker.Stop()
	for {
		p.mu.Lock()
		target := l.target
		p.mu.Unlock()
		start := time.Now()
		withheld, err := p.probe(ctx, target)
		if ctx.Err() != nil {
			return
		}
		p.record(provider, l, withheld, err, start, time.Since(start))
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
	}
}

// level buckets consecutive failures by the assessment rule.
func level(failures int) int {
	switch {
	case failures >= providerpolicy.UnavailableAfter:
		return 2
	case failures >= providerpolicy.DegradedAfter:
		return 1
	}
	return 0
}

func (p *Prober) record(provider string, l *loop, withheld bool, err error, at time.Time, latency time.Duration) {
	p.mu.Lock()
	if p.loops[provider] != l {
		p.mu.Unlock()
		return // replaced or removed meanwhile
	}
	before, seen := p.health[provider]
	after := providerpolicy.Health{Probed: true, TokenWithheld: withheld, LastProbeAt: at, LastLatency: latency}
	var config *ConfigError
	switch {
	case errors.As(err, &config):
		// Nothing was sent: what the probes found before stands, and
		// the reason is the health check's configuration.
		after = before
		after.Refusal, after.RefusalMessage = config.Reason, config.Message
	case err != nil:
		after.ConsecutiveFailures = before.ConsecutiveFailures + 1
		after.LastError = err.Error()
	}
	changed := !seen || before.Probed != after.Probed || level(before.ConsecutiveFailures) != level(after.ConsecutiveFailures) ||
		before.TokenWithheld != after.TokenWithheld ||
		before.Refusal != after.Refusal || before.RefusalMessage != after.RefusalMessage
	if !changed {
		// Keep the error that explained the level, so that the status
		// message does not change with every probe.
		after.LastError = before.LastError
	}
	p.health[provider] = after
	p.mu.Unlock()
	if changed && p.notify != nil {
		p.notify(provider)
	}
}

// failure is a failed probe; its text is one of the outcomes.
type failure string

func (f failure) Error() string { return string(f) }

// probe GETs the health endpoint once. withheld says a token existed but
// was not sent. A failure is one of the outcomes, or a ConfigError when
// nothing could be sent.
func (p *Prober) probe(ctx context.Context, t Target) (withheld bool, err error) {
	timeout := min(MaxTimeout, t.Period)
	if t.Timeout > 0 {
		timeout = min(timeout, t.Timeout)
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, t.URL, nil)
	if err != nil {
		return false, failure(OutcomeBadEndpoint)
	}
	client, token, err := p.prepare(ctx, t.URL, t.Endpoint)
	if err != nil {
		return false, err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	} else if t.Token != nil && mayCarryToken(t.URL, t.Origin) {
		token, err := t.Token(ctx)
		switch {
		case errors.Is(err, ErrTokenWithheld):
			withheld = true
		case err != nil:
			return false, failure(OutcomeCredentialUnreadable)
		case token != "":
			req.Header.Set("Authorization", "Bearer "+token)
		}
	}
	resp, err := client.Do(req)
	if err != nil {
		return withheld, failure(OutcomeOf(err))
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	_ = resp.Body.Close()
	switch code := resp.StatusCode; {
	case code >= 200 && code <= 299:
		return withheld, nil
	case code >= 300 && code <= 399:
		return withheld, failure(OutcomeRedirect)
	case code >= 400 && code <= 499:
		return withheld, failure(OutcomeClientError)
	case code >= 500 && code <= 599:
		return withheld, failure(OutcomeServerError)
	default:
		return withheld, failure(OutcomeUnexpectedStatus)
	}
}

// OutcomeOf names a failed request by its kind only (one of the Outcome
// constants): the error's text holds addresses and the server's words.
func OutcomeOf(err error) string {
	var dnsErr *net.DNSError
	var certErr *tls.CertificateVerificationError
	var alert tls.AlertError
	var recordErr tls.RecordHeaderError
	var unknownAuthority x509.UnknownAuthorityError
	var hostnameErr x509.HostnameError
	var invalidCert x509.CertificateInvalidError
	switch {
	case errors.Is(err, errDenied):
		return OutcomeDestinationDenied
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) || isTimeout(err):
		return OutcomeTimeout
	case errors.As(err, &dnsErr):
		return OutcomeDNSError
	case errors.Is(err, syscall.ECONNREFUSED):
		return OutcomeConnectionRefused
	case errors.As(err, &certErr), errors.As(err, &alert), errors.As(err, &recordErr),
		errors.As(err, &unknownAuthority), errors.As(err, &hostnameErr), errors.As(err, &invalidCert):
		return OutcomeTLSError
	}
	return OutcomeConnectionFailed
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// mayCarryToken: only HTTPS, and only to the provider's own origin
// (scheme, host and port), so that a health endpoint elsewhere never sees
// the provider's credential.
func mayCarryToken(healthURL, origin string) bool {
	h, err := url.Parse(healthURL)
	if err != nil || h.Scheme != "https" {
		return false
	}
	o, err := url.Parse(origin)
	if err != nil {
		return false
	}
	return o.Scheme == "https" && h.Hostname() == o.Hostname() && httpsPort(h) == httpsPort(o)
}

func httpsPort(u *url.URL) string {
	if p := u.Port(); p != "" {
		return p
	}
	return "443"
}

// Fetch GETs url under the probes' destination rule (no proxy, no
// redirect followed), bounded by timeout and by maxBytes of body: the
// site's metrics scrapes go where its probes may, and nowhere else. e,
// when set, is the scrape's TLS and credential; a ConfigError says why
// nothing was sent.
func (p *Prober) Fetch(ctx context.Context, url string, timeout time.Duration, maxBytes int64, e *Endpoint) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, http.NoBody)
	if err != nil {
		return nil, failure(OutcomeBadEndpoint)
	}
	client, token, err := p.prepare(ctx, url, e)
	if err != nil {
		return nil, err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	req.Header.Set("Accept", "text/plain;version=0.0.4")
	resp, err := client.Do(req)
	if err != nil {
		return nil, failure(OutcomeOf(err))
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return nil, failure(OutcomeUnexpectedStatus)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxBytes+1))
	if err != nil {
		return nil, failure(OutcomeOf(err))
	}
	if int64(len(body)) > maxBytes {
		return nil, failure(OutcomeTooLarge)
	}
	return body, nil
}
