// Package listener is the agent's one inbound listener: one port serving
// HTTPS over TCP and HTTP/3 over QUIC from the site identity, every caller
// named from its verified certificate, and the reference's defences
// applied alike to both transports:
//
//   - handshakes capped per source address and per global IPv6 /64 and
//     /48 before anything is known of the caller (token buckets);
//   - the caller named after the handshake and before it is counted: the
//     co-located gateway by this site's current leaf (matched by digest),
//     a peer site by its organization or SPIFFE ID; a reissued leaf of
//     this site is closed, and so is a caller without a site unless some
//     routes are open to it (the sidecars' delivery reports);
//   - connections capped per named site, answered 503 past the cap, with
//     the last slots kept for the co-located gateway;
//   - every cap starting over when the TLS material reloads;
//   - a connection closed when a response write stalls, or when it
//     outlives its maximum age.
package listener

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"

	"github.com/gridsync/gridsync/shared/tlsidentity"
	"github.com/gridsync/gridsync/shared/tlsserver"
)

const (
	transportTCP  = "tcp"
	transportQUIC = "quic"
)

// Defaults of Options.
const (
	DefaultWriteTimeout     = 10 * time.Second
	DefaultMaxAge           = 5 * time.Minute
	DefaultHandshakeTimeout = 10 * time.Second
	// overCapGrace lets a 503 reach the caller before its connection is
	// closed.
	overCapGrace = time.Second
	// DefaultAnonymousIdle closes an anonymous connection that carries
	// no request (a sidecar keeps its report stream open).
	DefaultAnonymousIdle = 10 * time.Second
	// anonymousStreams is how many requests one anonymous connection may
	// carry at once.
	anonymousStreams = 2
)

// Options configure a Listener.
type Options struct {
	// Identity is the site identity, poll-reloaded; its CA bundle
	// verifies client certificates.
	Identity *tlsidentity.Reloader
	Naming   Naming
	// Handshakes and Connections are the caps; zero values take the
	// defaults.
	Handshakes  *HandshakeLimits
	Connections *ConnectionCaps
	InFlight    *InFlightLimits
	// AnonymousPaths are the request paths a caller without a site may
	// use. Empty: such a caller is closed right after the handshake.
	AnonymousPaths []string
	// AnonymousIdle closes an anonymous connection that has carried no
	// request for this long.
	AnonymousIdle time.Duration
	// WriteTimeout bounds each response write; a stalled one closes the
	// connection.
	WriteTimeout time.Duration
	// MaxAge closes a connection that has lived this long.
	MaxAge           time.Duration
	HandshakeTimeout time.Duration
	Registerer       prometheus.Registerer
	Logger           *slog.Logger
	Now              func() time.Time
}

// Listener serves one handler on TCP and QUIC.
type Listener struct {
	opts    Options
	handler http.Handler
	tlsCfg  *tls.Config
	limiter *handshakeLimiter
	pending *inFlight
	adm     *admission
	metrics *metrics

	mu           sync.Mutex
	conns        map[any]*ticket // *tls.Conn or *quic.Conn
	identitySeen bool
}

