// Package testwan emulates a wide-area network between sites for tests
// and benchmarks, on one machine and without touching its own network.
//
// Each site is a network namespace of its own. Its one route to the other
// sites leaves through a TUN device whose other end is this process: a
// userspace router reads every IP packet a site sends, decides from the
// link between the two sites whether it is dropped (loss, a partition, a
// full queue), holds it for the link's delay and jitter, paces it to the
// link's rate, and writes it into the destination's TUN device. The
// kernel's own netem is not needed (and not available on every machine);
// what the router does to a packet is the same whatever the protocol, so
// UDP (SWIM, QUIC) and TCP (streams, HTTPS) cross the same link, with
// their real source addresses.
//
// Address translation is the kernel's: a site exposed behind a load
// balancer address is reached at that address, which nftables in its
// namespace translates to the address it binds (as kube-proxy does for a
// NodePort), and a site that may dial out but not be dialled drops every
// new inbound flow.
//
// Addresses live only inside the namespaces the lab makes: sites are
// 10.203.0.0/16, load balancer addresses 10.204.0.0/16. Nothing is routed
// to or from the host. It needs root, /dev/net/tun, iproute2 and nft.
package testwan

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gridsync/gridsync/test/testnetns"
)

// Link is what one direction of the path between two sites does to the
// packets that cross it.
type Link struct {
	// Delay is the one-way delay: a round trip over two such links takes
	// twice it.
	Delay time.Duration
	// Jitter spreads each packet's delay uniformly over Delay±Jitter.
	// Packets sent closer together than the spread overtake one another
	// (reordering), as with netem's jitter.
	Jitter time.Duration
	// Loss is the fraction of packets dropped, each independently.
	Loss float64
	// Rate bounds the link's bits per second (0: unbounded). Packets wait
	// their turn behind the link's queue, which holds at most QueueDelay
	// of traffic at the rate; past it they are dropped.
	Rate int64
}

// QueueDelay is how much traffic a rate-bound link queues, in time at its
// rate: a packet that would wait longer is dropped, as at a router's full
// buffer.
const QueueDelay = 100 * time.Millisecond

// Options are a lab's sites and their links.
type Options struct {
	// Sites is how many sites (namespaces) the lab has.
	Sites int
	// Link applies to every direction of every path until SetLink says
	// otherwise.
	Link Link
	// Seed makes the drops and the jitter repeatable; zero draws one.
	Seed uint64
	// Namespaces, when set, are the sites: existing network namespaces
	// (by name) the lab joins instead of making its own, one site each
	// (Sites is then their count). A real node's namespace, say, whose
	// pods reach the other sites through it. They are left in place.
	Namespaces []string
}

// Lab is a set of sites joined by emulated links.
type Lab struct {
	names []string
	made  []string // the namespaces the lab made, removed by Close
	addrs []netip.Addr
	ports []*os.File
	owner map[netip.Addr]int // site address or exposed address -> site

	mu      sync.Mutex
	rnd     *rand.Rand
	dflt    Link
	links   map[[2]int]Link
	cut     map[[2]int]bool
	busy    map[[2]int]time.Time // a rate-bound link's queue drains at this time
	exposed map[int]netip.Addr

	sched *scheduler
	stats counters
	wg    sync.WaitGroup
}

// Stats are what the router did, since the lab started.
type Stats struct {
	Forwarded, Lost, Cut, QueueFull, Unroutable int64
}

type counters struct {
	forwarded, lost, cut, queueFull, unroutable atomic.Int64
	sent, received                              []atomic.Int64 // IP bytes, by site
}

// Prefixes of the lab's addresses.
var (
	SitePrefix    = netip.MustParsePrefix("10.203.0.0/16")
	ExposedPrefix = netip.MustParsePrefix("10.204.0.0/16")
)

// device is the TUN device's name in every site's namespace.
const device = "wan0"

// nsPrefix starts every lab namespace's name; the process ID follows, so
// that namespaces a killed test left behind are found and removed.
const nsPrefix = "gswan"

var labs atomic.Int64

