package streamgate

import (
	"bytes"
	"context"
	"errors"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/gridsync/gridsync/shared/redial"
)

// Transport is memberlist's network transport with every byte
// counted, by UDP and TCP (what the idle-traffic figure and the
// grid_swim_bytes_* metrics read), and every inbound stream passed through
// the stream gate before memberlist reads it.
type Transport struct {
	*memberlist.NetTransport
	gate    *Gate
	packets chan *memberlist.Packet
	streams chan net.Conn
	udpOut  prometheus.Counter
	udpIn   prometheus.Counter
	tcpOut  prometheus.Counter
	tcpIn   prometheus.Counter
	// stop turns the forwarders into drains, so that the inner transport's
	// listeners never block on a send while it shuts down; drained ends
	// them.
	stop, drained chan struct{}
	once          sync.Once

	echoMu sync.Mutex
	echoed map[string]time.Time // dialled address -> when a stream to it was echoed

	// CheckPeer refuses destinations (nil: none refused).
	CheckPeer func(netip.Addr) error
	// Dial, when set, dials the streams in the inner transport's place
	// (a site whose sockets live in another network namespace).
	Dial func(addr string, timeout time.Duration) (net.Conn, error)
}

// errPeerDenied is a send or dial to a member address the destination
// rule refuses.
var errPeerDenied = errors.New("member address not allowed by the destination rule (--probe-allow-destinations)")

// allowed applies the destination rule to a host:port.
func (t *Transport) allowed(addr string) error {
	if t.CheckPeer == nil {
		return nil
	}
	// A name (a seed memberlist resolves itself) is not checked here;
	// members' addresses are IPs.
	if ap, err := netip.ParseAddrPort(addr); err == nil && t.CheckPeer(ap.Addr().Unmap()) != nil {
		return errPeerDenied
	}
	return nil
}

// ByteCounters count what the transport moves, by direction and protocol
// (the runtime's grid_swim_bytes_sent_total and
// grid_swim_bytes_received_total).
type ByteCounters struct {
	UDPSent, UDPReceived, TCPSent, TCPReceived prometheus.Counter
}

// NewTransport wraps inner: what it moves is counted in counts, and every
// inbound stream passes gate before memberlist reads it.
func NewTransport(inner *memberlist.NetTransport, counts ByteCounters, gate *Gate) *Transport {
	t := &Transport{
		NetTransport: inner,
		gate:         gate,
		packets:      make(chan *memberlist.Packet),
		streams:      make(chan net.Conn),
		udpOut:       counts.UDPSent,
		udpIn:        counts.UDPReceived,
		tcpOut:       counts.TCPSent,
		tcpIn:        counts.TCPReceived,
		stop:         make(chan struct{}),
		drained:      make(chan struct{}),
	}
	go t.forwardPackets()
	go t.forwardStreams()
	return t
}

func (t *Transport) forwardPackets() {
	in := t.NetTransport.PacketCh()
	for {
		select {
		case p := <-in:
			t.udpIn.Add(float64(len(p.Buf)))
			select {
			case t.packets <- p:
			case <-t.stop: // dropped: shutting down
			}
		case <-t.drained:
			return
		}
	}
}

func (t *Transport) forwardStreams() {
	in := t.NetTransport.StreamCh()
	for {
		select {
		case c := <-in:
			src, release, ok := t.gate.admit(c)
			if !ok {
				t.gate.reject(RejectStreamsBusy)
				_ = c.Close()
				continue
			}
			// One goroutine per admitted stream, as memberlist runs one:
			// the gate's caps bound them.
			go t.pass(&countingConn{Conn: c, out: t.tcpOut, in: t.tcpIn}, src, release)
		case <-t.drained:
			return
		}
	}
}

// pass reads a stream's first frame through the gate and hands what it
// admits to memberlist; anything refused is closed unanswered.
func (t *Transport) pass(c net.Conn, src netip.Addr, release func()) {
	checked, free, err := t.gate.inspect(c, src)
	if err != nil {
		var refused errRefused
		reason := RejectMalformed
		if errors.As(err, &refused) {
			reason = refused.reason
		}
		t.gate.reject(reason)
		_ = c.Close()
		release()
		return
	}
	select {
	case t.streams <- &releasingConn{Conn: checked, release: func() { free(); release() }}:
	case <-t.stop:
		_ = c.Close()
		free()
		release()
	}
}

