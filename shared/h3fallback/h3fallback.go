// Package h3fallback is what the clients that speak HTTP/3 first and HTTPS
// when it fails (the sidecar's delivery reports, the agent's signals poll)
// remember of a peer: that QUIC failed to it lately. A path that drops UDP
// would otherwise cost a QUIC wait before every exchange; one that lets
// UDP through again gets HTTP/3 back once the fallback has run out.
package h3fallback

import (
	"sync"
	"time"
)

// The transports, as the clients' metrics label them.
const (
	H3    = "h3"
	HTTPS = "https"
)

// Memory holds, per peer, until when HTTPS is used alone. The zero value
// (with For set) holds nothing; it is safe for concurrent use.
type Memory struct {
	// For is how long a peer is spoken to over HTTPS alone after QUIC
	// failed to it.
	For time.Duration

	mu    sync.Mutex
	until map[string]time.Time
}

// First is the transport to try first with peer at now: HTTPS while its
// fallback lasts, else H3.
func (m *Memory) First(peer string, now time.Time) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	until, ok := m.until[peer]
	switch {
	case !ok:
		return H3
	case now.Before(until):
		return HTTPS
	}
	delete(m.until, peer)
	return H3
}

// Failed starts peer's fallback at now: QUIC got no handshake, or its
// exchange failed.
func (m *Memory) Failed(peer string, now time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.until == nil {
		m.until = map[string]time.Time{}
	}
	// The fallbacks that ran out go too: a peer that is never spoken to
	// again (a site that left) is not held for good.
	for p, until := range m.until {
		if !now.Before(until) {
			delete(m.until, p)
		}
	}
	m.until[peer] = now.Add(m.For)
}

// Clear ends peer's fallback: HTTP/3 served it, or HTTPS failed too (the
// peer was unreachable rather than QUIC-less, and is spoken to over
// HTTP/3 first again once it is back).
func (m *Memory) Clear(peer string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.until, peer)
}
