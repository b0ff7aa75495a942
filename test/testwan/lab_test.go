package testwan_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gridsync/gridsync/test/testnetns"
	"github.com/gridsync/gridsync/test/testwan"
)

func TestMain(m *testing.M) { testwan.Main(m) }

// pingResult is what a UDP ping-pong across the lab measured.
type pingResult struct {
	sent, answered, reordered int
	rtts                      []time.Duration
}

func (r pingResult) loss() float64 { return 1 - float64(r.answered)/float64(r.sent) }

func (r pingResult) percentile(p int) time.Duration {
	s := slices.Clone(r.rtts)
	slices.Sort(s)
	return s[(len(s)-1)*p/100]
}

// pingPong sends n numbered datagrams from site a to an echo on site b,
// every interval, and measures each one's round trip and the replies that
// came back out of order.
func pingPong(t *testing.T, lab *testwan.Lab, a, b, n int, interval time.Duration) pingResult {
	t.Helper()
	echoAddr := netip.AddrPortFrom(lab.Addr(b), 7007)
	echo, err := lab.ListenPacket(b, echoAddr.String())
	require.NoError(t, err)
	defer echo.Close()
	go func() {
		buf := make([]byte, 64)
		for {
			k, from, err := echo.ReadFrom(buf)
			if err != nil {
				return
			}
			_, _ = echo.WriteTo(buf[:k], from)
		}
	}()
	conn, err := lab.ListenPacket(a, netip.AddrPortFrom(lab.Addr(a), 0).String())
	require.NoError(t, err)
	defer conn.Close()

	sentAt := make([]time.Time, n)
	var res pingResult
	var mu sync.Mutex
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 64)
		last := -1
		for {
			_ = conn.SetReadDeadline(time.Now().Add(time.Second))
			k, _, err := conn.ReadFrom(buf)
			if err != nil {
				return // a second with nothing: every answer is in
			}
			if k < 4 {
				continue
			}
			seq := int(binary.BigEndian.Uint32(buf))
			mu.Lock()
			res.answered++
			res.rtts = append(res.rtts, time.Since(sentAt[seq]))
			if seq < last {
				res.reordered++
			}
			last = max(last, seq)
			mu.Unlock()
		}
	}()
	dst := net.UDPAddrFromAddrPort(echoAddr)
	for i := range n {
		msg := make([]byte, 32)
		binary.BigEndian.PutUint32(msg, uint32(i))
		mu.Lock()
		sentAt[i] = time.Now()
		mu.Unlock()
		_, err := conn.WriteTo(msg, dst)
		require.NoError(t, err)
		res.sent++
		time.Sleep(interval)
	}
	<-done
	return res
}