// Main is the TestMain of a package whose tests use the lab: it needs
// root, and without it the package fails (never skips: these tests are
// what says anything holds over a WAN).
func Main(m *testing.M) {
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "testwan: the WAN lab needs root (network namespaces, TUN devices, nftables)")
		os.Exit(1)
	}
	os.Exit(m.Run())
}

// New makes the lab's sites and starts its router; both go when the test
// ends.
func New(t testing.TB, opts Options) *Lab {
	t.Helper()
	l, err := Open(opts)
	if err != nil {
		t.Fatalf("testwan: %v", err)
	}
	t.Cleanup(l.Close)
	return l
}

// Open is New for a caller that is not a test (the demo): Close removes
// what it made.
func Open(opts Options) (*Lab, error) {
	if len(opts.Namespaces) > 0 {
		opts.Sites = len(opts.Namespaces)
	}
	if opts.Sites < 1 || opts.Sites > 65000 {
		return nil, fmt.Errorf("%d sites: between 1 and 65000", opts.Sites)
	}
	if os.Geteuid() != 0 {
		return nil, fmt.Errorf("the WAN lab needs root (network namespaces, TUN devices, nftables)")
	}
	removeLeftovers()
	seed := opts.Seed
	if seed == 0 {
		seed = rand.Uint64()
	}
	l := &Lab{
		owner: map[netip.Addr]int{}, rnd: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		dflt: opts.Link, links: map[[2]int]Link{}, cut: map[[2]int]bool{}, busy: map[[2]int]time.Time{},
		exposed: map[int]netip.Addr{},
	}
	l.stats.sent = make([]atomic.Int64, opts.Sites)
	l.stats.received = make([]atomic.Int64, opts.Sites)
	l.sched = newScheduler(l.deliver)
	id := labs.Add(1)
	ctx := context.Background()
	for i := range opts.Sites {
		addr := hostAddr(SitePrefix, i)
		var name string
		if len(opts.Namespaces) > 0 {
			name = opts.Namespaces[i]
		} else {
			name = fmt.Sprintf("%s%d-%d-%d", nsPrefix, os.Getpid(), id, i)
			if err := testnetns.Add(ctx, name); err != nil {
				l.Close()
				return nil, err
			}
			l.made = append(l.made, name)
		}
		l.names = append(l.names, name)
		port, err := openTUN(testnetns.Path(name), device)
		if err != nil {
			l.Close()
			return nil, fmt.Errorf("site %d: %w", i, err)
		}
		l.ports = append(l.ports, port)
		l.addrs = append(l.addrs, addr)
		l.owner[addr] = i
		// The site's address on its device, and the lab's two prefixes
		// through it: nothing else is routed anywhere.
		batch := strings.Join([]string{
			"addr add " + addr.String() + "/32 dev " + device,
			"link set " + device + " up",
			"route add " + SitePrefix.String() + " dev " + device,
			"route add " + ExposedPrefix.String() + " dev " + device,
		}, "\n")
		if err := ipBatch(ctx, name, batch); err != nil {
			l.Close()
			return nil, fmt.Errorf("site %d: %w", i, err)
		}
	}
	for i, port := range l.ports {
		l.wg.Add(1)
		go l.read(i, port)
	}
	return l, nil
}

// hostAddr is the i-th host address of prefix (a /16), skipping .0.
func hostAddr(prefix netip.Prefix, i int) netip.Addr {
	b := prefix.Addr().As4()
	k := i + 1
	b[2], b[3] = byte(k>>8), byte(k)
	return netip.AddrFrom4(b)
}

func ipBatch(ctx context.Context, ns, batch string) error {
	cmd := exec.CommandContext(ctx, "ip", "-n", ns, "-batch", "-")
	cmd.Stdin = strings.NewReader(batch + "\n")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("ip -n %s -batch: %w: %s", ns, err, out)
	}
	return nil
}