// New prepares a Listener for handler; Serve starts it.
func New(handler http.Handler, opts Options) (*Listener, error) {
	if opts.Identity == nil {
		return nil, errors.New("signals listener: no identity")
	}
	if opts.Handshakes == nil {
		d := DefaultHandshakeLimits()
		opts.Handshakes = &d
	}
	if opts.Connections == nil {
		d := DefaultConnectionCaps()
		opts.Connections = &d
	}
	if opts.InFlight == nil {
		d := DefaultInFlightLimits()
		opts.InFlight = &d
	}
	if opts.Handshakes.MaxTracked <= 0 {
		opts.Handshakes.MaxTracked = DefaultHandshakeLimits().MaxTracked
	}
	if c := opts.Connections; c.Max <= c.ReservedForGateway || c.PerSite <= 0 {
		return nil, fmt.Errorf("signals listener: %d connections with %d reserved for the gateway and %d per site leave no room for peers",
			c.Max, c.ReservedForGateway, c.PerSite)
	}
	if opts.WriteTimeout <= 0 {
		opts.WriteTimeout = DefaultWriteTimeout
	}
	if opts.AnonymousIdle <= 0 {
		opts.AnonymousIdle = DefaultAnonymousIdle
	}
	if opts.MaxAge <= 0 {
		opts.MaxAge = DefaultMaxAge
	}
	if opts.HandshakeTimeout <= 0 {
		opts.HandshakeTimeout = DefaultHandshakeTimeout
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	l := &Listener{
		opts:    opts,
		handler: handler,
		limiter: newHandshakeLimiter(*opts.Handshakes, opts.Now),
		pending: newInFlight(*opts.InFlight),
		adm:     newAdmission(*opts.Connections),
		metrics: newMetrics(opts.Registerer),
		conns:   map[any]*ticket{},
	}
	cfg, err := tlsserver.Config(tlsserver.Options{Identity: opts.Identity, OptionalClientCert: true, OnIdentity: l.onIdentity})
	if err != nil {
		return nil, fmt.Errorf("signals listener: %w", err)
	}
	l.tlsCfg = cfg
	return l, nil
}

// closeEvicted closes the open connections of the sites the trust bundles
// now refuse: an eviction ends what its site holds open, not only what it
// opens next.
func (l *Listener) closeEvicted() {
	l.mu.Lock()
	var refused []*ticket
	for _, t := range l.conns {
		if t.caller.Kind == Site && l.opts.Naming.Evictions.RefusesAnywhere(t.caller.Site, t.caller.notBefore) {
			refused = append(refused, t)
		}
	}
	l.mu.Unlock()
	for _, t := range refused {
		l.closeConn(t, "evicted")
	}
	if len(refused) > 0 {
		l.opts.Logger.Info("signals_evicted_connections_closed", "connections", len(refused))
	}
}

// onIdentity starts every cap over when the TLS material reloads. It runs
// inside a handshake, before that handshake's caller is admitted.
func (l *Listener) onIdentity(*tlsidentity.Identity) {
	l.mu.Lock()
	first := !l.identitySeen
	l.identitySeen = true
	l.mu.Unlock()
	if first {
		return
	}
	l.limiter.reset()
	l.adm.reset()
	l.metrics.resets.Inc()
	l.opts.Logger.Info("signals_caps_reset", "reason", "tls_material_reloaded")
}

// Serve serves on both listeners until ctx is done; either may be nil.
func (l *Listener) Serve(ctx context.Context, tcp net.Listener, udp net.PacketConn) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if k := l.opts.Naming.Evictions; k != nil {
		defer k.Subscribe(func(string) { go l.closeEvicted() })()
	}
	errc := make(chan error, 2)
	n := 0
	if tcp != nil {
		n++
		go func() { errc <- l.serveTCP(ctx, tcp) }()
	}
	if udp != nil {
		n++
		go func() { errc <- l.serveQUIC(ctx, udp) }()
	}
	var first error
	for range n {
		if err := <-errc; err != nil && first == nil {
			first = err
			cancel()
		}
	}
	return first
}

func (l *Listener) serveTCP(ctx context.Context, ln net.Listener) error {
	handed := make(chan net.Conn)
	srv := &http.Server{
		Handler:           l.wrap(),
		TLSConfig:         l.tlsCfg.Clone(), // http.Server edits its own
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       90 * time.Second,
		ErrorLog:          slog.NewLogLogger(l.opts.Logger.Handler(), slog.LevelDebug),
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			if t := l.lookup(c); t != nil {
				return context.WithValue(ctx, callerKey{}, t)
			}
			return ctx
		},
		ConnState: func(c net.Conn, s http.ConnState) {
			if s == http.StateClosed || s == http.StateHijacked {
				l.forget(c, transportTCP)
			}
		},
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(&handoff{addr: ln.Addr(), conns: handed, done: ctx.Done()}) }()
	go func() {
		<-ctx.Done()
		_ = ln.Close()
	}()
	var backoff time.Duration
	for {
		raw, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			if errors.Is(err, net.ErrClosed) {
				return fmt.Errorf("signals listener (tcp): %w", err)
			}
			// Out of descriptors, or a connection aborted before it was
			// accepted: wait and go on serving, as net/http does. The
			// connections already open keep working meanwhile.
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			l.metrics.acceptErrors.Inc()
			if backoff == 5*time.Millisecond {
				l.opts.Logger.Warn("signals_accept_failed", "error", err.Error(), "retry_in", backoff.String())
			}
			select {
			case <-time.After(backoff):
			case <-ctx.Done():
			}
			continue
		}
		backoff = 0
		if refused := l.limiter.allow(raw.RemoteAddr()); refused != "" {
			l.metrics.handshakes.WithLabelValues(transportTCP, refused).Inc()
			_ = raw.Close()
			continue
		}
		release, refused := l.pending.acquire(raw.RemoteAddr())
		if refused != "" {
			l.metrics.handshakes.WithLabelValues(transportTCP, refused).Inc()
			_ = raw.Close()
			continue
		}
		go l.handshakeTCP(ctx, raw, handed, release)
	}
	sctx, cancelShutdown := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancelShutdown()
	if err := srv.Shutdown(sctx); err != nil {
		_ = srv.Close()
	}
	if err := <-served; err != nil && !errors.Is(err, http.ErrServerClosed) && !errors.Is(err, net.ErrClosed) {
		return fmt.Errorf("signals listener (tcp): %w", err)
	}
	return nil
}

