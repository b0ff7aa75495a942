package streamgate

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

// fakeDialer times out every connect before the answering one (0: none
// answers), moving its clock by each attempt's timeout, and records the
// timeouts it was given.
type fakeDialer struct {
	clock    time.Time
	answerAt int
	refuse   bool
	attempts []time.Duration
}

func (f *fakeDialer) now() time.Time { return f.clock }

func (f *fakeDialer) dialer(conn net.Conn) func(string, time.Duration) (net.Conn, error) {
	return func(_ string, timeout time.Duration) (net.Conn, error) {
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

func TestAConnectThatTimesOutIsMadeAgainWithinTheStreamTimeout(t *testing.T) {
	s := time.Second
	f := &fakeDialer{clock: time.Unix(0, 0)}
	_, err := connect(f.dialer(nil), "10.0.0.1:7946", 10*s, f.now)
	require.Error(t, err)
	var ne net.Error
	require.True(t, errors.As(err, &ne) && ne.Timeout())
	// 1.5, 1.5, 3, then what is left of the ten seconds.
	require.Equal(t, []time.Duration{1500 * time.Millisecond, 1500 * time.Millisecond, 3 * s, 4 * s}, f.attempts)

	// A short timeout is one attempt of its length.
	f = &fakeDialer{clock: time.Unix(0, 0)}
	_, err = connect(f.dialer(nil), "10.0.0.1:7946", s, f.now)
	require.Error(t, err)
	require.Equal(t, []time.Duration{s}, f.attempts)

	// Past the listed attempts, the last is repeated.
	f = &fakeDialer{clock: time.Unix(0, 0)}
	_, _ = connect(f.dialer(nil), "10.0.0.1:7946", time.Minute, f.now)
	require.Equal(t, []time.Duration{1500 * time.Millisecond, 1500 * time.Millisecond, 3 * s, 6 * s, 6 * s, 6 * s, 6 * s, 6 * s, 6 * s, 6 * s, 6 * s, 6 * s}, f.attempts)
}

func TestAConnectAnsweredOnALaterAttemptIsUsed(t *testing.T) {
	conn, peer := net.Pipe()
	defer func() { _ = conn.Close(); _ = peer.Close() }()
	f := &fakeDialer{clock: time.Unix(0, 0), answerAt: 3}
	c, err := connect(f.dialer(conn), "10.0.0.1:7946", 10*time.Second, f.now)
	require.NoError(t, err)
	require.Equal(t, conn, c)
	require.Len(t, f.attempts, 3)
}

func TestARefusedConnectIsNotMadeAgain(t *testing.T) {
	f := &fakeDialer{clock: time.Unix(0, 0), refuse: true}
	_, err := connect(f.dialer(nil), "10.0.0.1:7946", 10*time.Second, f.now)
	require.ErrorIs(t, err, syscall.ECONNREFUSED)
	require.Len(t, f.attempts, 1)
}
