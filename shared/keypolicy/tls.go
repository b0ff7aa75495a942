package keypolicy

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"time"
)

// ClientConfigFor is cfg, a client's TLS configuration, made for one
// connection to host (the host the dialler was given, without its port):
// the server's chain is judged by CheckChain before any signature made
// with its keys is checked, then verified as crypto/tls verifies it.
//
// crypto/tls checks every signature of whatever chain the server sends,
// an invented intermediate with a key of thousands of bits included,
// before any hook can look at the chain: so its verification is turned
// off (InsecureSkipVerify) and replaced by VerifyServerChain, which
// VerifyConnection runs on every connection, resumed ones included.
//
// The name verified is the one crypto/tls would verify: cfg.ServerName
// when it is set, else host (an IP address is matched against the
// certificate's IP SANs). It is fixed here, per connection, because the
// connection's state does not tell it: a client sends no SNI to an IP
// address, and the state's ServerName is then empty.
//
// cfg is not changed. Its VerifyConnection, if any, runs after the
// chain is verified. VerifyPeerCertificate is not supported (it would run
// before the keys are judged, and be given no verified chains): with one,
// every handshake fails.
func ClientConfigFor(cfg *tls.Config, host string) *tls.Config {
	c := cfg.Clone()
	if c.ServerName == "" {
		c.ServerName = host
	}
	name, roots, now, next := c.ServerName, c.RootCAs, c.Time, c.VerifyConnection
	if c.VerifyPeerCertificate != nil {
		c.VerifyPeerCertificate = func([][]byte, [][]*x509.Certificate) error {
			return errors.New("keypolicy: VerifyPeerCertificate is not supported with ClientConfigFor")
		}
	}
	c.InsecureSkipVerify = true // replaced by VerifyConnection below, not skipped
	c.VerifyConnection = func(cs tls.ConnectionState) error {
		at := time.Now()
		if now != nil {
			at = now()
		}
		if err := VerifyServerChain(cs.PeerCertificates, roots, name, at); err != nil {
			return err
		}
		if next != nil {
			return next(cs)
		}
		return nil
	}
	return c
}

// VerifyServerChain is the check ClientConfigFor installs: the chain's
// length and keys (CheckChain), and only then its signatures up to roots
// (the system's when nil), for server authentication, for serverName, at
// now, as crypto/tls verifies a server. Its errors are
// *tls.CertificateVerificationError, as crypto/tls's are; a refused key
// also wraps ErrKeyRefused.
func VerifyServerChain(chain []*x509.Certificate, roots *x509.CertPool, serverName string, now time.Time) error {
	if len(chain) == 0 {
		return errors.New("tls: the server presented no certificate")
	}
	if err := CheckChain(chain); err != nil {
		return &tls.CertificateVerificationError{UnverifiedCertificates: chain, Err: fmt.Errorf("the server's chain: %w", err)}
	}
	opts := x509.VerifyOptions{
		Roots:         roots,
		CurrentTime:   now,
		DNSName:       serverName,
		Intermediates: x509.NewCertPool(),
		KeyUsages:     []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	for _, c := range chain[1:] {
		opts.Intermediates.AddCert(c)
	}
	if _, err := chain[0].Verify(opts); err != nil {
		return &tls.CertificateVerificationError{UnverifiedCertificates: chain, Err: err}
	}
	return nil
}

// DialTLS connects to addr with dial and makes the TLS handshake with
// ClientConfigFor(cfg, addr's host), bounded by timeout when it is not
// zero. It is what an http.Transport's DialTLSContext calls: the
// transport's own TLS would verify the chain before keys are judged.
func DialTLS(ctx context.Context, dial func(ctx context.Context, network, addr string) (net.Conn, error),
	network, addr string, cfg *tls.Config, timeout time.Duration) (*tls.Conn, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	raw, err := dial(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	hctx := ctx
	if timeout > 0 {
		var cancel context.CancelFunc
		hctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	conn := tls.Client(raw, ClientConfigFor(cfg, host))
	if err := conn.HandshakeContext(hctx); err != nil {
		_ = raw.Close()
		return nil, err
	}
	return conn, nil
}