// The emulated link measures what it claims: the round trip is twice the
// delay, spread by the jitter, which reorders; the loss of a round trip
// is that of its two ways.
func TestTheEmulatedLinkMeasuresWhatItClaims(t *testing.T) {
	lab := testwan.New(t, testwan.Options{Sites: 2, Seed: 54,
		Link: testwan.Link{Delay: 50 * time.Millisecond, Jitter: 5 * time.Millisecond, Loss: 0.05}})
	res := pingPong(t, lab, 0, 1, 800, 2*time.Millisecond)
	p50, p99 := res.percentile(50), res.percentile(99)
	fmt.Printf("wan-link delay_ms=50 jitter_ms=5 loss_pct=5 pings=%d rtt_p50_ms=%.1f rtt_p99_ms=%.1f round_trip_loss_pct=%.1f reordered=%d\n",
		res.sent, ms(p50), ms(p99), 100*res.loss(), res.reordered)
	// Two uniform jitters: the round trip's median is the delay's twice;
	// the machine adds its scheduling to every packet.
	require.GreaterOrEqual(t, ms(p50), 98.0, "median round trip")
	require.LessOrEqual(t, ms(p50), 108.0, "median round trip (a loaded machine adds its own delay, never less)")
	require.Less(t, ms(p99), 115.0, "p99 round trip")
	require.GreaterOrEqual(t, ms(res.percentile(0)), 90.0, "no packet beats the delay less the jitter")
	// A round trip is lost when either way is: 1-0.95² = 9.75 %, within
	// four standard deviations of 800 trials (±4.2 points).
	require.InDelta(t, 9.75, 100*res.loss(), 4.2, "round-trip loss")
	require.Positive(t, res.reordered, "a jitter wider than the spacing of the packets reorders them")

	// Without jitter and loss: every packet, in order, at the delay.
	lab.SetAllLinks(testwan.Link{Delay: 20 * time.Millisecond})
	res = pingPong(t, lab, 0, 1, 200, 2*time.Millisecond)
	require.Equal(t, res.sent, res.answered)
	require.Zero(t, res.reordered)
	require.LessOrEqual(t, ms(res.percentile(50)), 46.0)
	require.GreaterOrEqual(t, ms(res.percentile(0)), 40.0)
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// A partition cuts both ways or one way only, and heals.
func TestAPartitionCutsBothWaysOrOneAndHeals(t *testing.T) {
	lab := testwan.New(t, testwan.Options{Sites: 3, Link: testwan.Link{Delay: time.Millisecond}})
	reaches := func(a, b int) bool {
		res := pingPong(t, lab, a, b, 5, time.Millisecond)
		return res.answered > 0
	}
	require.True(t, reaches(0, 1))
	lab.Partition([]int{0}, []int{1, 2})
	require.False(t, reaches(0, 1))
	require.False(t, reaches(2, 0))
	require.True(t, reaches(1, 2), "within one side, the paths stay")
	lab.Heal()
	require.True(t, reaches(0, 1))

	// One way: 0's datagrams reach 1, 1's never reach 0.
	lab.CutOneWay([]int{1}, []int{0})
	got, err := lab.ListenPacket(1, netip.AddrPortFrom(lab.Addr(1), 7100).String())
	require.NoError(t, err)
	defer got.Close()
	c, err := lab.Dial(context.Background(), 0, "udp", netip.AddrPortFrom(lab.Addr(1), 7100).String())
	require.NoError(t, err)
	defer c.Close()
	_, err = c.Write([]byte("one way"))
	require.NoError(t, err)
	_ = got.SetReadDeadline(time.Now().Add(2 * time.Second))
	buf := make([]byte, 16)
	k, _, err := got.ReadFrom(buf)
	require.NoError(t, err, "0 to 1 still passes")
	require.Equal(t, "one way", string(buf[:k]))
	require.False(t, reaches(0, 1), "the answer from 1 to 0 is cut")
	require.Positive(t, lab.Stats().Cut)
}

// An exposed site is reached at its load balancer address, which is not
// one it binds, and sees its clients' own addresses.
func TestAnExposedSiteIsReachedAtItsLoadBalancerAddress(t *testing.T) {
	lab := testwan.New(t, testwan.Options{Sites: 2, Link: testwan.Link{Delay: 5 * time.Millisecond}})
	vip, err := lab.Expose(1)
	require.NoError(t, err)
	require.True(t, testwan.ExposedPrefix.Contains(vip))
	ln, err := lab.Listen(1, netip.AddrPortFrom(lab.Addr(1), 8443).String())
	require.NoError(t, err)
	defer ln.Close()
	seen := make(chan string, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		seen <- c.RemoteAddr().(*net.TCPAddr).IP.String()
		_, _ = io.Copy(c, c)
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := lab.Dial(ctx, 0, "tcp", netip.AddrPortFrom(vip, 8443).String())
	require.NoError(t, err)
	defer c.Close()
	require.Equal(t, vip.String(), c.RemoteAddr().(*net.TCPAddr).IP.String(), "the client speaks to the load balancer address")
	require.Equal(t, lab.Addr(0).String(), <-seen, "the site sees the client's own address")
	_, err = c.Write([]byte("hello"))
	require.NoError(t, err)
	buf := make([]byte, 5)
	_, err = io.ReadFull(c, buf)
	require.NoError(t, err)
	require.Equal(t, "hello", string(buf))

	// The site's own address is still reachable: the translation adds an
	// address, it takes none away.
	c2, err := lab.Dial(ctx, 0, "tcp", netip.AddrPortFrom(lab.Addr(1), 8443).String())
	require.NoError(t, err)
	_ = c2.Close()
}

// A site without inbound dials out, and answers come back to it; nobody
// can dial it.
func TestASiteWithoutInboundDialsOutOnly(t *testing.T) {
	lab := testwan.New(t, testwan.Options{Sites: 2, Link: testwan.Link{Delay: 2 * time.Millisecond}})
	require.NoError(t, lab.NoInbound(1))
	listen := func(site int) net.Listener {
		ln, err := lab.Listen(site, netip.AddrPortFrom(lab.Addr(site), 9000).String())
		require.NoError(t, err)
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				_ = c.Close()
			}
		}()
		return ln
	}
	defer listen(0).Close()
	defer listen(1).Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_, err := lab.Dial(ctx, 0, "tcp", netip.AddrPortFrom(lab.Addr(1), 9000).String())
	require.Error(t, err, "site 1 cannot be dialled")
	require.True(t, errors.Is(err, context.DeadlineExceeded) || os.IsTimeout(err), "dropped, not refused: %v", err)
	out, err := lab.Dial(context.Background(), 1, "tcp", netip.AddrPortFrom(lab.Addr(0), 9000).String())
	require.NoError(t, err, "site 1 dials out")
	_ = out.Close()
}