func (l *Listener) handshakeTCP(ctx context.Context, raw net.Conn, handed chan<- net.Conn, release func()) {
	tc := tls.Server(&stallGuard{Conn: raw, timeout: l.opts.WriteTimeout}, l.tlsCfg)
	hctx, cancel := context.WithTimeout(ctx, l.opts.HandshakeTimeout)
	err := tc.HandshakeContext(hctx)
	cancel()
	release()
	if err != nil {
		l.metrics.handshakes.WithLabelValues(transportTCP, "failed").Inc()
		_ = tc.Close()
		return
	}
	l.metrics.handshakes.WithLabelValues(transportTCP, "completed").Inc()
	t := l.admitConn(transportTCP, tc, raw.RemoteAddr(), tc.ConnectionState(), func() { _ = tc.Close() })
	if t == nil {
		_ = tc.Close()
		return
	}
	select {
	case handed <- tc:
	case <-ctx.Done():
		_ = tc.Close()
		l.forget(tc, transportTCP)
	}
}

func (l *Listener) serveQUIC(ctx context.Context, pc net.PacketConn) error {
	base := &quic.Config{
		Allow0RTT:            false,
		HandshakeIdleTimeout: l.opts.HandshakeTimeout,
		MaxIdleTimeout:       90 * time.Second,
	}
	cfg := *base
	cfg.GetConfigForClient = func(info *quic.ClientInfo) (*quic.Config, error) {
		// Before any cryptographic work and before the connection exists.
		if refused := l.limiter.allow(info.RemoteAddr); refused != "" {
			l.metrics.handshakes.WithLabelValues(transportQUIC, refused).Inc()
			return nil, errors.New(refused)
		}
		return base, nil
	}
	tr := &quic.Transport{Conn: pc}
	ln, err := tr.Listen(http3.ConfigureTLSConfig(l.tlsCfg.Clone()), &cfg)
	if err != nil {
		return fmt.Errorf("signals listener (quic): %w", err)
	}
	srv := &http3.Server{
		Handler: l.wrap(),
		ConnContext: func(ctx context.Context, c *quic.Conn) context.Context {
			if t := l.lookup(c); t != nil {
				return context.WithValue(ctx, callerKey{}, t)
			}
			return ctx
		},
	}
	var wg sync.WaitGroup
	for {
		c, err := ln.Accept(ctx)
		if err != nil {
			if ctx.Err() == nil {
				_ = ln.Close()
				return fmt.Errorf("signals listener (quic): %w", err)
			}
			break
		}
		l.metrics.handshakes.WithLabelValues(transportQUIC, "completed").Inc()
		// Straight back to Accept: quic-go refuses a handshake that
		// completes while 32 connections wait to be accepted, which a
		// fleet of sidecars starting at once would otherwise meet.
		wg.Add(1)
		go func() {
			defer wg.Done()
			closeConn := func() {
				_ = c.CloseWithError(quic.ApplicationErrorCode(http3.ErrCodeNoError), "closed by the signals listener")
			}
			if l.admitConn(transportQUIC, c, c.RemoteAddr(), c.ConnectionState().TLS, closeConn) == nil {
				closeConn()
				return
			}
			_ = srv.ServeQUICConn(c)
			l.forget(c, transportQUIC)
		}()
	}
	_ = ln.Close()
	_ = srv.Close()
	l.closeAll(transportQUIC)
	wg.Wait()
	return tr.Close()
}

// admitConn names the caller of a completed handshake and admits it, or
// returns nil when the connection must be closed now.
func (l *Listener) admitConn(transport string, key any, remote net.Addr, cs tls.ConnectionState, closeFn func()) *ticket {
	caller, refused := l.opts.Naming.name(cs, l.opts.Identity.Current().Fingerprint)
	if refused != "" {
		l.metrics.connections.WithLabelValues(transport, Site.String(), refused).Inc()
		return nil
	}
	addr, _ := addrOf(remote)
	t, outcome := l.adm.admit(caller, len(l.opts.AnonymousPaths) > 0, addr)
	l.metrics.connections.WithLabelValues(transport, caller.Kind.String(), outcome).Inc()
	if t == nil {
		return nil
	}
	t.transport = transport
	t.closeFn = closeFn
	if t.counted {
		l.metrics.open.WithLabelValues(transport, caller.Kind.String()).Inc()
	}
	t.ageTimer = time.AfterFunc(l.opts.MaxAge, func() { l.closeConn(t, "max_age") })
	if caller.Kind == Anonymous {
		// An anonymous connection lives while it carries a request: one
		// that sits idle gives its slot back soon.
		t.idleTimer = time.AfterFunc(l.opts.AnonymousIdle, func() { l.closeConn(t, "anonymous_idle") })
	}
	l.mu.Lock()
	l.conns[key] = t
	l.mu.Unlock()
	return t
}

