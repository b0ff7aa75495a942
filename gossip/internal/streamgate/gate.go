package streamgate

import (
	"bufio"
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/hashicorp/go-msgpack/v2/codec"
	"github.com/hashicorp/memberlist"
	"golang.org/x/time/rate"

	"github.com/gridsync/gridsync/gossip/record"
)

// The stream gate sits between the TCP listener and memberlist. memberlist
// reads the whole length an encrypted stream claims (up to 20 MiB) into
// memory before it tries a key, one goroutine per connection and no limit
// on connections, and answers every authenticated push/pull with this
// site's whole state however often the same request arrives. So before
// memberlist sees a stream the gate:
//
//   - caps the streams open at once, per source address and in total;
//   - reads the first frame itself, with a deadline, refusing a claimed
//     length above what a real grid sends and holding what it buffers to a
//     byte budget shared by every unauthenticated stream;
//   - authenticates that frame with the installed keys (AES-GCM, as
//     memberlist does), so that nothing unauthenticated reaches membership;
//   - for a push/pull, the only stream that is answered with state, spends
//     a token of the sender's bucket and of the site's, and refuses a
//     request that is stale (its sent-at time, inside the authenticated
//     state, is too far from now) or already seen (its nonce).
//
// What an unauthenticated sender gets back is then nothing at all, and the
// memory it can make the agent hold is the budget.
type Gate struct {
	lim     Limits
	keyring *memberlist.Keyring // nil in the clear
	now     func() time.Time
	reject  func(reason string)

	mu         sync.Mutex
	open       int
	perAddr    map[netip.Addr]int
	buffered   int64
	bufferedBy map[netip.Addr]int64
	buckets    map[netip.Addr]*sourceBucket
	total      *rate.Limiter
	nonces     map[[nonceBytes]byte]time.Time
}

// Limits bound what the stream gate lets a caller spend before it is
// authenticated. The defaults are sized from a real grid: a join's full
// state is at most record.MaxMessageBytes of records plus one entry per member.
type Limits struct {
	// MaxStreams and MaxStreamsPerAddr cap the inbound streams open at
	// once. memberlist itself serves at most 128 push/pulls at a time.
	MaxStreams        int
	MaxStreamsPerAddr int
	// MaxFrameBytes is the largest first frame read (a join's state).
	MaxFrameBytes int
	// BufferBytes is what every unauthenticated first frame together may
	// hold in memory; BufferBytesPerAddr one source's share of it.
	BufferBytes        int64
	BufferBytesPerAddr int64
	// FrameTimeout is how long the first frame may take to arrive.
	FrameTimeout time.Duration
	// PushPullRate and PushPullBurst are a source's budget of full-state
	// exchanges; SitePushPullRate and SitePushPullBurst the site's.
	PushPullRate      float64
	PushPullBurst     int
	SitePushPullRate  float64
	SitePushPullBurst int
	// Freshness is how far a push/pull's sent-at time may be from this
	// site's clock (both ways: sites' clocks differ a little); a nonce is
	// remembered for twice that.
	Freshness time.Duration
	// MaxSources bounds the per-source buckets held.
	MaxSources int
}

// DefaultLimits: a join of a 500-site grid fits, a site's periodic
// push/pull (every minute, scaled up above 32 sites) and the joins after a
// restart pass, a flood is held.
func DefaultLimits() Limits {
	return Limits{
		MaxStreams:         128,
		MaxStreamsPerAddr:  16,
		MaxFrameBytes:      record.MaxMessageBytes + 1<<20,
		BufferBytes:        24 << 20,
		BufferBytesPerAddr: record.MaxMessageBytes + 1<<20,
		FrameTimeout:       10 * time.Second,
		PushPullRate:       0.5,
		PushPullBurst:      6,
		SitePushPullRate:   10,
		SitePushPullBurst:  64,
		Freshness:          2 * time.Minute,
		MaxSources:         4096,
	}
}

