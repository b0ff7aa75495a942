package controlplane

import (
	"context"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"

	"k8s.io/client-go/rest"
)

// Proxy is a TCP forwarder in front of kube-apiserver that a test can cut
// and restore, so that one client loses the API while others (the admin
// client changing things) keep it. Cutting closes every open connection
// and refuses new ones until Restore. Freezing keeps every connection open
// and forwards nothing until Thaw: a path that went silent, which only
// timeouts notice.
type Proxy struct {
	ln     net.Listener
	target string

	mu      sync.Mutex
	thawed  *sync.Cond // signalled on Thaw and Close
	frozen  bool
	cut     bool
	conns   map[net.Conn]struct{}
	closed  bool
	serving sync.WaitGroup
}

// NewProxy starts a proxy to kube-apiserver on a free loopback port.
func (cp *ControlPlane) NewProxy() (*Proxy, error) {
	return NewProxyTo(cp.APIAddr())
}

// APIAddr is kube-apiserver's loopback address, host:port.
func (cp *ControlPlane) APIAddr() string { return "127.0.0.1:" + strconv.Itoa(cp.apiPort) }

// NewProxyTo starts a proxy to target (a holding proxy, to chain the two)
// on a free loopback port.
func NewProxyTo(target string) (*Proxy, error) {
	ln, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("proxy listen: %w", err)
	}
	return NewProxyOn(ln, target), nil
}

// NewProxyOn starts a proxy to target on a listener of the caller's, one
// opened in a node's network namespace, say.
func NewProxyOn(ln net.Listener, target string) *Proxy {
	p := &Proxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	p.thawed = sync.NewCond(&p.mu)
	p.serving.Add(1)
	go p.accept()
	return p
}

// Config returns base pointed at the proxy. The serving certificate names
// 127.0.0.1, so TLS verification still holds.
func (p *Proxy) Config(base *rest.Config) *rest.Config { return throughProxy(base, p.ln) }

// throughProxy is base pointed at a proxy listening on ln.
func throughProxy(base *rest.Config, ln net.Listener) *rest.Config {
	cfg := rest.CopyConfig(base)
	cfg.Host = "https://" + ln.Addr().String()
	return cfg
}

// Cut drops every connection and refuses new ones.
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = true
	for c := range p.conns {
		_ = c.Close()
	}
}

// Restore lets connections through again.
func (p *Proxy) Restore() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = false
}

// Freeze stops forwarding bytes in both directions; connections stay
// open and what arrives meanwhile is delivered on Thaw.
func (p *Proxy) Freeze() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.frozen = true
}

// Thaw forwards again, starting with what was held.
func (p *Proxy) Thaw() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.frozen = false
	p.thawed.Broadcast()
}

// waitThawed blocks while the proxy is frozen.
func (p *Proxy) waitThawed() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for p.frozen && !p.closed {
		p.thawed.Wait()
	}
}

// Close stops the proxy and its connections.
func (p *Proxy) Close() error {
	p.mu.Lock()
	p.closed = true
	p.thawed.Broadcast()
	p.mu.Unlock()
	p.Cut()
	err := p.ln.Close()
	p.serving.Wait()
	return err
}

func (p *Proxy) accept() {
	defer p.serving.Done()
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		refuse := p.cut || p.closed
		p.mu.Unlock()
		if refuse {
			_ = client.Close()
			continue
		}
		p.serving.Add(1)
		go p.forward(client)
	}
}

func (p *Proxy) forward(client net.Conn) {
	defer p.serving.Done()
	server, err := (&net.Dialer{}).DialContext(context.Background(), "tcp", p.target)
	if err != nil {
		_ = client.Close()
		return
	}
	if !p.track(client, server) {
		_ = client.Close()
		_ = server.Close()
		return
	}
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, thawReader{p, src})
		_ = dst.Close()
		_ = src.Close()
		done <- struct{}{}
	}
	go pipe(server, client)
	go pipe(client, server)
	<-done
	<-done
	p.mu.Lock()
	delete(p.conns, client)
	delete(p.conns, server)
	p.mu.Unlock()
}

func (p *Proxy) track(conns ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cut || p.closed {
		return false
	}
	for _, c := range conns {
		p.conns[c] = struct{}{}
	}
	return true
}

// thawReader hands on what it reads only while the proxy is not frozen.
type thawReader struct {
	p   *Proxy
	src io.Reader
}

func (r thawReader) Read(b []byte) (int, error) {
	n, err := r.src.Read(b)
	r.p.waitThawed()
	return n, err
}
