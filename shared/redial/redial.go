// Package redial makes a TCP connection in fresh attempts rather than
// leaving a lost SYN to the kernel. Linux sends a SYN that was not
// answered again 1 s after the first, then 3 s and 7 s after it: over a
// lossy wide-area link, two lost SYNs (or their answers) hold a
// connection 3 s and three hold it 7 s, past the bounds of a probe or a
// gossip stream. A new connect after 1.5 s sends a SYN at 0, 1 (the
// kernel's again), 1.5, 2.5 and 3 s instead. The attempts then grow, so
// that a path whose round trip is seconds long still connects.
package redial

import (
	"context"
	"errors"
	"net"
	"time"
)

// Attempts are how long each connect is given before a new one is made,
// the last repeated until the caller's timeout.
var Attempts = []time.Duration{1500 * time.Millisecond, 1500 * time.Millisecond, 3 * time.Second, 6 * time.Second}

// Connect is one connect attempt, bounded by timeout.
type Connect func(ctx context.Context, timeout time.Duration) (net.Conn, error)

// Dial connects within timeout (and ctx's deadline, the sooner), a new
// attempt after each one that timed out. An error that is not a timeout
// (a refusal, an unreachable network, ctx cancelled) ends it at once.
func Dial(ctx context.Context, timeout time.Duration, connect Connect) (net.Conn, error) {
	return dial(ctx, timeout, connect, time.Now)
}

func dial(ctx context.Context, timeout time.Duration, connect Connect, now func() time.Time) (net.Conn, error) {
	deadline := now().Add(timeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	for i := 0; ; i++ {
		left := deadline.Sub(now())
		attempt := Attempts[min(i, len(Attempts)-1)]
		c, err := connect(ctx, min(left, attempt))
		var ne net.Error
		if err == nil || !errors.As(err, &ne) || !ne.Timeout() || left <= attempt || ctx.Err() != nil {
			return c, err
		}
	}
}

// Dialer is Dial over a dial function of net.Dialer's shape: each attempt
// is dial bounded by a context of its own.
func Dialer(timeout time.Duration, dial func(ctx context.Context, network, addr string) (net.Conn, error)) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		return Dial(ctx, timeout, func(ctx context.Context, d time.Duration) (net.Conn, error) {
			ctx, cancel := context.WithTimeout(ctx, d)
			defer cancel()
			return dial(ctx, network, addr)
		})
	}
}
