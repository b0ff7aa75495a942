// Package testgateway stands in for a site's gateway in tests, benchmarks
// and the demo: a TLS server on loopback that requires a client
// certificate from the CAs it is given and presents whatever certificate
// it was given last (a reissued leaf, another CA's), so that a probe sees
// each change on its next handshake. It answers nothing: a connection is
// held until the client closes it.
package testgateway

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"sync"
	"time"
)

// handshakeHold is how long a connection is held: its handshake, then
// until the client hangs up.
const handshakeHold = 30 * time.Second

// Gateway is one stand-in gateway.
type Gateway struct {
	// Addr is where it listens.
	Addr string

	mu         sync.Mutex
	cert       *tls.Certificate
	clientCAs  *x509.CertPool
	maxVersion uint16
	listener   net.Listener
}

// Start listens on addr ("127.0.0.1:0" for any port). Until Present is
// called every handshake fails.
func Start(addr string) (*Gateway, error) {
	l, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", addr)
	if err != nil {
		return nil, err
	}
	return Serve(l), nil
}

// Serve is Start on a listener the caller made (one in a network
// namespace of its own, say); Close closes it.
func Serve(l net.Listener) *Gateway {
	g := &Gateway{Addr: l.Addr().String()}
	g.listener = tls.NewListener(l, &tls.Config{GetConfigForClient: g.config})
	go g.serve()
	return g
}

func (g *Gateway) config(*tls.ClientHelloInfo) (*tls.Config, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.cert == nil {
		return nil, errors.New("no certificate yet")
	}
	return &tls.Config{Certificates: []tls.Certificate{*g.cert}, ClientCAs: g.clientCAs, ClientAuth: tls.RequireAndVerifyClientCert,
		MaxVersion: g.maxVersion}, nil
}

func (g *Gateway) serve() {
	for {
		c, err := g.listener.Accept()
		if err != nil {
			return
		}
		go func() {
			defer func() { _ = c.Close() }()
			// Longer than any client's probe timeout: over a lossy link a
			// handshake can take several retransmission timeouts, and a
			// stand-in that hung up first would be counted as the gateway
			// refusing the client (which a real gateway does not do while
			// its handshake is in progress).
			_ = c.SetDeadline(time.Now().Add(handshakeHold))
			var b [1]byte
			_, _ = c.Read(b[:]) // the handshake, then until the client hangs up
		}()
	}
}

// Present makes the gateway present cert from the next handshake on and
// accept client certificates that chain to clientCAs.
func (g *Gateway) Present(cert tls.Certificate, clientCAs *x509.CertPool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.cert, g.clientCAs = &cert, clientCAs
}

// LimitVersion caps the TLS version it speaks (tls.VersionTLS12: a
// gateway that judges the client certificate inside the handshake); 0 is
// the library's default.
func (g *Gateway) LimitVersion(v uint16) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.maxVersion = v
}

// PresentSecret presents a kubernetes.io/tls Secret's data: tls.crt (leaf
// then chain) and tls.key, clients verified against its ca.crt. It returns
// the leaf.
func (g *Gateway) PresentSecret(data map[string][]byte) (*x509.Certificate, error) {
	pair, err := tls.X509KeyPair(data["tls.crt"], data["tls.key"])
	if err != nil {
		return nil, err
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(data["ca.crt"]) {
		return nil, errors.New("ca.crt holds no certificate")
	}
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		return nil, err
	}
	g.Present(pair, roots)
	return leaf, nil
}

// Close stops listening; open connections end with their clients.
func (g *Gateway) Close() { _ = g.listener.Close() }
