package redial

import (
	"context"
	"errors"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// fakeConnect times out every attempt before the answering one (0: none
// answers), moving its clock by each attempt's timeout, and records the
// timeouts it was given.
type fakeConnect struct {
	clock    time.Time
	answerAt int
	refuse   bool
	attempts []time.Duration
}

func (f *fakeConnect) now() time.Time { return f.clock }

func (f *fakeConnect) connect(conn net.Conn) Connect {
	return func(_ context.Context, timeout time.Duration) (net.Conn, error) {
		f.attempts = append(f.attempts, timeout)
		switch {
		case f.refuse:
			return nil, &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
		case len(f.attempts) == f.answerAt:
			return conn, nil
		}
		f.clock = f.clock.Add(timeout)
		return nil, &net.OpError{Op: "dial", Net: "tcp", Err: context.DeadlineExceeded}
	}
}

func TestAConnectThatTimesOutIsMadeAgainWithinTheTimeout(t *testing.T) {
	s := time.Second
	ctx := context.Background()
	f := &fakeConnect{clock: time.Unix(0, 0)}
	_, err := dial(ctx, 10*s, f.connect(nil), f.now)
	require.Error(t, err)
	var ne net.Error
	require.True(t, errors.As(err, &ne) && ne.Timeout())
	// 1.5, 1.5, 3, then what is left of the ten seconds.
	require.Equal(t, []time.Duration{1500 * time.Millisecond, 1500 * time.Millisecond, 3 * s, 4 * s}, f.attempts)

	// A short timeout is one attempt of its length.
	f = &fakeConnect{clock: time.Unix(0, 0)}
	_, err = dial(ctx, s, f.connect(nil), f.now)
	require.Error(t, err)
	require.Equal(t, []time.Duration{s}, f.attempts)

	// Past the listed attempts, the last is repeated.
	f = &fakeConnect{clock: time.Unix(0, 0)}
	_, _ = dial(ctx, time.Minute, f.connect(nil), f.now)
	require.Equal(t, []time.Duration{1500 * time.Millisecond, 1500 * time.Millisecond, 3 * s, 6 * s, 6 * s, 6 * s, 6 * s, 6 * s, 6 * s, 6 * s, 6 * s, 6 * s}, f.attempts)

	// A context's deadline sooner than the timeout bounds the attempts.
	f = &fakeConnect{clock: time.Now()}
	dctx, cancel := context.WithDeadline(ctx, f.clock.Add(2*s))
	defer cancel()
	_, _ = dial(dctx, 10*s, f.connect(nil), f.now)
	require.Equal(t, []time.Duration{1500 * time.Millisecond, 500 * time.Millisecond}, f.attempts)
}

func TestAConnectAnsweredOnALaterAttemptIsUsed(t *testing.T) {
	conn, peer := net.Pipe()
	defer func() { _ = conn.Close(); _ = peer.Close() }()
	f := &fakeConnect{clock: time.Unix(0, 0), answerAt: 3}
	c, err := dial(context.Background(), 10*time.Second, f.connect(conn), f.now)
	require.NoError(t, err)
	require.Equal(t, conn, c)
	require.Len(t, f.attempts, 3)
}

func TestARefusedConnectIsNotMadeAgain(t *testing.T) {
	f := &fakeConnect{clock: time.Unix(0, 0), refuse: true}
	_, err := dial(context.Background(), 10*time.Second, f.connect(nil), f.now)
	require.ErrorIs(t, err, syscall.ECONNREFUSED)
	require.Len(t, f.attempts, 1)
}

// Dialer gives each attempt a context of its own bound, makes a new one
// after each that timed out, and gives up at the caller's timeout.
func TestDialerBoundsEachAttemptWithItsOwnContext(t *testing.T) {
	var seen []time.Duration
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		d, ok := ctx.Deadline()
		require.True(t, ok, "each attempt has a deadline")
		seen = append(seen, time.Until(d).Round(100*time.Millisecond))
		<-ctx.Done()
		return nil, &net.OpError{Op: "dial", Net: network, Err: ctx.Err()}
	}
	start := time.Now()
	_, err := Dialer(2*time.Second, dial)(context.Background(), "tcp", "127.0.0.1:1")
	require.Error(t, err)
	require.Equal(t, []time.Duration{1500 * time.Millisecond, 500 * time.Millisecond}, seen)
	require.InDelta(t, 2.0, time.Since(start).Seconds(), 0.3)
}