// Reasons a packet or stream is rejected before membership sees it (the
// reason label of grid_swim_packets_rejected_total): the first five are
// memberlist's own refusals as its log says them, the rest the gate's.
const (
	RejectUnknownKey          = "unknown_key"          // encrypted with a key not installed here
	RejectNotEncrypted        = "not_encrypted"        // plaintext while a key is required
	RejectEncryptedUnexpected = "encrypted_unexpected" // encrypted while this site runs in the clear
	RejectLabel               = "label_mismatch"
	RejectMalformed           = "malformed"

	RejectStreamsBusy    = "streams_busy"     // too many open streams, in total or from the source
	RejectFrameTooLarge  = "frame_too_large"  // a claimed length above MaxFrameBytes
	RejectBudget         = "buffer_budget"    // the unauthenticated byte budget is spent
	RejectSlowFrame      = "slow_frame"       // the first frame did not arrive in time
	RejectPushPullRate   = "push_pull_rate"   // full-state exchanges over the budget
	RejectStale          = "stale"            // a push/pull sent too long ago, or with no time
	RejectReplayed       = "replayed"         // a push/pull already seen
	RejectUnexpectedKind = "unexpected_frame" // a frame memberlist would not serve here
)

// RejectReasons are every reason of grid_swim_packets_rejected_total.
var RejectReasons = []string{RejectUnknownKey, RejectNotEncrypted, RejectEncryptedUnexpected, RejectLabel, RejectMalformed,
	RejectStreamsBusy, RejectFrameTooLarge, RejectBudget, RejectSlowFrame,
	RejectPushPullRate, RejectStale, RejectReplayed, RejectUnexpectedKind}

// memberlist's wire constants (the numbers are its protocol).
const (
	mlPushPullMsg  = 6
	mlCompressMsg  = 9
	mlEncryptMsg   = 10
	mlHasLabelMsg  = 244
	nonceBytes     = 12
	gcmTagBytes    = 16
	encVersionSize = 1
)

type sourceBucket struct {
	lim  *rate.Limiter
	seen time.Time
}

func NewGate(lim Limits, kr *memberlist.Keyring, now func() time.Time, reject func(string)) *Gate {
	return &Gate{
		lim: lim, keyring: kr, now: now, reject: reject,
		perAddr:    map[netip.Addr]int{},
		bufferedBy: map[netip.Addr]int64{},
		buckets:    map[netip.Addr]*sourceBucket{},
		total:      rate.NewLimiter(rate.Limit(lim.SitePushPullRate), lim.SitePushPullBurst),
		nonces:     map[[nonceBytes]byte]time.Time{},
	}
}

// admit counts a new stream, or refuses it when too many are open. The
// returned release must be called once the stream is closed.
func (g *Gate) admit(c net.Conn) (src netip.Addr, release func(), ok bool) {
	src = sourceOf(c)
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.open >= g.lim.MaxStreams || g.perAddr[src] >= g.lim.MaxStreamsPerAddr {
		return src, nil, false
	}
	g.open++
	g.perAddr[src]++
	var once sync.Once
	return src, func() {
		once.Do(func() {
			g.mu.Lock()
			defer g.mu.Unlock()
			g.open--
			if g.perAddr[src]--; g.perAddr[src] <= 0 {
				delete(g.perAddr, src)
			}
		})
	}, true
}

func sourceOf(c net.Conn) netip.Addr {
	if ta, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		if a, ok := netip.AddrFromSlice(ta.IP); ok {
			return a.Unmap()
		}
	}
	return netip.Addr{}
}

// errRefused carries the reason a stream was refused.
type errRefused struct{ reason string }

func (e errRefused) Error() string { return "stream refused: " + e.reason }

