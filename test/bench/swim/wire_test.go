package swim

import (
	"crypto/aes"
	"crypto/cipher"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gridsync/gridsync/gossip/record"
	"github.com/gridsync/gridsync/test/testwan"
)

// What the sites of the WAN lab put on the wire, by kind: every IP packet
// a site sends is read off its lab device (an AF_PACKET socket in its
// namespace, outgoing packets only: what the lab's router counts) and
// told apart by decrypting it with the grid's SWIM key. A UDP packet is
// named by its first message (a probe's ping or ack, an indirect ping, a
// gossip round's broadcasts), and the broadcasts piggybacked on it are
// counted apart; a TCP connection is named by the first message its
// dialer sends (a push/pull, or which of the project's messages a
// reliable send carries), and every packet of it, handshake and
// acknowledgements included, counts to that name.

// wireKinds are the capture's totals by kind.
type wireKinds map[string]*wireCount

type wireCount struct {
	packets, bytes int64 // IP packets and their bytes
	data           int64 // their UDP or TCP payload
	flows          int64 // TCP connections
	// piggy are the bytes of broadcasts carried in the kind's UDP packets
	// (after a ping's or an ack's own message).
	piggy int64
}

type wireCapture struct {
	gcm   cipher.AEAD
	block cipher.Block
	stop  atomic.Bool
	wg    sync.WaitGroup
	fds   []int

	mu    sync.Mutex
	kinds wireKinds
	flows map[flowKey]*flow
	// bcast are the bytes of broadcasts by what they carry, wherever
	// they ride (a gossip packet, a ping, an ack).
	bcast map[string]int64
}

// flowKey is a TCP connection, its two ends in a fixed order.
type flowKey struct{ a, b netip.AddrPort }

type flow struct {
	dialer  netip.AddrPort
	isn     uint32
	kind    string
	pending wireCount // packets before the kind was known
}

// captureWire starts reading what every site of the lab sends.
func captureWire(lab *testwan.Lab, key []byte) (*wireCapture, error) {
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	gcm, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	c := &wireCapture{gcm: gcm, block: block, kinds: wireKinds{}, flows: map[flowKey]*flow{}, bcast: map[string]int64{}}
	for i := range lab.Sites() {
		var fd int
		err := lab.Do(i, func() error {
			ifindex, err := ifaceOf(lab.Addr(i))
			if err != nil {
				return err
			}
			fd, err = unix.Socket(unix.AF_PACKET, unix.SOCK_DGRAM, int(htons(unix.ETH_P_ALL)))
			if err != nil {
				return err
			}
			// Reads wake up now and then to see whether the capture
			// stopped.
			tv := unix.Timeval{Usec: 200_000}
			if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
				_ = unix.Close(fd)
				return err
			}
			return unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ALL), Ifindex: ifindex})
		})
		if err != nil {
			c.close()
			return nil, fmt.Errorf("capture at site %d: %w", i, err)
		}
		c.fds = append(c.fds, fd)
		c.wg.Add(1)
		go c.read(fd)
	}
	return c, nil
}

// ifaceOf is the index of the interface holding addr, in the calling
// thread's namespace.
func ifaceOf(addr netip.Addr) (int, error) {
	ifs, err := net.Interfaces()
	if err != nil {
		return 0, err
	}
	for _, ifc := range ifs {
		addrs, _ := ifc.Addrs()
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok && n.IP.Equal(addr.AsSlice()) {
				return ifc.Index, nil
			}
		}
	}
	return 0, fmt.Errorf("no interface holds %s", addr)
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

func (c *wireCapture) read(fd int) {
	defer c.wg.Done()
	buf := make([]byte, 1<<16)
	for !c.stop.Load() {
		n, from, err := unix.Recvfrom(fd, buf, 0)
		if err != nil {
			if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR) {
				continue
			}
			return
		}
		if ll, ok := from.(*unix.SockaddrLinklayer); !ok || ll.Pkttype != unix.PACKET_OUTGOING {
			continue
		}
		c.packet(buf[:n])
	}
}

