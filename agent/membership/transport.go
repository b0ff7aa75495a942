package membership

import (
	"errors"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/prometheus/client_golang/prometheus"
)

// countingTransport is memberlist's network transport with every byte
// counted, by UDP and TCP (what the idle-traffic figure and the
// grid_swim_bytes_* metrics read), and every inbound stream passed through
// the stream gate before memberlist reads it.
type countingTransport struct {
	*memberlist.NetTransport
	gate    *streamGate
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
}

func newCountingTransport(inner *memberlist.NetTransport, m *metrics, gate *streamGate) *countingTransport {
	t := &countingTransport{
		NetTransport: inner,
		gate:         gate,
		packets:      make(chan *memberlist.Packet),
		streams:      make(chan net.Conn),
		udpOut:       m.bytesSent.WithLabelValues("udp"),
		udpIn:        m.bytesReceived.WithLabelValues("udp"),
		tcpOut:       m.bytesSent.WithLabelValues("tcp"),
		tcpIn:        m.bytesReceived.WithLabelValues("tcp"),
		stop:         make(chan struct{}),
		drained:      make(chan struct{}),
	}
	go t.forwardPackets()
	go t.forwardStreams()
	return t
}

func (t *countingTransport) forwardPackets() {
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

func (t *countingTransport) forwardStreams() {
	in := t.NetTransport.StreamCh()
	for {
		select {
		case c := <-in:
			src, release, ok := t.gate.admit(c)
			if !ok {
				t.gate.reject(rejectStreamsBusy)
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
func (t *countingTransport) pass(c net.Conn, src netip.Addr, release func()) {
	checked, err := t.gate.inspect(c, src)
	if err != nil {
		var refused errRefused
		reason := rejectMalformed
		if errors.As(err, &refused) {
			reason = refused.reason
		}
		t.gate.reject(reason)
		_ = c.Close()
		release()
		return
	}
	select {
	case t.streams <- &releasingConn{Conn: checked, release: release}:
	case <-t.stop:
		_ = c.Close()
		release()
	}
}

// releasingConn gives its stream's place back to the gate when closed.
type releasingConn struct {
	net.Conn
	release func()
}

func (c *releasingConn) Close() error {
	err := c.Conn.Close()
	c.release()
	return err
}

func (t *countingTransport) WriteTo(b []byte, addr string) (time.Time, error) {
	at, err := t.NetTransport.WriteTo(b, addr)
	if err == nil {
		t.udpOut.Add(float64(len(b)))
	}
	return at, err
}

func (t *countingTransport) PacketCh() <-chan *memberlist.Packet { return t.packets }
func (t *countingTransport) StreamCh() <-chan net.Conn           { return t.streams }

func (t *countingTransport) DialTimeout(addr string, timeout time.Duration) (net.Conn, error) {
	c, err := t.NetTransport.DialTimeout(addr, timeout)
	if err != nil {
		return nil, err
	}
	return &countingConn{Conn: c, out: t.tcpOut, in: t.tcpIn}, nil
}

func (t *countingTransport) Shutdown() error {
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
