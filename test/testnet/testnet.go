// Package testnet is loopback network parts for tests: a port free for
// both TCP and UDP, a proxy that keeps what its clients sent, and
// listeners that never answer or echo back.
package testnet

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/gridsync/gridsync/test/testproc"
)

// FreeTCPUDPAddr is a loopback address whose port is free for both TCP
// and UDP (SWIM listens on both).
func FreeTCPUDPAddr(t testing.TB) string {
	t.Helper()
	for range 200 {
		addr := testproc.CandidateAddr() // below the ephemeral range, as FreeAddr's
		l, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", addr)
		if err != nil {
			continue // taken: another
		}
		u, err := (&net.ListenConfig{}).ListenPacket(context.Background(), "udp", addr)
		_ = l.Close()
		if err == nil {
			_ = u.Close()
			if testproc.Claim(addr) { // never a port given out before
				return addr
			}
		}
	}
	t.Fatal("no loopback port free for TCP and UDP")
	return ""
}

// RecordingProxy forwards TCP connections to a target and keeps the bytes
// each client sent: what an eavesdropper captures.
type RecordingProxy struct {
	ln     net.Listener
	mu     sync.Mutex
	client [][]byte
}

// NewRecordingProxy listens on loopback until the test ends.
func NewRecordingProxy(t testing.TB, target string) *RecordingProxy {
	t.Helper()
	ln, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &RecordingProxy{ln: ln}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go p.forward(c, target)
		}
	}()
	return p
}

func (p *RecordingProxy) forward(c net.Conn, target string) {
	defer c.Close()
	up, err := (&net.Dialer{Timeout: 2 * time.Second}).DialContext(context.Background(), "tcp", target)
	if err != nil {
		return
	}
	defer up.Close()
	var rec bytes.Buffer
	done := make(chan struct{})
	go func() { _, _ = io.Copy(c, up); close(done) }()
	_, _ = io.Copy(io.MultiWriter(up, &rec), c)
	<-done
	p.mu.Lock()
	p.client = append(p.client, rec.Bytes())
	p.mu.Unlock()
}

// Addr is where clients connect.
func (p *RecordingProxy) Addr() string { return p.ln.Addr().String() }

// First is the first non-empty capture of a finished connection.
func (p *RecordingProxy) First() ([]byte, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.client {
		if len(c) > 0 {
			return c, true
		}
	}
	return nil, false
}

// Listener accepts on loopback and counts; it holds every connection
// open unanswered, or echoes back what it is sent.
type Listener struct {
	ln       net.Listener
	Accepted atomic.Int32
	mu       sync.Mutex
	held     []net.Conn
}

// Silent accepts and never answers, until the test ends.
func Silent(t testing.TB) *Listener { return listen(t, false) }

// Echo sends back whatever it is sent.
func Echo(t testing.TB) *Listener { return listen(t, true) }

func listen(t testing.TB, echo bool) *Listener {
	t.Helper()
	ln, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := &Listener{ln: ln}
	t.Cleanup(func() {
		_ = ln.Close()
		l.mu.Lock()
		defer l.mu.Unlock()
		for _, c := range l.held {
			_ = c.Close()
		}
	})
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			l.Accepted.Add(1)
			if echo {
				go func() { defer c.Close(); _, _ = io.Copy(c, c) }()
				continue
			}
			l.mu.Lock()
			l.held = append(l.held, c)
			l.mu.Unlock()
		}
	}()
	return l
}

// Addr is where the listener listens.
func (l *Listener) Addr() string { return l.ln.Addr().String() }

// Hammer has clients goroutines GET url in a loop, each with its own
// client and a 5 s timeout, until the returned stop is called (which
// waits for them).
func Hammer(url string, clients int) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			client := &http.Client{Timeout: 5 * time.Second}
			for {
				select {
				case <-done:
					return
				default:
				}
				req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, url, http.NoBody)
				if err != nil {
					return
				}
				if resp, err := client.Do(req); err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					_ = resp.Body.Close()
				}
			}
		}()
	}
	return func() {
		close(done)
		wg.Wait()
	}
}

// KeyHolder is a memberlist node holding the grid's SWIM key on loopback:
// what a peer site (or whoever has the key) can do, without gridsync's
// own checks. It sends uncompressed frames (gridsync refuses compressed
// ones outright) and stops when the test ends.
func KeyHolder(t testing.TB, key []byte) *memberlist.Memberlist {
	t.Helper()
	conf := memberlist.DefaultLANConfig()
	conf.Name = fmt.Sprintf("key-holder/%d", time.Now().UnixNano())
	conf.BindAddr, conf.BindPort, conf.AdvertisePort = "127.0.0.1", 0, 0
	kr, err := memberlist.NewKeyring(nil, key)
	if err != nil {
		t.Fatal(err)
	}
	conf.Keyring = kr
	conf.GossipVerifyIncoming, conf.GossipVerifyOutgoing = true, true
	conf.EnableCompression = false
	conf.Logger = log.New(io.Discard, "", 0)
	conf.LogOutput = nil
	ml, err := memberlist.Create(conf)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ml.Shutdown() })
	return ml
}