func (l *Listener) lookup(key any) *ticket {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.conns[key]
}

// forget releases a connection that has ended.
func (l *Listener) forget(key any, transport string) {
	l.mu.Lock()
	t := l.conns[key]
	delete(l.conns, key)
	l.mu.Unlock()
	if t == nil {
		return
	}
	t.ageTimer.Stop()
	if t.idleTimer != nil {
		t.idleTimer.Stop()
	}
	if t.counted {
		l.metrics.open.WithLabelValues(transport, t.caller.Kind.String()).Dec()
	}
	l.adm.release(t)
}

// closeConn closes a connection for a reason, once.
func (l *Listener) closeConn(t *ticket, reason string) {
	t.closeOnce.Do(func() {
		l.metrics.closes.WithLabelValues(t.transport, reason).Inc()
		t.closeFn()
	})
}

func (l *Listener) closeAll(transport string) {
	l.mu.Lock()
	var all []*ticket
	for _, t := range l.conns {
		if t.transport == transport {
			all = append(all, t)
		}
	}
	l.mu.Unlock()
	for _, t := range all {
		t.closeOnce.Do(t.closeFn)
	}
}

// wrap applies what was decided at admission to each request.
func (l *Listener) wrap() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t, ok := r.Context().Value(callerKey{}).(*ticket)
		if !ok {
			http.Error(w, "unknown connection", http.StatusInternalServerError)
			return
		}
		if t.over != "" {
			w.Header().Set("Retry-After", "1")
			if r.ProtoMajor == 1 {
				w.Header().Set("Connection", "close")
			}
			http.Error(w, "too many connections from this caller", http.StatusServiceUnavailable)
			time.AfterFunc(overCapGrace, func() { l.closeConn(t, "over_cap") })
			return
		}
		anonymous := t.caller.Kind == Anonymous
		if anonymous && !slices.Contains(l.opts.AnonymousPaths, r.URL.Path) {
			// Named-only route: no answer, the connection goes.
			l.closeConn(t, "anonymous_route")
			return
		}
		if anonymous {
			if !t.begin() {
				// One stream and a request beside it are all a sidecar
				// needs; more on one connection is a flood.
				w.Header().Set("Retry-After", "1")
				http.Error(w, "too many requests on one connection", http.StatusTooManyRequests)
				return
			}
			defer t.end(l.opts.AnonymousIdle)
		}
		sw := &stallWatch{ResponseWriter: w, rc: http.NewResponseController(w), timeout: l.opts.WriteTimeout, now: l.opts.Now}
		l.handler.ServeHTTP(sw, r)
		switch {
		case sw.stalled:
			l.closeConn(t, "write_stalled")
		case anonymous && sw.status >= 400:
			// A refused anonymous caller does not keep its slot (after a
			// moment, so that the answer reaches it).
			time.AfterFunc(overCapGrace, func() { l.closeConn(t, "anonymous_refused") })
		}
	})
}

// handoff hands connections the accept loop admitted to http.Server.
type handoff struct {
	addr  net.Addr
	conns <-chan net.Conn
	done  <-chan struct{}
}

func (h *handoff) Accept() (net.Conn, error) {
	select {
	case c := <-h.conns:
		return c, nil
	case <-h.done:
		return nil, net.ErrClosed
	}
}

func (h *handoff) Close() error   { return nil }
func (h *handoff) Addr() net.Addr { return h.addr }

// stallGuard bounds every write to the socket under TLS, so a caller that
// stops reading fails the write (HTTP/1.1 and HTTP/2 alike) and loses
// its connection.
type stallGuard struct {
	net.Conn
	timeout time.Duration
}

func (s *stallGuard) Write(p []byte) (int, error) {
	_ = s.SetWriteDeadline(time.Now().Add(s.timeout))
	return s.Conn.Write(p)
}

// stallWatch bounds every write of a response from the moment it is
// made (a request may read a long body first, as a report stream does)
// and notes a write that hit its deadline.
type stallWatch struct {
	http.ResponseWriter
	rc      *http.ResponseController
	timeout time.Duration
	now     func() time.Time
	stalled bool
	status  int // the first status written
}

func (s *stallWatch) WriteHeader(status int) {
	if s.status == 0 {
		s.status = status
	}
	_ = s.rc.SetWriteDeadline(s.now().Add(s.timeout))
	s.ResponseWriter.WriteHeader(status)
}

func (s *stallWatch) Write(p []byte) (int, error) {
	_ = s.rc.SetWriteDeadline(s.now().Add(s.timeout))
	n, err := s.ResponseWriter.Write(p)
	if err != nil && isTimeout(err) {
		s.stalled = true
	}
	return n, err
}

func (s *stallWatch) Unwrap() http.ResponseWriter { return s.ResponseWriter }

func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout()
}