// releasingConn gives its stream's place and bytes back to the gate when
// closed (once: memberlist may close it twice).
type releasingConn struct {
	net.Conn
	release func()
	once    sync.Once
}

func (c *releasingConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}

func (t *Transport) WriteTo(b []byte, addr string) (time.Time, error) {
	at, err := t.NetTransport.WriteTo(b, addr)
	if err == nil {
		t.udpOut.Add(float64(len(b)))
	}
	return at, err
}

func (t *Transport) PacketCh() <-chan *memberlist.Packet { return t.packets }
func (t *Transport) StreamCh() <-chan net.Conn           { return t.streams }

func (t *Transport) DialTimeout(addr string, timeout time.Duration) (net.Conn, error) {
	dial := t.NetTransport.DialTimeout
	if t.Dial != nil {
		dial = t.Dial
	}
	// A lost SYN is sent again sooner than the kernel would (see redial):
	// a direct copy over a lossy link is not held for seconds.
	c, err := redial.Dial(context.Background(), timeout, func(_ context.Context, d time.Duration) (net.Conn, error) { return dial(addr, d) })
	if err != nil {
		return nil, err
	}
	return &echoConn{Conn: &countingConn{Conn: c, out: t.tcpOut, in: t.tcpIn}, reflected: func() { t.markReflected(addr) }}, nil
}

// DialAddressTimeout and WriteToAddress are what memberlist calls (the
// transport is node-aware): without them the inner transport's would be
// promoted and bypass the counting and the echo check.
func (t *Transport) DialAddressTimeout(a memberlist.Address, timeout time.Duration) (net.Conn, error) {
	if err := t.allowed(a.Addr); err != nil {
		return nil, err
	}
	return t.DialTimeout(a.Addr, timeout)
}

func (t *Transport) WriteToAddress(b []byte, a memberlist.Address) (time.Time, error) {
	if err := t.allowed(a.Addr); err != nil {
		return time.Time{}, err
	}
	return t.WriteTo(b, a.Addr)
}

// markReflected notes that a stream to addr read back the very bytes it
// sent first: no member answered, something echoed.
func (t *Transport) markReflected(addr string) {
	t.echoMu.Lock()
	defer t.echoMu.Unlock()
	if t.echoed == nil || len(t.echoed) > 1024 {
		t.echoed = map[string]time.Time{}
	}
	t.echoed[addr] = time.Now()
}

// ReflectedSince says whether a stream to addr was echoed since start.
func (t *Transport) ReflectedSince(addr string, start time.Time) bool {
	if t == nil {
		return false
	}
	t.echoMu.Lock()
	defer t.echoMu.Unlock()
	at, ok := t.echoed[addr]
	return ok && !at.Before(start)
}

// echoConn compares the first bytes read with the first bytes written.
// A member's answer never starts with them: an encrypted answer has a
// fresh random nonce, and a clear one a message of its own.
type echoConn struct {
	net.Conn
	reflected   func()
	mu          sync.Mutex
	wrote, read []byte
	checked     bool
}

const echoPrefix = 32

func (c *echoConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	if len(c.wrote) < echoPrefix {
		c.wrote = append(c.wrote, p[:min(len(p), echoPrefix-len(c.wrote))]...)
	}
	c.mu.Unlock()
	return c.Conn.Write(p)
}

func (c *echoConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.checked && n > 0 {
		c.read = append(c.read, p[:min(n, echoPrefix-len(c.read))]...)
		if len(c.read) >= min(echoPrefix, len(c.wrote)) {
			c.checked = true
			if k := min(len(c.read), len(c.wrote)); k > 0 && bytes.Equal(c.read[:k], c.wrote[:k]) {
				c.reflected()
			}
		}
	}
	return n, err
}

func (t *Transport) Shutdown() error {
	var err error
	t.once.Do(func() {
		close(t.stop)
		err = t.NetTransport.Shutdown()
		close(t.drained)
	})
	return err
}

type countingConn struct {
	net.Conn
	out, in prometheus.Counter
}

func (c *countingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.in.Add(float64(n))
	return n, err
}

func (c *countingConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.out.Add(float64(n))
	return n, err
}
