// Package probe runs the health checks of InferenceProviders: one loop per
// provider that has a healthCheck, each GET bounded by a timeout and never
// following a redirect. It reports a provider only when its health level
// changes (healthy, failing, failed), so a provider that keeps failing
// does not cause a status write on every probe.
package probe

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sync"
	"time"

	"github.com/gridsync/gridsync/controller/assess"
)

// Target is what to probe for one provider.
type Target struct {
	// URL is the healthCheck endpoint.
	URL string
	// Origin is the provider's spec.endpoint: a token is sent only to an
	// HTTPS health endpoint of the same origin.
	Origin string
	Period time.Duration
	// Token returns the bearer token, or "" for none. It is called for
	// each probe that may carry it, so a rotated Secret is picked up.
	Token func(ctx context.Context) (string, error)
}

// Prober runs the probe loops.
type Prober struct {
	client *http.Client
	notify func(provider string)

	mu     sync.Mutex
	loops  map[string]*loop
	health map[string]assess.Health
}

type loop struct {
	target Target
	cancel context.CancelFunc
	done   chan struct{}
}

// MaxTimeout bounds a probe; a shorter period bounds it further.
const MaxTimeout = 5 * time.Second

// New returns a Prober that calls notify with a provider's name whenever
// its health level changes. transport is the HTTP transport (nil for the
// default one).
func New(transport http.RoundTripper, notify func(provider string)) *Prober {
	return &Prober{
		client: &http.Client{
			Transport: transport,
			// A redirect is an answer, not a hop to follow: a health
			// endpoint that redirects is misconfigured, and following it
			// could carry the token elsewhere.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
		notify: notify,
		loops:  map[string]*loop{},
		health: map[string]assess.Health{},
	}
}

// Health returns what is known of a provider.
func (p *Prober) Health(provider string) assess.Health {
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
		if l.target.URL == target.URL && l.target.Origin == target.Origin && l.target.Period == target.Period {
			l.target.Token = target.Token
			return
		}
		l.cancel()
		delete(p.health, provider)
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
	}
}

func (p *Prober) run(ctx context.Context, provider string, l *loop) {
	defer close(l.done)
	ticker := time.NewTicker(l.target.Period)
	defer ticker.Stop()
	for {
		err := p.probe(ctx, l.target)
		if ctx.Err() != nil {
			return
		}
		p.record(provider, l, err)
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
	case failures >= assess.UnavailableAfter:
		return 2
	case failures >= assess.DegradedAfter:
		return 1
	}
	return 0
}

func (p *Prober) record(provider string, l *loop, err error) {
	p.mu.Lock()
	if p.loops[provider] != l {
		p.mu.Unlock()
		return // replaced or removed meanwhile
	}
	before := p.health[provider]
	after := assess.Health{Probed: true}
	if err != nil {
		after.ConsecutiveFailures = before.ConsecutiveFailures + 1
		after.LastError = err.Error()
	}
	changed := !before.Probed || level(before.ConsecutiveFailures) != level(after.ConsecutiveFailures)
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

// probe GETs the health endpoint once.
func (p *Prober) probe(ctx context.Context, t Target) error {
	timeout := min(MaxTimeout, t.Period)
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, t.URL, nil)
	if err != nil {
		return fmt.Errorf("bad health endpoint: %w", err)
	}
	if t.Token != nil && mayCarryToken(t.URL, t.Origin) {
		token, err := t.Token(ctx)
		if err != nil {
			return fmt.Errorf("read credential: %w", err)
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
	}
	resp, err := p.client.Do(req)
	if err != nil {
		var uerr *url.Error
		if errors.As(err, &uerr) {
			// The URL is the provider's own configuration; the error
			// without it stays short in a status message.
			err = uerr.Err
		}
		if errors.Is(err, context.DeadlineExceeded) {
			return fmt.Errorf("no answer within %s", timeout)
		}
		return err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	_ = resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return fmt.Errorf("status %d", resp.StatusCode)
	}
	return nil
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