// A rate-bound link paces what crosses it.
func TestARateBoundLinkPacesAStream(t *testing.T) {
	lab := testwan.New(t, testwan.Options{Sites: 2,
		Link: testwan.Link{Delay: 5 * time.Millisecond, Rate: 8_000_000}})
	ln, err := lab.Listen(1, netip.AddrPortFrom(lab.Addr(1), 9100).String())
	require.NoError(t, err)
	defer ln.Close()
	received := make(chan int64, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		n, _ := io.Copy(io.Discard, c)
		received <- n
	}()
	c, err := lab.Dial(context.Background(), 0, "tcp", netip.AddrPortFrom(lab.Addr(1), 9100).String())
	require.NoError(t, err)
	const size = 1 << 20
	start := time.Now()
	_, err = c.Write(make([]byte, size))
	require.NoError(t, err)
	require.NoError(t, c.Close())
	require.Equal(t, int64(size), <-received)
	took := time.Since(start)
	mbps := float64(size*8) / took.Seconds() / 1e6
	fmt.Printf("wan-link rate_mbit=8 bytes=%d took_ms=%d goodput_mbit=%.2f\n", size, took.Milliseconds(), mbps)
	// 1 MiB at 8 Mbit/s is 1.05 s of payload; headers and TCP's ramp add
	// to it.
	require.LessOrEqual(t, mbps, 8.2, "the link's rate bounds the goodput")
	require.GreaterOrEqual(t, mbps, 5.0, "the goodput comes near the link's rate")
}

// A pod behind a site (in a namespace of its own, on a bridge-like link
// to the site, as a node's pods are) is reached at the site's load
// balancer address on the ports forwarded to it, over TCP and UDP, and
// what it dials leaves with the site's address.
func TestAPodBehindASiteIsReachedAtItsPortsAndLeavesAsTheSite(t *testing.T) {
	lab := testwan.New(t, testwan.Options{Sites: 2, Link: testwan.Link{Delay: 5 * time.Millisecond}})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	pod := fmt.Sprintf("gswanpod%d", os.Getpid())
	require.NoError(t, testnetns.Add(ctx, pod))
	t.Cleanup(func() { _ = testnetns.Delete(context.Background(), pod) })
	podAddr := netip.MustParseAddr("10.244.9.2")
	for _, args := range [][]string{
		{"-n", lab.Name(1), "link", "add", "vpod", "type", "veth", "peer", "name", "eth0", "netns", pod},
		{"-n", lab.Name(1), "addr", "add", "10.244.9.1/24", "dev", "vpod"},
		{"-n", lab.Name(1), "link", "set", "vpod", "up"},
		{"-n", pod, "addr", "add", podAddr.String() + "/24", "dev", "eth0"},
		{"-n", pod, "link", "set", "eth0", "up"},
		{"-n", pod, "route", "add", "default", "via", "10.244.9.1"},
	} {
		require.NoError(t, testnetns.IP(ctx, args...))
	}
	require.NoError(t, lab.Masquerade(1, netip.MustParsePrefix("10.244.9.0/24")))
	vip, err := lab.ExposePorts(1, []testwan.Forward{
		{Proto: "tcp", Port: 8443, To: netip.AddrPortFrom(podAddr, 8443)},
		{Proto: "udp", Port: 7946, To: netip.AddrPortFrom(podAddr, 7946)},
	})
	require.NoError(t, err)
	require.Equal(t, lab.ExposedAddr(1), vip)

	// TCP in: the pod sees the client's site address.
	ln, err := testnetns.Listen(testnetns.Path(pod), netip.AddrPortFrom(podAddr, 8443).String())
	require.NoError(t, err)
	defer ln.Close()
	seen := make(chan string, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		seen <- c.RemoteAddr().(*net.TCPAddr).IP.String()
		_ = c.Close()
	}()
	c, err := lab.Dial(ctx, 0, "tcp", netip.AddrPortFrom(vip, 8443).String())
	require.NoError(t, err)
	_ = c.Close()
	require.Equal(t, lab.Addr(0).String(), <-seen)

	// UDP in, and the answer back from the load balancer address.
	pc, err := testnetns.ListenPacket(testnetns.Path(pod), netip.AddrPortFrom(podAddr, 7946).String())
	require.NoError(t, err)
	defer pc.Close()
	go func() {
		buf := make([]byte, 64)
		n, from, err := pc.ReadFrom(buf)
		if err == nil {
			_, _ = pc.WriteTo(buf[:n], from)
		}
	}()
	client, err := lab.ListenPacket(0, netip.AddrPortFrom(lab.Addr(0), 0).String())
	require.NoError(t, err)
	defer client.Close()
	to := net.UDPAddrFromAddrPort(netip.AddrPortFrom(vip, 7946))
	_, err = client.WriteTo([]byte("ping"), to)
	require.NoError(t, err)
	_ = client.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 64)
	n, from, err := client.ReadFrom(buf)
	require.NoError(t, err)
	require.Equal(t, "ping", string(buf[:n]))
	require.Equal(t, to.String(), from.String(), "the answer comes from the load balancer address")

	// Out: the pod's own flow reaches the other site with the site's
	// address, never the pod's.
	out, err := lab.Listen(0, netip.AddrPortFrom(lab.Addr(0), 9000).String())
	require.NoError(t, err)
	defer out.Close()
	go func() {
		c, err := out.Accept()
		if err != nil {
			return
		}
		seen <- c.RemoteAddr().(*net.TCPAddr).IP.String()
		_ = c.Close()
	}()
	c, err = testnetns.Dial(ctx, testnetns.Path(pod), "tcp", netip.AddrPortFrom(lab.Addr(0), 9000).String())
	require.NoError(t, err)
	_ = c.Close()
	require.Equal(t, lab.Addr(1).String(), <-seen)
}
