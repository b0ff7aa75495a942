package testwan

import (
	"container/heap"
	"net/netip"
	"os"
	"sync"
	"time"
)

// read takes every packet site i sends and routes it, until the lab
// closes the device.
func (l *Lab) read(i int, port *os.File) {
	defer l.wg.Done()
	buf := make([]byte, 1<<16)
	for {
		n, err := port.Read(buf)
		if err != nil {
			return
		}
		l.route(i, buf[:n], time.Now())
	}
}

// route decides what becomes of one packet from site from.
func (l *Lab) route(from int, pkt []byte, now time.Time) {
	l.stats.sent[from].Add(int64(len(pkt)))
	// IPv4 only: the lab's addresses are. Anything else a kernel sends
	// on its own (router solicitations) goes nowhere.
	if len(pkt) < 20 || pkt[0]>>4 != 4 {
		l.stats.unroutable.Add(1)
		return
	}
	to, at, ok := l.transit(from, netip.AddrFrom4([4]byte(pkt[16:20])), len(pkt), now)
	if !ok {
		return
	}
	l.sched.add(at, to, append([]byte(nil), pkt...))
}

// transit applies the link from from to the site dst belongs to to a
// packet of size bytes sent at now: whether it is dropped, else where and
// when it arrives.
func (l *Lab) transit(from int, dst netip.Addr, size int, now time.Time) (int, time.Time, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	to, ok := l.owner[dst]
	if !ok || to == from {
		l.stats.unroutable.Add(1)
		return 0, time.Time{}, false
	}
	key := [2]int{from, to}
	if l.cut[key] {
		l.stats.cut.Add(1)
		return 0, time.Time{}, false
	}
	link, ok := l.links[key]
	if !ok {
		link = l.dflt
	}
	if link.Loss > 0 && l.rnd.Float64() < link.Loss {
		l.stats.lost.Add(1)
		return 0, time.Time{}, false
	}
	depart := now
	if link.Rate > 0 {
		// The packet leaves once those queued before it have, taking its
		// own serialisation time.
		start := now
		if b := l.busy[key]; b.After(now) {
			start = b
		}
		if start.Sub(now) > QueueDelay {
			l.stats.queueFull.Add(1)
			return 0, time.Time{}, false
		}
		depart = start.Add(time.Duration(int64(size) * 8 * int64(time.Second) / link.Rate))
		l.busy[key] = depart
	}
	delay := link.Delay
	if link.Jitter > 0 {
		delay += time.Duration(l.rnd.Int64N(int64(2*link.Jitter)+1)) - link.Jitter
	}
	return to, depart.Add(max(delay, 0)), true
}

// deliver writes a packet into its site's device.
func (l *Lab) deliver(to int, pkt []byte) {
	if _, err := l.ports[to].Write(pkt); err == nil {
		l.stats.forwarded.Add(1)
		l.stats.received[to].Add(int64(len(pkt)))
	}
}

// scheduler holds packets until their time and hands them to deliver in
// the order of their times (of equal times, in the order they came: a
// link without jitter never reorders).
type scheduler struct {
	deliver func(to int, pkt []byte)

	mu    sync.Mutex
	queue packetHeap
	seq   uint64
	wake  chan struct{}
	done  chan struct{}
	ended chan struct{}
}

type heldPacket struct {
	at  time.Time
	seq uint64
	to  int
	pkt []byte
}

type packetHeap []heldPacket

func (h packetHeap) Len() int { return len(h) }
func (h packetHeap) Less(i, j int) bool {
	if !h[i].at.Equal(h[j].at) {
		return h[i].at.Before(h[j].at)
	}
	return h[i].seq < h[j].seq
}
func (h packetHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *packetHeap) Push(x any)   { *h = append(*h, x.(heldPacket)) }
func (h *packetHeap) Pop() any {
	old := *h
	p := old[len(old)-1]
	*h = old[:len(old)-1]
	return p
}

func newScheduler(deliver func(int, []byte)) *scheduler {
	s := &scheduler{deliver: deliver, wake: make(chan struct{}, 1), done: make(chan struct{}), ended: make(chan struct{})}
	go s.run()
	return s
}

func (s *scheduler) add(at time.Time, to int, pkt []byte) {
	s.mu.Lock()
	s.seq++
	heap.Push(&s.queue, heldPacket{at: at, seq: s.seq, to: to, pkt: pkt})
	first := s.queue[0].seq == s.seq
	s.mu.Unlock()
	if first {
		select {
		case s.wake <- struct{}{}:
		default:
		}
	}
}

func (s *scheduler) run() {
	defer close(s.ended)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	var due []heldPacket
	for {
		now := time.Now()
		s.mu.Lock()
		due = due[:0]
		for len(s.queue) > 0 && !s.queue[0].at.After(now) {
			due = append(due, heap.Pop(&s.queue).(heldPacket))
		}
		next := time.Hour
		if len(s.queue) > 0 {
			next = s.queue[0].at.Sub(now)
		}
		s.mu.Unlock()
		for _, p := range due {
			s.deliver(p.to, p.pkt)
		}
		if len(due) > 0 {
			continue // time passed while delivering
		}
		timer.Reset(next)
		select {
		case <-s.done:
			return
		case <-s.wake:
		case <-timer.C:
		}
	}
}

func (s *scheduler) stop() {
	close(s.done)
	<-s.ended
}
