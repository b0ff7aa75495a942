package gossip

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gridsync/gridsync/gossip/internal/streamgate"
	"github.com/gridsync/gridsync/gossip/record"
	"github.com/gridsync/gridsync/gossip/sites"
	"github.com/gridsync/gridsync/test/testnet"
)

// dialFrom opens a TCP connection to addr from a given loopback source.
func dialFrom(t *testing.T, src, addr string) (net.Conn, error) {
	t.Helper()
	d := net.Dialer{Timeout: 2 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}
	return d.DialContext(context.Background(), "tcp", addr)
}

// heapSampler records the largest heap in use while it runs.
type heapSampler struct {
	peak atomic.Uint64
	stop chan struct{}
	done chan struct{}
}

func sampleHeap() *heapSampler {
	h := &heapSampler{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(h.done)
		var ms runtime.MemStats
		for {
			runtime.ReadMemStats(&ms)
			if ms.HeapInuse > h.peak.Load() {
				h.peak.Store(ms.HeapInuse)
			}
			select {
			case <-h.stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	return h
}

func (h *heapSampler) finish() uint64 {
	close(h.stop)
	<-h.done
	return h.peak.Load()
}

func heapNow() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse
}

// The first round's attack: streams without the key, each claiming an
// encrypted frame just under memberlist's 20 MiB limit and sending that
// many random bytes. memberlist alone buffered every one (2.2 GiB for 48).
// Behind the gate a claim above the frame limit is closed at its header,
// claims under it share one byte budget, and the site keeps working.
func TestPreAuthStreamsAreBounded(t *testing.T) {
	a, b := joinedPair(t)
	require.Eventually(t, func() bool { return len(a.Status().Members) == 1 }, 5*time.Second, 10*time.Millisecond)
	base := heapNow()
	peak := sampleHeap()

	const streams = 48
	chunk := make([]byte, 256<<10)
	_, _ = rand.Read(chunk)
	var wg sync.WaitGroup
	var sent atomic.Int64
	for i := range streams {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Half claim 20 MiB, half just under the frame limit; from
			// eight loopback addresses.
			claim := uint32(20<<20 - 1)
			if i%2 == 1 {
				claim = uint32(streamgate.DefaultLimits().MaxFrameBytes)
			}
			c, err := dialFrom(t, "127.0.0."+string(rune('1'+i%8)), a.AdvertiseAddr())
			if err != nil {
				return
			}
			defer c.Close()
			hdr := []byte{10, 0, 0, 0, 0} // memberlist's encrypted frame, then its length
			binary.BigEndian.PutUint32(hdr[1:], claim)
			if _, err := c.Write(hdr); err != nil {
				return
			}
			_ = c.SetWriteDeadline(time.Now().Add(15 * time.Second))
			for left := int(claim); left > 0; left -= len(chunk) {
				n, err := c.Write(chunk[:min(left, len(chunk))])
				sent.Add(int64(n))
				if err != nil {
					return
				}
			}
			_, _ = io.Copy(io.Discard, c) // until the agent closes it
		}()
	}
	wg.Wait()
	grew := int64(peak.finish()) - int64(base)
	t.Logf("streams=%d bytes_sent=%d heap_growth_mib=%.1f", streams, sent.Load(), float64(grew)/(1<<20))
	lim := streamgate.DefaultLimits()
	require.Less(t, grew, lim.BufferBytes+16<<20, "what unauthenticated streams make the agent hold is the gate's budget")
	require.Positive(t, a.counter("grid_swim_packets_rejected_total", streamgate.RejectFrameTooLarge))
	require.Positive(t, a.counter("grid_swim_packets_rejected_total", streamgate.RejectUnknownKey)+a.counter("grid_swim_packets_rejected_total", streamgate.RejectBudget))

	// Membership carried on: a change still arrives.
	require.NoError(t, b.Publish("prod", "", providers("after-flood")))
	require.Eventually(t, func() bool { return len(a.View("prod").Providers) == 1 }, 10*time.Second, 20*time.Millisecond)
}

// A captured join, replayed without the key, gets nothing back: the first
// round saw each replay answered with the whole state (1,065 times what
// was sent).
func TestReplayedJoinIsRefused(t *testing.T) {
	key := randomKey(t)
	a := startSite(t, "site-a", withKey(key))
	a.waitRunning(t)
	require.NoError(t, a.Publish("prod", "", providers("pa", "pb", "pc")))
	b := startSite(t, "site-b", withKey(key))
	b.waitRunning(t)

	proxy := testnet.NewRecordingProxy(t, a.AdvertiseAddr())
	require.Empty(t, b.AnnounceSeeds("prod", []string{proxy.Addr()}).Failed)
	require.Eventually(t, func() bool { return len(b.View("prod").Providers) == 3 }, 10*time.Second, 20*time.Millisecond)
	var join []byte
	require.Eventually(t, func() bool {
		var ok bool
		join, ok = proxy.First()
		return ok
	}, 5*time.Second, 10*time.Millisecond)

	var sent, got int
	for range 20 {
		c, err := (&net.Dialer{}).DialContext(context.Background(), "tcp", a.AdvertiseAddr())
		require.NoError(t, err)
		_, err = c.Write(join)
		require.NoError(t, err)
		sent += len(join)
		_ = c.SetReadDeadline(time.Now().Add(time.Second))
		n, _ := io.Copy(io.Discard, c)
		got += int(n)
		c.Close()
	}
	t.Logf("replays=20 bytes_sent=%d bytes_back=%d", sent, got)
	require.Zero(t, got, "a replayed join is answered with nothing")
	require.Positive(t, a.counter("grid_swim_packets_rejected_total", streamgate.RejectReplayed))
}

// One key holder sends records for invented sites in many networks
// (the first round: 600,004 records held, 860 MiB of heap). The store
// keeps its caps, counts what it dropped and says so once per site, and
// an honest site's update still lands.
func TestRecordCapsHoldAgainstAKeyHolder(t *testing.T) {
	a, b := joinedPair(t)
	require.NoError(t, b.Publish("prod", "", providers("pb")))
	require.Eventually(t, func() bool { return len(a.View("prod").Providers) == 1 }, 10*time.Second, 20*time.Millisecond)
	b.mu.Lock()
	ml := b.ml
	b.mu.Unlock()
	target := b.aliveNodes("")[0]
	// Site A takes part in every network of the flood, openly (no grid
	// CA: records are not signed), so the flood meets the caps and not
	// the door.
	for n := range 60 {
		a.SetIdentity(fmt.Sprintf("n%d", n), sites.Identity{Open: true})
	}
	base := heapNow()
	peak := sampleHeap()
	version := uint64(time.Now().UnixNano())
	for m := range 6 {
		var rs []Record
		for j := range 10 {
			for i := range 1000 {
				rs = append(rs, Record{Network: fmt.Sprintf("n%d", m*10+j), Site: fmt.Sprintf("inv-%d", i), Kind: KindProviders,
					Version: version, Providers: []sites.Provider{{Name: "gpt-evil", Models: []string{"m"}, Phase: "Available"}}})
			}
		}
		msg, err := record.EncodeDirectRecords(rs)
		require.NoError(t, err)
		require.Less(t, len(msg), record.MaxMessageBytes)
		require.NoError(t, ml.SendReliable(target, msg))
	}
	require.Eventually(t, func() bool {
		return a.counter("grid_swim_messages_dropped_total", record.DropStoreFull) > 0
	}, 20*time.Second, 50*time.Millisecond)
	grew := int64(peak.finish()) - int64(base)
	t.Logf("records_held=%d heap_growth_mib=%.1f network_full=%v store_full=%v", a.store.Count(), float64(grew)/(1<<20),
		a.counter("grid_swim_messages_dropped_total", record.DropNetworkFull), a.counter("grid_swim_messages_dropped_total", record.DropStoreFull))
	require.LessOrEqual(t, a.store.Count(), record.MaxRecords)
	for n := range 60 {
		// One record per invented site.
		require.LessOrEqual(t, len(a.store.OfNetwork(fmt.Sprintf("n%d", n))), record.MaxSitesPerNetwork)
	}
	require.Positive(t, a.counter("grid_swim_messages_dropped_total", record.DropNetworkFull))
	require.Less(t, grew, int64(160<<20))
	require.LessOrEqual(t, strings.Count(a.logs.String(), "swim_records_over_cap"), maxSaidLines)

	// The honest site's own record, already held, still updates.
	require.NoError(t, b.Publish("prod", "", providers("pb", "pb2")))
	require.Eventually(t, func() bool { return len(a.View("prod").Providers) == 2 }, 10*time.Second, 20*time.Millisecond)
}

// A seed that accepts a connection and never answers holds its own join,
// not the caller: announcing returns within the join wait, the address is
// pending and not dialled again, and another network's seed joins at once.
// A seed that echoes what it is sent is not a member.
func TestSilentAndEchoSeeds(t *testing.T) {
	key := randomKey(t)
	a := startSite(t, "site-a", withKey(key))
	a.waitRunning(t)
	b := startSite(t, "site-b", withKey(key), func(c *siteSetup) { c.JoinWait = 300 * time.Millisecond })
	b.waitRunning(t)

	silent := testnet.Silent(t)
	start := time.Now()
	res := b.AnnounceSeeds("quiet", []string{silent.Addr()})
	took := time.Since(start)
	require.Equal(t, []string{silent.Addr()}, res.Pending)
	require.Empty(t, res.Joined)
	require.Less(t, took, 2*time.Second, "the caller waits the join wait, not memberlist's TCP timeout")

	start = time.Now()
	res = b.AnnounceSeeds("quiet", []string{silent.Addr()})
	require.Less(t, time.Since(start), time.Second)
	require.Equal(t, []string{silent.Addr()}, res.Pending, "still in flight, not dialled again")

	start = time.Now()
	res = b.AnnounceSeeds("prod", []string{a.AdvertiseAddr()})
	t.Logf("silent_seed_announce_ms=%d other_network_join_ms=%d", took.Milliseconds(), time.Since(start).Milliseconds())
	require.Equal(t, []string{a.AdvertiseAddr()}, res.Joined, "another network is not held by the silent seed")
	require.Less(t, time.Since(start), time.Second)
	require.EqualValues(t, 1, silent.Accepted.Load())

	echo := testnet.Echo(t)
	require.Eventually(t, func() bool {
		res = b.AnnounceSeeds("echo", []string{echo.Addr()})
		return len(res.Pending) == 0
	}, 15*time.Second, 100*time.Millisecond)
	require.Empty(t, res.Joined, "an echo is not a member")
	require.Len(t, res.Failed, 1)
	require.Contains(t, res.Failed[0].Err.Error(), "echo")
}

// A compressed frame is refused: gridsync never compresses, and
// compression would hide a push/pull from the gate's checks.
func TestCompressedFramesAreRefused(t *testing.T) {
	key := randomKey(t)
	a := startSite(t, "site-a", withKey(key))
	a.waitRunning(t)
	conf := memberlist.DefaultLANConfig()
	conf.Name = "key-holder"
	conf.BindAddr, conf.BindPort, conf.AdvertisePort = "127.0.0.1", 0, 0
	kr, err := memberlist.NewKeyring(nil, key)
	require.NoError(t, err)
	conf.Keyring, conf.GossipVerifyIncoming, conf.GossipVerifyOutgoing = kr, true, true
	conf.EnableCompression = true
	conf.LogOutput = io.Discard
	ml, err := memberlist.Create(conf)
	require.NoError(t, err)
	t.Cleanup(func() { _ = ml.Shutdown() })
	ap, err := netip.ParseAddrPort(a.AdvertiseAddr())
	require.NoError(t, err)
	msg, err := record.EncodeDirectRecords([]Record{{Network: "prod", Site: "intruder", Kind: KindProviders, Version: 1, Providers: providers("x")}})
	require.NoError(t, err)
	require.NoError(t, ml.SendReliable(&memberlist.Node{Name: "a", Addr: ap.Addr().AsSlice(), Port: ap.Port()}, msg))
	require.Eventually(t, func() bool { return a.counter("grid_swim_packets_rejected_total", streamgate.RejectUnexpectedKind) > 0 }, 30*time.Second, 10*time.Millisecond)
	assert.Zero(t, a.store.Count())
}

// Member addresses come from gossip: with a destination rule, nothing is
// sent to or dialled at an address it refuses.
func TestMemberAddressesKeepTheDestinationRule(t *testing.T) {
	key := randomKey(t)
	a := startSite(t, "site-a", withKey(key))
	a.waitRunning(t)
	var refused atomic.Int32
	b := startSite(t, "site-b", withKey(key), func(c *siteSetup) {
		c.CheckPeer = func(addr netip.Addr) error {
			if addr.IsLoopback() {
				refused.Add(1)
				return errors.New("loopback")
			}
			return nil
		}
	})
	b.waitRunning(t)
	res := b.AnnounceSeeds("prod", []string{a.AdvertiseAddr()})
	require.Len(t, res.Failed, 1)
	assert.Contains(t, res.Failed[0].Err.Error(), "not allowed")
	assert.Positive(t, refused.Load())
	assert.Empty(t, a.Status().Members, "nothing reached the refused address")
}