func (c *wireCapture) close() {
	c.stop.Store(true)
	c.wg.Wait()
	for _, fd := range c.fds {
		_ = unix.Close(fd)
	}
}

// snapshot is a copy of the totals so far, TCP connections whose kind is
// not known yet counted as "tcp without data".
func (c *wireCapture) snapshot() (wireKinds, map[string]int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := wireKinds{}
	for k, v := range c.kinds {
		cp := *v
		out[k] = &cp
	}
	for _, f := range c.flows {
		if f.kind == "" {
			w := out.get("tcp without data")
			w.packets += f.pending.packets
			w.bytes += f.pending.bytes
			w.data += f.pending.data
			w.flows++
		}
	}
	bcast := map[string]int64{}
	for k, v := range c.bcast {
		bcast[k] = v
	}
	return out, bcast
}

func (k wireKinds) get(name string) *wireCount {
	w := k[name]
	if w == nil {
		w = &wireCount{}
		k[name] = w
	}
	return w
}

// packet counts one IP packet a site sent.
func (c *wireCapture) packet(pkt []byte) {
	if len(pkt) < 20 || pkt[0]>>4 != 4 {
		c.add("other", len(pkt), 0, 0)
		return
	}
	ihl := int(pkt[0]&0x0f) * 4
	if len(pkt) < ihl {
		return
	}
	src, dst := netip.AddrFrom4([4]byte(pkt[12:16])), netip.AddrFrom4([4]byte(pkt[16:20]))
	l4 := pkt[ihl:]
	switch pkt[9] {
	case unix.IPPROTO_UDP:
		if len(l4) < 8 {
			return
		}
		kind, piggy := c.udpKind(l4[8:])
		c.add(kind, len(pkt), len(l4)-8, piggy)
	case unix.IPPROTO_TCP:
		if len(l4) < 20 {
			return
		}
		c.tcp(netip.AddrPortFrom(src, binary.BigEndian.Uint16(l4[0:2])), netip.AddrPortFrom(dst, binary.BigEndian.Uint16(l4[2:4])), l4, len(pkt))
	default:
		c.add("other", len(pkt), 0, 0)
	}
}

func (c *wireCapture) add(kind string, size, data, piggy int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	w := c.kinds.get(kind)
	w.packets++
	w.bytes += int64(size)
	w.data += int64(data)
	w.piggy += int64(piggy)
}

// memberlist's message types (its net.go).
const (
	mlPing = iota
	mlIndirectPing
	mlAck
	mlSuspect
	mlAlive
	mlDead
	mlPushPull
	mlCompound
	mlUser
	mlCompress
	mlEncrypt
	mlNack
	mlHasCrc
	mlErr
)

var mlNames = map[byte]string{
	mlPing: "ping", mlIndirectPing: "indirect-ping", mlAck: "ack", mlSuspect: "suspect", mlAlive: "alive",
	mlDead: "dead", mlPushPull: "push-pull", mlUser: "user", mlNack: "nack", mlErr: "err",
}

// recordNames are the project's messages, by their type byte.
var recordNames = map[byte]string{
	record.MsgRecords: "records", record.MsgDigest: "digest", record.MsgNotice: "notice", record.MsgDirect: "direct-records",
}