// inspect reads and checks the stream's first frame. It returns a
// connection that replays what was read, for memberlist to read as if
// untouched, and the release of the bytes it holds of the budget: held
// until the stream ends, since memberlist buffers the frame again, so that
// what every stream's first frame holds (a key holder's too) stays within
// the budget.
func (g *Gate) inspect(c net.Conn, src netip.Addr) (net.Conn, func(), error) {
	if err := c.SetReadDeadline(g.now().Add(g.lim.FrameTimeout)); err != nil {
		return nil, nil, err
	}
	br := bufio.NewReaderSize(c, 512)
	var head bytes.Buffer
	first, err := br.ReadByte()
	if err != nil {
		return nil, nil, g.readErr(err)
	}
	head.WriteByte(first)
	var label []byte
	if first == mlHasLabelMsg {
		n, err := br.ReadByte()
		if err != nil {
			return nil, nil, g.readErr(err)
		}
		label = make([]byte, n)
		if _, err := io.ReadFull(br, label); err != nil {
			return nil, nil, g.readErr(err)
		}
		head.WriteByte(n)
		head.Write(label)
		if first, err = br.ReadByte(); err != nil {
			return nil, nil, g.readErr(err)
		}
		head.WriteByte(first)
	}
	if g.keyring == nil {
		// In the clear nothing can be authenticated: the stream caps
		// and memberlist's own limits are all there is (the runtime
		// warns that gossip is unauthenticated).
		if first == mlEncryptMsg {
			return nil, nil, errRefused{RejectEncryptedUnexpected}
		}
		return g.replay(c, head.Bytes(), br), func() {}, nil
	}
	if first != mlEncryptMsg {
		return nil, nil, errRefused{RejectNotEncrypted}
	}
	var lenBuf [4]byte
	if _, err := io.ReadFull(br, lenBuf[:]); err != nil {
		return nil, nil, g.readErr(err)
	}
	head.Write(lenBuf[:])
	n := binary.BigEndian.Uint32(lenBuf[:])
	if n > uint32(g.lim.MaxFrameBytes) {
		return nil, nil, errRefused{RejectFrameTooLarge}
	}
	if n < encVersionSize+nonceBytes+gcmTagBytes {
		return nil, nil, errRefused{RejectMalformed}
	}
	free, ok := g.reserve(src, int64(n))
	if !ok {
		return nil, nil, errRefused{RejectBudget}
	}
	keep := false
	defer func() {
		if !keep {
			free()
		}
	}()
	body := make([]byte, n)
	if _, err := io.ReadFull(br, body); err != nil {
		return nil, nil, g.readErr(err)
	}
	// Authenticated data: the type byte, the length and the label, as
	// memberlist builds it.
	aad := append([]byte{mlEncryptMsg}, lenBuf[:]...)
	aad = append(aad, label...)
	plain, err := openFrame(g.keyring.GetKeys(), body, aad)
	if err != nil {
		return nil, nil, errRefused{RejectUnknownKey}
	}
	if len(plain) > 0 && plain[0] == mlCompressMsg {
		// gridsync never compresses (see the runtime's config): a
		// compressed frame would hide a push/pull from the checks below
		// and may inflate to 40 MiB.
		return nil, nil, errRefused{RejectUnexpectedKind}
	}
	if len(plain) > 0 && plain[0] == mlPushPullMsg {
		if err := g.checkPushPull(src, body[encVersionSize:encVersionSize+nonceBytes], plain[1:]); err != nil {
			return nil, nil, err
		}
	}
	keep = true
	return g.replay(c, append(head.Bytes(), body...), br), free, nil
}

func (g *Gate) readErr(err error) error {
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return errRefused{RejectSlowFrame}
	}
	return errRefused{RejectMalformed}
}

// reserve takes n bytes of the unauthenticated budget.
func (g *Gate) reserve(src netip.Addr, n int64) (free func(), ok bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.buffered+n > g.lim.BufferBytes {
		return nil, false
	}
	if g.bufferedBy[src]+n > g.lim.BufferBytesPerAddr {
		return nil, false
	}
	g.buffered += n
	g.bufferedBy[src] += n
	return func() {
		g.mu.Lock()
		defer g.mu.Unlock()
		g.buffered -= n
		if g.bufferedBy[src] -= n; g.bufferedBy[src] <= 0 {
			delete(g.bufferedBy, src)
		}
	}, true
}

// openFrame authenticates and decrypts a memberlist frame
// (version, nonce, ciphertext and tag) with any of the keys.
func openFrame(keys [][]byte, body, aad []byte) ([]byte, error) {
	vsn := body[0]
	if vsn > 1 {
		return nil, fmt.Errorf("encryption version %d", vsn)
	}
	nonce, sealed := body[encVersionSize:encVersionSize+nonceBytes], body[encVersionSize+nonceBytes:]
	for _, k := range keys {
		block, err := aes.NewCipher(k)
		if err != nil {
			continue
		}
		gcm, err := cipher.NewGCM(block)
		if err != nil {
			continue
		}
		plain, err := gcm.Open(nil, nonce, sealed, aad)
		if err != nil {
			continue
		}
		if vsn == 0 { // PKCS#7 padded
			if len(plain) == 0 || int(plain[len(plain)-1]) > len(plain) || plain[len(plain)-1] == 0 {
				return nil, errors.New("bad padding")
			}
			plain = plain[:len(plain)-int(plain[len(plain)-1])]
		}
		return plain, nil
	}
	return nil, errors.New("no installed key opens the frame")
}

