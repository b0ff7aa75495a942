package streamgate

import (
	"bytes"
	"encoding/binary"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gridsync/gridsync/gossip/record"
)

// Streams over the cap, from one source or in total, are closed at once.
func TestStreamCapsPerSourceAndTotal(t *testing.T) {
	g := NewGate(Limits{MaxStreams: 3, MaxStreamsPerAddr: 2}, nil, time.Now, func(string) {})
	conn := func(ip string) net.Conn {
		return fakeConn{remote: &net.TCPAddr{IP: net.ParseIP(ip), Port: 1}}
	}
	_, r1, ok := g.admit(conn("127.0.0.1"))
	require.True(t, ok)
	_, _, ok = g.admit(conn("127.0.0.1"))
	require.True(t, ok)
	_, _, ok = g.admit(conn("127.0.0.1"))
	require.False(t, ok, "a third stream from one source")
	_, _, ok = g.admit(conn("127.0.0.2"))
	require.True(t, ok)
	_, _, ok = g.admit(conn("127.0.0.3"))
	require.False(t, ok, "a fourth stream in total")
	r1()
	r1() // released once only
	_, _, ok = g.admit(conn("127.0.0.3"))
	require.True(t, ok, "a released place is free again")
	_, _, ok = g.admit(conn("127.0.0.4"))
	require.False(t, ok)
}

type fakeConn struct {
	net.Conn
	remote net.Addr
}

func (f fakeConn) RemoteAddr() net.Addr { return f.remote }

// A push/pull is refused when stale, when its nonce was seen, and past the
// source's or the site's budget.
func TestPushPullFreshnessAndBudget(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	lim := DefaultLimits()
	lim.PushPullBurst, lim.PushPullRate = 2, 0.5
	lim.SitePushPullBurst, lim.SitePushPullRate = 3, 1
	g := NewGate(lim, nil, func() time.Time { return now }, func(string) {})
	src := netip.MustParseAddr("127.0.0.1")
	state := func(at time.Time) []byte {
		b, err := record.EncodeDigest("a/1", nil, nil, at)
		require.NoError(t, err)
		return pushPullBody(t, b)
	}
	nonce := func(i byte) []byte { return bytes.Repeat([]byte{i}, nonceBytes) }

	require.NoError(t, g.checkPushPull(src, nonce(1), state(now)))
	require.ErrorIs(t, g.checkPushPull(src, nonce(1), state(now)), errRefused{RejectReplayed}, "the same nonce again")
	require.ErrorIs(t, g.checkPushPull(src, nonce(2), state(now)), errRefused{RejectPushPullRate}, "the source's burst is spent")
	now = now.Add(2 * time.Second)
	require.ErrorIs(t, g.checkPushPull(src, nonce(3), state(now.Add(-3*time.Minute))), errRefused{RejectStale})
	now = now.Add(2 * time.Second)
	require.ErrorIs(t, g.checkPushPull(src, nonce(4), state(now.Add(3*time.Minute))), errRefused{RejectStale}, "from the future")
	now = now.Add(2 * time.Second)
	require.ErrorIs(t, g.checkPushPull(src, nonce(5), pushPullBody(t, []byte{record.MsgRecords, '{', '}'})), errRefused{RejectStale}, "no time at all")

	// The site's budget holds whatever the number of sources.
	now = now.Add(10 * time.Second)
	refused := 0
	for i := range 10 {
		other := netip.AddrFrom4([4]byte{127, 0, 1, byte(i)})
		if g.checkPushPull(other, nonce(byte(10+i)), state(now)) != nil {
			refused++
		}
	}
	require.Equal(t, 7, refused, "three in the site's burst")
}

// pushPullBody is memberlist's push/pull body with no nodes and the given
// user state.
func pushPullBody(t *testing.T, userState []byte) []byte {
	var buf bytes.Buffer
	// A msgpack map of three: Nodes 0, UserStateLen, Join false.
	buf.WriteByte(0x83)
	writeStr := func(s string) { buf.WriteByte(0xa0 | byte(len(s))); buf.WriteString(s) }
	writeStr("Nodes")
	buf.WriteByte(0)
	writeStr("UserStateLen")
	buf.WriteByte(0xce)
	_ = binary.Write(&buf, binary.BigEndian, uint32(len(userState)))
	writeStr("Join")
	buf.WriteByte(0xc2)
	buf.Write(userState)
	return buf.Bytes()
}