// udpKind names a SWIM packet by its first message, and says how many of
// its bytes are broadcasts riding after it.
func (c *wireCapture) udpKind(payload []byte) (string, int) {
	// [version][nonce][ciphertext and tag], no additional data: no label.
	if len(payload) < 1+12+16 {
		return "udp short", 0
	}
	plain, err := c.gcm.Open(nil, payload[1:13], payload[13:], nil)
	if err != nil {
		return "udp undecrypted", 0
	}
	if len(plain) > 5 && plain[0] == mlHasCrc {
		plain = plain[5:]
	}
	if len(plain) == 0 {
		return "udp empty", 0
	}
	parts := [][]byte{plain}
	if plain[0] == mlCompound {
		parts = splitCompound(plain[1:])
		if len(parts) == 0 {
			return "udp bad compound", 0
		}
	}
	first := parts[0][0]
	kind := "udp " + mlNames[first]
	rest := parts[1:]
	switch first {
	case mlPing, mlIndirectPing, mlAck, mlNack:
	default:
		// A gossip round: every part is a broadcast.
		kind, rest = "udp gossip", parts
	}
	piggy := 0
	c.mu.Lock()
	for _, p := range rest {
		name := mlNames[p[0]]
		if p[0] == mlUser && len(p) > 1 {
			name = "user " + recordNames[p[1]]
		}
		c.bcast[name] += int64(len(p))
		if kind != "udp gossip" {
			piggy += len(p)
		}
	}
	c.mu.Unlock()
	return kind, piggy
}

// splitCompound is memberlist's decodeCompoundMessage.
func splitCompound(b []byte) [][]byte {
	if len(b) < 1 {
		return nil
	}
	n := int(b[0])
	b = b[1:]
	if len(b) < 2*n {
		return nil
	}
	lens := make([]int, n)
	for i := range n {
		lens[i] = int(binary.BigEndian.Uint16(b[2*i:]))
	}
	b = b[2*n:]
	var parts [][]byte
	for _, l := range lens {
		if l == 0 || len(b) < l {
			break
		}
		parts = append(parts, b[:l])
		b = b[l:]
	}
	return parts
}