// pushPullHeader is memberlist's header of a push/pull.
type pushPullHeader struct {
	Nodes        int
	UserStateLen int
	Join         bool
}

// checkPushPull spends the rate budgets and refuses a stale or replayed
// push/pull. body is the decrypted message after its type byte: the
// header, one entry per node, then the sender's state as this package
// encodes it (which carries its sent-at time).
func (g *Gate) checkPushPull(src netip.Addr, nonce, body []byte) error {
	if !g.spend(src) {
		return errRefused{RejectPushPullRate}
	}
	at, ok := pushPullSentAt(body)
	now := g.now()
	if !ok || at.Before(now.Add(-g.lim.Freshness)) || at.After(now.Add(g.lim.Freshness)) {
		return errRefused{RejectStale}
	}
	var key [nonceBytes]byte
	copy(key[:], nonce)
	g.mu.Lock()
	defer g.mu.Unlock()
	for k, exp := range g.nonces {
		if now.After(exp) {
			delete(g.nonces, k)
		}
	}
	if _, seen := g.nonces[key]; seen {
		return errRefused{RejectReplayed}
	}
	// Bounded: only push/pulls within the rate budget get here, and each
	// is forgotten after twice the freshness window.
	g.nonces[key] = now.Add(2 * g.lim.Freshness)
	return nil
}

// spend takes a token from the source's bucket and the site's.
func (g *Gate) spend(src netip.Addr) bool {
	now := g.now()
	g.mu.Lock()
	defer g.mu.Unlock()
	b := g.buckets[src]
	if b == nil {
		if len(g.buckets) >= g.lim.MaxSources {
			for a, sb := range g.buckets {
				if now.Sub(sb.seen) > time.Duration(float64(g.lim.PushPullBurst)/g.lim.PushPullRate*float64(time.Second)) {
					delete(g.buckets, a)
				}
			}
			if len(g.buckets) >= g.lim.MaxSources {
				return false
			}
		}
		b = &sourceBucket{lim: rate.NewLimiter(rate.Limit(g.lim.PushPullRate), g.lim.PushPullBurst)}
		g.buckets[src] = b
	}
	b.seen = now
	if !b.lim.AllowN(now, 1) {
		return false
	}
	if !g.total.AllowN(now, 1) {
		return false
	}
	return true
}

// pushPullSentAt finds the sender's sent-at time in a push/pull body.
func pushPullSentAt(body []byte) (time.Time, bool) {
	r := bytes.NewReader(body)
	dec := codec.NewDecoder(r, &codec.MsgpackHandle{})
	var h pushPullHeader
	if err := dec.Decode(&h); err != nil || h.Nodes < 0 || h.UserStateLen <= 0 {
		return time.Time{}, false
	}
	for range h.Nodes {
		var node map[string]any
		if err := dec.Decode(&node); err != nil {
			return time.Time{}, false
		}
	}
	if r.Len() < h.UserStateLen {
		return time.Time{}, false
	}
	state := body[len(body)-r.Len():][:h.UserStateLen]
	return stateSentAt(state)
}

// stateSentAt reads the sent-at time of a LocalState message.
func stateSentAt(state []byte) (time.Time, bool) {
	if len(state) < 2 || (state[0] != record.MsgRecords && state[0] != record.MsgDigest) {
		return time.Time{}, false
	}
	var v struct {
		At int64 `json:"at"`
	}
	if err := json.Unmarshal(state[1:], &v); err != nil || v.At <= 0 {
		return time.Time{}, false
	}
	return time.UnixMilli(v.At), true
}

// replay returns c with what was read put back in front of it.
func (g *Gate) replay(c net.Conn, read []byte, rest *bufio.Reader) net.Conn {
	_ = c.SetReadDeadline(time.Time{})
	return &replayConn{Conn: c, r: io.MultiReader(bytes.NewReader(read), rest)}
}

type replayConn struct {
	net.Conn
	r io.Reader
}

func (c *replayConn) Read(p []byte) (int, error) { return c.r.Read(p) }
