package probe

import (
	"context"
	"crypto/sha256"
	"errors"
	"net/http"
	"net/url"
	"strings"

	"github.com/gridsync/gridsync/controller/providerpolicy"
	"github.com/gridsync/gridsync/trust/endpointtls"
)

// Endpoint is the trust and credential a provider configured for one kind
// of request (its health checks, or its metrics scrapes): the CA that
// alone verifies its server and the certificate presented to it, and a
// bearer token. A request whose Endpoint cannot be made usable is not
// sent at all: the ConfigError says why.
type Endpoint struct {
	// Key names the endpoint among the prober's clients (one connection
	// pool and one TLS session cache each): a feature and a provider.
	Key string
	// TLS reads the material; nil verifies HTTPS against the prober's
	// roots. It is called for every request, so a rotation is used from
	// the next request on; unchanged material reuses the client, its
	// connections and sessions.
	TLS func(ctx context.Context) (*endpointtls.Raw, error)
	// Token returns the bearer token to send; nil sends none.
	Token func(ctx context.Context) (string, error)
	// AllowPlaintext lets Token travel over http://.
	AllowPlaintext bool
}

// ConfigError is an Endpoint that cannot be used; nothing was sent.
type ConfigError struct {
	// Reason is why: the material cannot be used, the token could not
	// be obtained (RefusalAuthCredentialUnavailable), or TLS or a token
	// without allowPlaintext is configured for an http:// endpoint
	// (RefusalPlaintext). Each feature reports it with its own status
	// reason (providerpolicy.HealthCheckReason, MetricsReason).
	Reason  providerpolicy.Refusal
	Message string
}

func (e *ConfigError) Error() string { return string(e.Reason) + ": " + e.Message }

// endpointClient is an HTTP client for one Endpoint's material.
type endpointClient struct {
	fingerprint [sha256.Size]byte
	client      *http.Client
	transport   *http.Transport
}

// prepare returns the client and the token for a request to rawURL with
// e (the shared client and no token when e is nil).
func (p *Prober) prepare(ctx context.Context, rawURL string, e *Endpoint) (*http.Client, string, error) {
	if e == nil {
		return p.client, "", nil
	}
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, "", failure(OutcomeBadEndpoint)
	}
	https := u.Scheme == "https"
	if e.TLS != nil && !https {
		return nil, "", &ConfigError{providerpolicy.RefusalPlaintext, "TLS is configured but the endpoint is " + u.Scheme + "://: nothing is sent without it"}
	}
	if e.Token != nil && !https && !e.AllowPlaintext {
		return nil, "", &ConfigError{providerpolicy.RefusalPlaintext, "a credential is configured but the endpoint is " + u.Scheme + "://: it is sent over HTTPS only, unless allowPlaintext"}
	}
	client := p.client
	if e.TLS != nil {
		if client, err = p.tlsClient(ctx, e); err != nil {
			return nil, "", err
		}
	}
	var token string
	if e.Token != nil {
		if token, err = e.Token(ctx); err != nil {
			return nil, "", &ConfigError{providerpolicy.RefusalAuthCredentialUnavailable, err.Error()}
		}
	}
	return client, token, nil
}

// tlsClient returns e's client for the material read now: the one made
// before while the material is the same, a new one (the old one's idle
// connections closed) when it changed.
func (p *Prober) tlsClient(ctx context.Context, e *Endpoint) (*http.Client, error) {
	raw, err := e.TLS(ctx)
	if err != nil {
		return nil, materialError(err)
	}
	fingerprint := raw.Fingerprint()
	p.mu.Lock()
	c, ok := p.clients[e.Key]
	p.mu.Unlock()
	if ok && c.fingerprint == fingerprint {
		return c.client, nil
	}
	m, err := raw.Parse()
	if err != nil {
		return nil, materialError(err)
	}
	transport := p.transport(m.ClientConfig(), false)
	next := &endpointClient{fingerprint: fingerprint, transport: transport, client: p.httpClient(transport)}
	p.mu.Lock()
	old := p.clients[e.Key]
	p.clients[e.Key] = next
	p.mu.Unlock()
	if old != nil {
		old.transport.CloseIdleConnections()
	}
	return next.client, nil
}

// materialError is the ConfigError naming material that cannot be used;
// any other error (the API server did not answer) is neither good nor bad
// material, and the request fails as unreadable.
func materialError(err error) error {
	var material *endpointtls.Error
	if errors.As(err, &material) {
		if refusal, ok := providerpolicy.TLSRefusal(material.Reason); ok {
			return &ConfigError{refusal, material.Message}
		}
	}
	return failure(OutcomeCredentialUnreadable)
}

// DropClient forgets an Endpoint's client (its provider is gone, or no
// longer configures TLS) and closes its idle connections.
func (p *Prober) DropClient(key string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.dropClientLocked(key)
}

// RetainClients drops the clients whose key has prefix and whose rest is
// not in keep.
func (p *Prober) RetainClients(prefix string, keep map[string]bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for key := range p.clients {
		if rest, ok := strings.CutPrefix(key, prefix); ok && !keep[rest] {
			p.dropClientLocked(key)
		}
	}
}

func (p *Prober) dropClientLocked(key string) {
	if c := p.clients[key]; c != nil {
		// Closing idle connections does not wait on the network.
		c.transport.CloseIdleConnections()
		delete(p.clients, key)
	}
}

// Clients is how many Endpoint clients the prober keeps.
func (p *Prober) Clients() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.clients)
}