// tcp counts one TCP segment, to its connection's kind once known.
func (c *wireCapture) tcp(src, dst netip.AddrPort, seg []byte, size int) {
	flags := seg[13]
	syn, ack := flags&0x02 != 0, flags&0x10 != 0
	seq := binary.BigEndian.Uint32(seg[4:8])
	data := seg[min(len(seg), int(seg[12]>>4)*4):]
	key := flowKey{src, dst}
	if key.b.Addr().Less(key.a.Addr()) || key.a.Addr() == key.b.Addr() && key.b.Port() < key.a.Port() {
		key = flowKey{dst, src}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	f := c.flows[key]
	if f == nil || syn && !ack && f.isn != seq {
		// A new connection (a SYN of another sequence on a 4-tuple seen
		// before: a port used again).
		if f != nil && f.kind == "" {
			w := c.kinds.get("tcp without data")
			w.packets += f.pending.packets
			w.bytes += f.pending.bytes
			w.flows++
		}
		f = &flow{}
		c.flows[key] = f
		if syn && !ack {
			f.dialer, f.isn = src, seq
		}
	}
	if f.kind == "" && src == f.dialer && seq == f.isn+1 && len(data) > 0 {
		f.kind = c.streamKind(data)
		w := c.kinds.get(f.kind)
		w.packets += f.pending.packets
		w.bytes += f.pending.bytes
		w.data += f.pending.data
		w.flows++
		f.pending = wireCount{}
	}
	if f.kind == "" {
		f.pending.packets++
		f.pending.bytes += int64(size)
		f.pending.data += int64(len(data))
		return
	}
	w := c.kinds.get(f.kind)
	w.packets++
	w.bytes += int64(size)
	w.data += int64(len(data))
}

// streamKind names a memberlist stream by the first message of its first
// frame: [encrypt][length][version][nonce][ciphertext], whose first
// bytes are decrypted with the key stream alone (AES-GCM is counter mode;
// the tag, at the frame's end, is not checked).
func (c *wireCapture) streamKind(data []byte) string {
	const head = 1 + 4 + 1 + 12
	if len(data) < head+1 || data[0] != mlEncrypt {
		return "tcp unencrypted"
	}
	nonce := data[6:18]
	ct := data[head:min(len(data), head+64)]
	plain := make([]byte, len(ct))
	var ctr, ks [16]byte
	copy(ctr[:], nonce)
	for i := 0; i < len(ct); i += 16 {
		binary.BigEndian.PutUint32(ctr[12:], uint32(2+i/16))
		c.block.Encrypt(ks[:], ctr[:])
		for j := i; j < min(len(ct), i+16); j++ {
			plain[j] = ct[j] ^ ks[j-i]
		}
	}
	switch plain[0] {
	case mlUser:
		// [user][msgpack {UserMsgLen: n}][the project's message]
		if i := strings.Index(string(plain), "UserMsgLen"); i > 0 && i+len("UserMsgLen") < len(plain) {
			rest := plain[i+len("UserMsgLen"):]
			// A positive fixint, or an unsigned or signed integer of 1,
			// 2, 4 or 8 bytes.
			skip := map[byte]int{0xcc: 2, 0xcd: 3, 0xce: 5, 0xcf: 9, 0xd0: 2, 0xd1: 3, 0xd2: 5, 0xd3: 9}[rest[0]]
			if rest[0] < 0x80 {
				skip = 1
			}
			if skip > 0 && skip < len(rest) {
				return "tcp " + recordNames[rest[skip]]
			}
		}
		return "tcp user"
	case mlPushPull:
		if i := strings.Index(string(plain), "Join"); i > 0 && i+4 < len(plain) && plain[i+4] == 0xc3 {
			return "tcp join"
		}
		return "tcp push-pull"
	}
	return "tcp " + mlNames[plain[0]]
}

// logWire says, per site and second of a window, what each kind cost.
func logWire(logf func(string, ...any), before, after wireKinds, bcastBefore, bcastAfter map[string]int64, sites int, window time.Duration, labBytes float64) {
	per := float64(sites) * window.Seconds()
	type row struct {
		name string
		d    wireCount
	}
	var rows []row
	var total wireCount
	for name, a := range after {
		d := *a
		if b := before[name]; b != nil {
			d.packets, d.bytes, d.data, d.flows, d.piggy = d.packets-b.packets, d.bytes-b.bytes, d.data-b.data, d.flows-b.flows, d.piggy-b.piggy
		}
		if d.packets == 0 {
			continue
		}
		rows = append(rows, row{name, d})
		total.packets += d.packets
		total.bytes += d.bytes
		total.data += d.data
	}
	slices.SortFunc(rows, func(a, b row) int { return int(b.d.bytes - a.d.bytes) })
	// A few long lines: the testing package keeps ten lines of a
	// benchmark's log.
	var sb strings.Builder
	fmt.Fprintf(&sb, "wire per site and second over %s (IP bytes, headers included): the lab's router counted %.0f B/s, the capture %.0f B/s in %.2f packets of %.0f B, %.0f B/s of it UDP or TCP payload",
		window.Round(time.Second), labBytes/per, float64(total.bytes)/per, float64(total.packets)/per, float64(total.bytes)/float64(max(1, total.packets)), float64(total.data)/per)
	for _, proto := range []string{"udp", "tcp", "other"} {
		fmt.Fprintf(&sb, "\n  %s:", proto)
		for _, r := range rows {
			name, ok := strings.CutPrefix(r.name, proto+" ")
			if !ok && r.name != proto {
				continue
			}
			fmt.Fprintf(&sb, " %s %.1f B/s (payload %.1f, %.3f pkt/s, %.0f B/pkt", name, float64(r.d.bytes)/per, float64(r.d.data)/per, float64(r.d.packets)/per, float64(r.d.bytes)/float64(r.d.packets))
			if r.d.flows > 0 {
				fmt.Fprintf(&sb, ", %.2f conn/min", float64(r.d.flows)/per*60)
			}
			if r.d.piggy > 0 {
				fmt.Fprintf(&sb, ", %.1f B/s of broadcasts", float64(r.d.piggy)/per)
			}
			sb.WriteString(");")
		}
	}
	var names []string
	for name := range bcastAfter {
		names = append(names, name)
	}
	slices.Sort(names)
	sb.WriteString("\n  broadcasts in UDP packets, by message (payload B/s):")
	for _, name := range names {
		fmt.Fprintf(&sb, " %s=%.1f", name, float64(bcastAfter[name]-bcastBefore[name])/per)
	}
	logf("%s", sb.String())
}