// removeLeftovers deletes the namespaces of lab processes that are gone
// (a test killed before its cleanup ran).
func removeLeftovers() {
	entries, _ := os.ReadDir("/run/netns")
	for _, e := range entries {
		rest, ok := strings.CutPrefix(e.Name(), nsPrefix)
		if !ok {
			continue
		}
		pidText, _, _ := strings.Cut(rest, "-")
		pid, err := strconv.Atoi(pidText)
		if err != nil {
			continue
		}
		if _, err := os.Stat(filepath.Join("/proc", strconv.Itoa(pid))); os.IsNotExist(err) {
			_ = testnetns.Delete(context.Background(), e.Name())
		}
	}
}

// Close stops the router and removes the namespaces the lab made. An
// adopted namespace (Options.Namespaces) stays, its device gone with the
// router's end of it.
func (l *Lab) Close() {
	l.sched.stop()
	for _, p := range l.ports {
		_ = p.Close()
	}
	l.wg.Wait()
	for _, name := range l.made {
		_ = testnetns.Delete(context.Background(), name)
	}
}

// Sites is how many sites the lab has.
func (l *Lab) Sites() int { return len(l.addrs) }

// Addr is site i's own address, the one it binds.
func (l *Lab) Addr(i int) netip.Addr { return l.addrs[i] }

// Namespace is the path of site i's network namespace (for nsenter or
// a process's --net).
func (l *Lab) Namespace(i int) string { return testnetns.Path(l.names[i]) }

// Name is site i's namespace's name (for ip netns exec).
func (l *Lab) Name(i int) string { return l.names[i] }

// Do runs fn with its thread in site i's namespace: the sockets fn
// creates are the site's.
func (l *Lab) Do(i int, fn func() error) error { return testnetns.Do(l.Namespace(i), fn) }

// Dial dials addr from site i.
func (l *Lab) Dial(ctx context.Context, i int, network, addr string) (net.Conn, error) {
	return testnetns.Dial(ctx, l.Namespace(i), network, addr)
}

// Listen listens for TCP on addr at site i.
func (l *Lab) Listen(i int, addr string) (net.Listener, error) {
	return testnetns.Listen(l.Namespace(i), addr)
}

// ListenPacket listens for UDP on addr at site i.
func (l *Lab) ListenPacket(i int, addr string) (net.PacketConn, error) {
	return testnetns.ListenPacket(l.Namespace(i), addr)
}

// SetLink sets the direction from site a to site b.
func (l *Lab) SetLink(from, to int, link Link) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.links[[2]int{from, to}] = link
}

// SetPath sets both directions between a and b.
func (l *Lab) SetPath(a, b int, link Link) {
	l.SetLink(a, b, link)
	l.SetLink(b, a, link)
}

// SetAllLinks sets every direction of every path.
func (l *Lab) SetAllLinks(link Link) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.dflt = link
	clear(l.links)
}

// Partition cuts every path between a site of one group and a site of
// another, both ways, until Heal.
func (l *Lab) Partition(groups ...[]int) {
	for gi, g := range groups {
		for gj, h := range groups {
			if gi != gj {
				l.CutOneWay(g, h)
			}
		}
	}
}

// CutOneWay drops every packet from a site of from to a site of to; the
// other direction still passes.
func (l *Lab) CutOneWay(from, to []int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, a := range from {
		for _, b := range to {
			l.cut[[2]int{a, b}] = true
		}
	}
}

// Heal ends every cut.
func (l *Lab) Heal() {
	l.mu.Lock()
	defer l.mu.Unlock()
	clear(l.cut)
}

// Range is the sites from..to-1, for Partition.
func Range(from, to int) []int {
	out := make([]int, 0, to-from)
	for i := from; i < to; i++ {
		out = append(out, i)
	}
	return out
}

// Stats is what the router did so far.
func (l *Lab) Stats() Stats {
	return Stats{
		Forwarded: l.stats.forwarded.Load(), Lost: l.stats.lost.Load(), Cut: l.stats.cut.Load(),
		QueueFull: l.stats.queueFull.Load(), Unroutable: l.stats.unroutable.Load(),
	}
}

// SentBytes is the IP bytes site i sent (headers included), delivered or
// not.
func (l *Lab) SentBytes(i int) int64 { return l.stats.sent[i].Load() }

// ReceivedBytes is the IP bytes delivered to site i.
func (l *Lab) ReceivedBytes(i int) int64 { return l.stats.received[i].Load() }
