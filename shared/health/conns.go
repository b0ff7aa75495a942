package health

import (
	"net"
	"net/http"
	"sync"
	"time"
)

// connTable caps the connections served at once without ever leaving a
// probe waiting behind them. The port is reachable by whatever can reach
// the pod, and the kubelet's probes give up after a second: a limit that
// makes new connections wait (a listener that stops accepting) lets forty
// idle keep-alive connections starve every probe until the pod is
// restarted. Here a new connection past the cap takes the place of one
// that carries no request (idle between requests, or connected and silent
// the longest), which is closed; a connection carrying a request is never
// closed for a newcomer. Requests are short (/metrics renders are few at
// once and bounded in time), so a slot is always to be had.
type connTable struct {
	max int

	mu    sync.Mutex
	conns map[net.Conn]*connInfo
}

type connInfo struct {
	state http.ConnState
	since time.Time
}

func newConnTable(max int) *connTable {
	return &connTable{max: max, conns: map[net.Conn]*connInfo{}}
}

// track is the server's ConnState hook.
func (t *connTable) track(c net.Conn, s http.ConnState) {
	t.mu.Lock()
	defer t.mu.Unlock()
	switch s {
	case http.StateClosed, http.StateHijacked:
		delete(t.conns, c)
	default:
		t.conns[c] = &connInfo{state: s, since: time.Now()}
	}
}

// makeRoom closes, when the table is full, the connection that carries no
// request and has waited longest (idle ones first); it reports whether a
// place is free.
func (t *connTable) makeRoom() bool {
	t.mu.Lock()
	if len(t.conns) < t.max {
		t.mu.Unlock()
		return true
	}
	var victim net.Conn
	var best *connInfo
	for c, info := range t.conns {
		if info.state == http.StateActive {
			continue
		}
		if best == nil || rank(info) < rank(best) || rank(info) == rank(best) && info.since.Before(best.since) {
			victim, best = c, info
		}
	}
	if victim != nil {
		delete(t.conns, victim)
	}
	t.mu.Unlock()
	if victim == nil {
		return false
	}
	_ = victim.Close()
	return true
}

// rank orders the connections given up for a newcomer: idle between
// requests before connected and silent.
func rank(i *connInfo) int {
	if i.state == http.StateIdle {
		return 0
	}
	return 1
}

// evictingListener accepts every connection, making room for it.
type evictingListener struct {
	net.Listener
	table *connTable
}

func (l *evictingListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if l.table.makeRoom() {
			return c, nil
		}
		// Every place carries a request: this one is refused at once
		// rather than held.
		_ = c.Close()
	}
}
