// Package testproc runs the gridsync binaries as child processes in
// tests, the way a pod runs them, and talks to their health ports.
package testproc

import (
	"context"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Proc is a binary running as a child process.
type Proc struct {
	Cmd    *exec.Cmd
	output Buffer
	exited chan struct{}
	err    error
}

func (pr *Proc) Write(b []byte) (int, error) { return pr.output.Write(b) }

// Log is everything the process wrote to stdout and stderr.
func (pr *Proc) Log() string { return pr.output.String() }

// Start runs path with args and the test's environment plus env. The
// process is killed when the test ends, and its output logged if the test
// failed.
func Start(t testing.TB, path string, env []string, args ...string) *Proc {
	t.Helper()
	pr := &Proc{exited: make(chan struct{})}
	pr.Cmd = exec.Command(path, args...) //nolint:noctx // stopped by signals in the test
	pr.Cmd.Env = append(os.Environ(), env...)
	pr.Cmd.Stdout = pr
	pr.Cmd.Stderr = pr
	pr.Cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	require.NoError(t, pr.Cmd.Start())
	go func() {
		pr.err = pr.Cmd.Wait()
		close(pr.exited)
	}()
	t.Cleanup(func() {
		_ = pr.Cmd.Process.Kill()
		<-pr.exited
		if t.Failed() {
			t.Logf("%s output:\n%s", path, pr.Log())
		}
	})
	return pr
}

// Wait returns the exit code, failing the test after timeout.
func (pr *Proc) Wait(t testing.TB, timeout time.Duration) int {
	t.Helper()
	select {
	case <-pr.exited:
	case <-time.After(timeout):
		t.Fatalf("did not exit within %s; output:\n%s", timeout, pr.Log())
	}
	if pr.err == nil {
		return 0
	}
	if exit, ok := pr.err.(*exec.ExitError); ok { //nolint:errorlint // Wait returns it unwrapped
		return exit.ExitCode()
	}
	t.Fatalf("wait: %v", pr.err)
	return -1
}

// Running reports whether the process has not exited.
func (pr *Proc) Running() bool {
	select {
	case <-pr.exited:
		return false
	default:
		return true
	}
}

// FreeAddr is a loopback TCP address nobody listens on.
//
// The kernel may hand the same free port to two binds in a row once the
// first is closed, so a port already given out in this process is never
// given again: an agent given one address for its health port and
// another for its signals listener once got the same port twice, and
// exited on the second bind.
func FreeAddr(t testing.TB) string {
	t.Helper()
	for range 200 {
		addr := CandidateAddr()
		l, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", addr)
		if err != nil {
			continue // taken: another
		}
		require.NoError(t, l.Close())
		if Claim(addr) {
			return addr
		}
	}
	t.Fatal("no loopback port free that this process has not given out")
	return ""
}

// The ports free-port helpers give out lie below the kernel's ephemeral
// range (32768 to 60999 here): a port found free there and handed to a
// process that binds it a moment later could be taken meanwhile by any
// outgoing connection of the machine (a run makes thousands), which
// happened in full runs (a site's agent failed to start: address already
// in use). Below it, only another test's helper picks, at random.
const (
	firstPort = 20000
	lastPort  = 32767
)

// CandidateAddr is a loopback address of a port below the ephemeral
// range, at random: free-port helpers try binding it, and take it only
// when that works and it was not given out before (Claim).
func CandidateAddr() string {
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(firstPort+rand.IntN(lastPort-firstPort+1)))
}

// handedOut are the addresses FreeAddr and its kin gave out in this
// process.
var handedOut sync.Map

// Claim records addr as given out, and reports whether it was not
// before: a helper that finds free ports gives only claimed ones.
func Claim(addr string) bool {
	_, had := handedOut.LoadOrStore(addr, struct{}{})
	return !had
}

// WaitOK waits up to 10 s for url to answer 200.
func WaitOK(t testing.TB, url string) {
	t.Helper()
	var last string
	require.Eventually(t, func() bool {
		code, body := Get(t, url)
		last = body
		return code == 200
	}, 10*time.Second, 10*time.Millisecond, "%s never answered 200; last: %s", url, last)
}

// Get returns url's status code and body; a failed request is code 0 with
// the error as the body.
func Get(t testing.TB, url string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, url, http.NoBody)
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(body)
}
