package controlplane

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/client-go/rest"
)

// HoldingProxy is an HTTPS reverse proxy (HTTP/2, like the API server)
// in front of kube-apiserver that misbehaves the way a proxy or an
// overloaded server does while the connection itself stays healthy: it
// holds watch requests without answering, or delays every response. The
// TCP Proxy cannot do this: it acts on connections, not requests.
type HoldingProxy struct {
	srv *http.Server
	ln  net.Listener

	mu      sync.Mutex
	holding bool
	release chan struct{}
	delay   time.Duration

	// Held counts the watch requests that were held.
	Held atomic.Int64
}

// NewHoldingProxy starts a holding proxy on a free loopback port with the
// API server's own serving certificate, so clients verify it unchanged.
func (cp *ControlPlane) NewHoldingProxy() (*HoldingProxy, error) {
	cert, err := tls.LoadX509KeyPair(cp.pki.servingCert, cp.pki.servingKey)
	if err != nil {
		return nil, err
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(cp.pki.caPEM)
	target, err := url.Parse("https://127.0.0.1:" + strconv.Itoa(cp.apiPort))
	if err != nil {
		return nil, err
	}
	rp := httputil.NewSingleHostReverseProxy(target)
	rp.FlushInterval = -1 // watches stream
	// An API server restarting is the tests' doing, not news.
	rp.ErrorLog = log.New(io.Discard, "", 0)
	rp.Transport = &http.Transport{
		TLSClientConfig:   &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12},
		ForceAttemptHTTP2: true,
	}
	ln, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("holding proxy listen: %w", err)
	}
	p := &HoldingProxy{ln: ln, release: make(chan struct{})}
	p.srv = &http.Server{
		Handler:           p.handler(rp),
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          log.New(io.Discard, "", 0), // connections cut by the tests' TCP proxy
		TLSConfig:         &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"h2", "http/1.1"}, MinVersion: tls.VersionTLS12},
	}
	go func() { _ = p.srv.ServeTLS(ln, "", "") }()
	return p, nil
}

func (p *HoldingProxy) handler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.mu.Lock()
		hold := p.holding && r.URL.Query().Get("watch") == "true"
		release, delay := p.release, p.delay
		p.mu.Unlock()
		if hold {
			p.Held.Add(1)
			select {
			case <-release:
			case <-r.Context().Done():
				return
			}
		}
		if delay > 0 {
			select {
			case <-time.After(delay):
			case <-r.Context().Done():
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

// Config returns base pointed at the proxy.
func (p *HoldingProxy) Config(base *rest.Config) *rest.Config { return throughProxy(base, p.ln) }

// Addr is the proxy's address, for a TCP Proxy in front of it.
func (p *HoldingProxy) Addr() string { return p.ln.Addr().String() }

// HoldWatches holds every watch request, new and waiting, without an
// answer until Release. Other requests pass.
func (p *HoldingProxy) HoldWatches() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.holding = true
}

// DelayAll delays every request that starts from now on by d before it is
// forwarded; 0 stops delaying.
func (p *HoldingProxy) DelayAll(d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.delay = d
}

// Release forwards the held watch requests and stops holding.
func (p *HoldingProxy) Release() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.holding {
		close(p.release)
		p.release = make(chan struct{})
		p.holding = false
	}
}

// Close stops the proxy and its connections.
func (p *HoldingProxy) Close() error {
	p.Release()
	err := p.srv.Close()
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}
