// Package tlsserver serves HTTPS (crypto/tls) and HTTP/3 (quic-go) with
// the identity a tlsidentity.Reloader holds, swapping it for new
// handshakes while established connections keep theirs, optionally with
// mutual TLS.
//
// It handles the traps of swapping identities under TLS 1.3:
//   - A resumed session carries no certificate: the client trusts what it
//     saw when the ticket was issued. Every identity gets its own fresh
//     session-ticket key, so a ticket issued under an older identity
//     cannot resume and the client sees the new certificate.
//   - Authorisation runs in VerifyConnection, which crypto/tls also calls
//     on resumption, so a revoked peer cannot resume its way back in.
//   - 0-RTT stays off: early data can be replayed.
package tlsserver

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"

	"github.com/gridsync/gridsync/shared/tlsidentity"
)

// Options configure the servers.
type Options struct {
	// Identity supplies the certificate, and the CA bundle for MutualTLS.
	Identity *tlsidentity.Reloader
	// MutualTLS requires a client certificate that verifies to the
	// identity's current CA bundle.
	MutualTLS bool
	// OptionalClientCert verifies a client certificate against the
	// identity's CA bundle when one is presented and admits a caller
	// without one; the server then decides what such a caller may do.
	// MutualTLS wins when both are set.
	OptionalClientCert bool
	// Authorize, when set, decides on every connection, full handshakes
	// and resumptions alike; an error refuses it.
	Authorize func(tls.ConnectionState) error
	// OnIdentity, when set, is called once for each identity that starts
	// serving new handshakes, the first included (a listener starts its
	// caps over when its TLS material reloads).
	OnIdentity func(*tlsidentity.Identity)
}

// configs builds one tls.Config per identity and hands the current one
// to every handshake.
type configs struct {
	opts Options
	mu   sync.Mutex
	id   *tlsidentity.Identity
	cfg  *tls.Config
}

// Config returns the server configuration: TLS 1.3 only, the current
// identity for every handshake.
func Config(opts Options) (*tls.Config, error) {
	if opts.Identity == nil {
		return nil, errors.New("tlsserver: no identity")
	}
	c := &configs{opts: opts}
	// Fail now, not at the first handshake, when mutual TLS has no CA.
	if _, err := c.current(); err != nil {
		return nil, err
	}
	return &tls.Config{
		MinVersion: tls.VersionTLS13,
		// net/http enables HTTP/2 only when the server's own config
		// offers h2, whatever the per-handshake config says.
		NextProtos: []string{"h2", "http/1.1"},
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			return c.current()
		},
	}, nil
}

func (c *configs) current() (*tls.Config, error) {
	id := c.opts.Identity.Current()
	c.mu.Lock()
	defer c.mu.Unlock()
	if id == c.id {
		return c.cfg, nil
	}
	cfg := &tls.Config{
		MinVersion:       tls.VersionTLS13,
		Certificates:     []tls.Certificate{id.Certificate},
		VerifyConnection: c.opts.Authorize,
		// HTTP/2 for HTTPS; the HTTP/3 server replaces this with h3.
		NextProtos: []string{"h2", "http/1.1"},
	}
	if c.opts.MutualTLS || c.opts.OptionalClientCert {
		pool := x509.NewCertPool()
		if len(id.CAPEM) == 0 || !pool.AppendCertsFromPEM(id.CAPEM) {
			return nil, errors.New("tlsserver: verifying client certificates needs a CA bundle in the identity")
		}
		cfg.ClientAuth = tls.VerifyClientCertIfGiven
		if c.opts.MutualTLS {
			cfg.ClientAuth = tls.RequireAndVerifyClientCert
		}
		cfg.ClientCAs = pool
	}
	var key [32]byte
	if _, err := rand.Read(key[:]); err != nil {
		return nil, fmt.Errorf("tlsserver: session ticket key: %w", err)
	}
	cfg.SetSessionTicketKeys([][32]byte{key})
	c.id, c.cfg = id, cfg
	if c.opts.OnIdentity != nil {
		c.opts.OnIdentity(id)
	}
	return cfg, nil
}

// shutdownGrace bounds a graceful stop.
const shutdownGrace = 5 * time.Second

// ServeHTTPS serves handler over TLS on ln until ctx is done.
func ServeHTTPS(ctx context.Context, ln net.Listener, handler http.Handler, opts Options) error {
	cfg, err := Config(opts)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: handler, TLSConfig: cfg, ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(tls.NewListener(ln, cfg)) }()
	select {
	case err := <-errc:
		return fmt.Errorf("https server: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
	defer cancel()
	return srv.Shutdown(sctx)
}

// ServeHTTP3 serves handler over QUIC on conn until ctx is done.
func ServeHTTP3(ctx context.Context, conn net.PacketConn, handler http.Handler, opts Options) error {
	cfg, err := Config(opts)
	if err != nil {
		return err
	}
	srv := &http3.Server{
		Handler:    handler,
		TLSConfig:  cfg,
		QUICConfig: &quic.Config{Allow0RTT: false},
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(conn) }()
	select {
	case err := <-errc:
		return fmt.Errorf("http/3 server: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
	defer cancel()
	return srv.Shutdown(sctx)
}
